"""``kg``: AgentBench's knowledge-graph task — answer a question with graph tools over SPARQL.

The model gets AgentBench's system prompt and the question with its entity names, calls the seven
tools (variables ``#0``, ``#1``, … are numbered in the order tools create them) and ends with the
text ``Final Answer: #k``. Reward is 1 when the answer set equals the gold set; ``f1`` is reported
as a metric (AgentBench's ``score``). 15 rounds.

Variables are programs (see :mod:`.program`): the store is queried to list a variable's
relations or attributes (also to check the argument of ``get_neighbors``/``argmax``/``argmin``)
and to score the final answer. Every session shares its worker's store (:mod:`.stores`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from pydantic import Field, model_validator

from agentrl_envs.errors import ToolCallError
from agentrl_envs.protocol.agentrl import SampleStatus
from agentrl_envs.task import Task, TaskConfig, tool

from .arguments import read_argument
from .ontology import Ontology, load_ontology
from .program import And, Arg, Count, Entity, Join, Program, agentbench_cannot_score, predicates_query, select_query
from .prompts import opening_messages
from .samples import gold_answers, load_file, load_split
from .stores import EmbeddedStore, RemoteStore, SparqlStore

_FINAL = re.compile(r"(?:Find|Final) Answer: #(\d+)")
NO_CALL = "No valid function calls found! Need to recheck the function calls."


class KGConfig(TaskConfig):
    """Options of the KG task.

    Store:
        backend: ``embedded`` (pyoxigraph in the worker) or ``remote`` (a SPARQL 1.1 endpoint).
        graph: N-Triples/Turtle file for the embedded store (unset: the generated default graph).
        endpoint: URL of the SPARQL endpoint (``remote`` only), e.g. ``http://127.0.0.1:8890/sparql``.
        default_graph_uri: the graph the queries read (``remote`` only; the SPARQL protocol's
            ``default-graph-uri``); unset: the endpoint's default (Virtuoso: all its graphs).
        ontology: a directory with AgentBench's ``fb_roles`` and ``vocab.json`` (unset: the
            generated graph's ontology); give AgentBench's own for a real Freebase.

    Episode:
        one_shot: prepend AgentBench's one-shot example (its ``kg-std`` config does).
        max_turns: round limit of every session (unset: the sample's ``max_turns``, else 15).
        query_timeout_s: seconds one remote query may take.
    """

    backend: Literal["embedded", "remote"] = Field(
        "embedded", description="'embedded' (pyoxigraph) or 'remote' (SPARQL endpoint)."
    )
    graph: str | None = Field(None, description="N-Triples/Turtle file for the embedded store (unset: the generated graph).")
    endpoint: str | None = Field(None, description="SPARQL 1.1 endpoint URL (backend 'remote').")
    default_graph_uri: str | None = Field(
        None, description="Graph the remote queries read (SPARQL default-graph-uri; unset: the endpoint's default)."
    )
    ontology: str | None = Field(None, description="Directory with AgentBench's fb_roles and vocab.json.")
    one_shot: bool = Field(False, description="Prepend AgentBench's one-shot example.")
    query_timeout_s: float = Field(30.0, gt=0, description="Seconds one remote query may take.")

    @model_validator(mode="after")
    def _check(self) -> KGConfig:
        if self.backend == "remote" and not self.endpoint:
            raise ValueError("backend 'remote' needs endpoint, e.g. --option endpoint=http://127.0.0.1:8890/sparql")
        if self.backend == "remote" and self.graph:
            raise ValueError("option graph is for the embedded store; a remote endpoint holds its own graph")
        if self.backend == "embedded" and self.default_graph_uri:
            raise ValueError("option default_graph_uri is for backend 'remote'")
        return self


@dataclass(frozen=True)
class Resources:
    """What every session of a worker shares."""

    store: SparqlStore
    ontology: Ontology

    async def close(self) -> None:
        await self.store.close()


@cache
def default_store() -> EmbeddedStore:
    """The generated default graph (seed 0, scale 1) in an embedded store, built once per process."""
    from .generate import DEFAULT_SEED, build_graph, ntriples

    graph, order = build_graph(DEFAULT_SEED, 1.0)
    return EmbeddedStore.from_ntriples(ntriples(graph, order))


@dataclass(frozen=True)
class Variable:
    """``type``: AgentBench's type of the variable (the range of the relation that made it)."""

    type: str
    program: Program


NUMBER = "type.int"


class KGTask(Task):
    name = "kg"
    max_turns = 15
    #: ``easy`` (200), ``easy-val`` (100) and ``easy-test`` (100): one-hop questions that spell out
    #: their call, for small models (see :mod:`.make_easy`).
    splits = ("dev", "train", "test", "easy", "easy-val", "easy-test")
    concurrency = 64
    Config = KGConfig

    # ------------------------------------------------------------------ data

    load_split = staticmethod(load_split)
    load_data = staticmethod(load_file)  # an AgentBench-format .json file of questions

    @classmethod
    def reference_policy(cls, sample: dict[str, Any]):
        from .reference import GoldActions

        return GoldActions(sample) if sample.get("actions") else None

    @classmethod
    async def open_resources(cls, config: KGConfig) -> Resources:
        from .generate import GENERATED

        ontology = load_ontology(config.ontology) if config.ontology else GENERATED
        store: SparqlStore
        if config.backend == "remote":
            store = RemoteStore(
                config.endpoint or "", timeout_s=config.query_timeout_s, default_graph_uri=config.default_graph_uri
            )
        elif config.graph:
            store = EmbeddedStore.from_file(config.graph)
        else:
            store = default_store()
        return Resources(store, ontology)

    # ------------------------------------------------------------------ session

    def __init__(self, sample: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(sample, **kwargs)
        self.variables: list[Variable] = []
        self._predicates: dict[Program, list[str]] = {}
        self.gold = gold_answers(sample)

    @property
    def store(self) -> SparqlStore:
        return self.resources.store

    @property
    def ontology(self) -> Ontology:
        return self.resources.ontology

    async def setup(self) -> list[dict[str, Any]]:
        names = list(self.sample.get("entities", {}))
        return opening_messages(self.sample["question"], names, self.turn_limit, self.config.one_shot, self.sample.get("prompt"))

    # ------------------------------------------------------------------ arguments

    def _program(self, tool_name: str, value: str, *, entity_ok: bool) -> Program:
        """``#k`` → that variable's program; an entity name of the question or an id → the entity
        (read as AgentBench reads arguments: see :mod:`.arguments`)."""
        ref = read_argument(tool_name, value, self.sample.get("entities", {}), len(self.variables), entity_ok=entity_ok)
        return ref if isinstance(ref, Entity) else self.variables[ref].program

    def _variable(self, tool_name: str, value: str) -> Variable:
        return self.variables[read_argument(tool_name, value, {}, len(self.variables), entity_ok=False)]

    def _set_variable(self, tool_name: str, value: str) -> Variable:
        v = self._variable(tool_name, value)
        if v.type == NUMBER:
            raise ToolCallError(f"{tool_name}: {value} is a number (a count), not a set of entities", tool=tool_name)
        return v

    async def _listed(self, program: Program, vocab: frozenset[str]) -> list[str]:
        """The predicates leaving the program's entities that ``vocab`` allows, sorted."""
        preds = self._predicates.get(program)
        if preds is None:
            preds = await self.store.select(predicates_query(program))
            self._predicates[program] = preds
        return sorted(set(preds) & vocab)

    def _new(self, var: Variable, observation: str) -> str:
        self.variables.append(var)
        return observation.replace("##", f"#{len(self.variables) - 1}")

    # ------------------------------------------------------------------ tools (AgentBench's texts)

    @tool
    async def get_relations(self, variable: str) -> str:
        """Fetches all relations associated with a given entity or variable, which helps in navigating the Knowledge Base (KB) to find useful connections.

        Args:
            variable: The entity or variable whose relations are to be fetched. Should be an existing entity or a result of a previous query.
        """
        if variable.startswith("#"):
            self._set_variable("get_relations", variable)
        program = self._program("get_relations", variable, entity_ok=True)
        rels = await self._listed(program, self.ontology.relations)
        return f"Observation: [{', '.join(rels)}]"

    @tool
    async def get_neighbors(self, variable: str, relation: str) -> str:
        """Returns all entities connected to a given variable through a specified relation, can only be used after identifying valid relations with get_relations().

        Args:
            variable: The subject entity or variable to find neighbors for.
            relation: The relationship through which neighbors are connected to the subject.
        """
        if variable.startswith("#"):
            self._set_variable("get_neighbors", variable)
        program = self._program("get_neighbors", variable, entity_ok=True)
        if relation not in await self._listed(program, self.ontology.relations):
            raise ToolCallError(
                f"get_neighbors: relation must be a relation of the variable; {relation!r} is not one of "
                f"the relations of {variable.strip()} (get_relations lists them)",
                tool="get_neighbors",
            )
        rng = self.ontology.range_of.get(relation, "type.object")
        return self._new(Variable(rng, Join(relation, program)), f"Observation: variable ##, which are instances of {rng}")

    @tool
    async def intersection(self, variable1: str, variable2: str) -> str:
        """Computes the intersection of two sets of entities or variables of the same type.

        Args:
            variable1: The first set of entities or a variable.
            variable2: The second set of entities or a variable.
        """
        a = self._set_variable("intersection", variable1)
        b = self._set_variable("intersection", variable2)
        if a.type != b.type:
            raise ToolCallError(
                f"intersection: two variables must have the same type ({variable1.strip()} holds instances of "
                f"{a.type}, {variable2.strip()} of {b.type})",
                tool="intersection",
            )
        return self._new(
            Variable(a.type, And(a.program, b.program)), f"Observation: variable ##, which are instances of {a.type}"
        )

    @tool
    async def get_attributes(self, variable: str) -> str:
        """Retrieves all numerical attributes of a given variable, especially valuable when seeking for entities with extreme attributes (max or min).

        Args:
            variable: The variable whose numerical attributes are to be fetched.
        """
        v = self._set_variable("get_attributes", variable)
        attrs = await self._listed(v.program, self.ontology.attributes)
        return f"Observation: [{', '.join(attrs)}]"

    async def _arg(self, tool_name: str, variable: str, attribute: str, maximum: bool) -> str:
        v = self._set_variable(tool_name, variable)
        if attribute not in await self._listed(v.program, self.ontology.attributes):
            raise ToolCallError(
                f"{tool_name}: attribute must be an attribute of the variable; {attribute!r} is not one of the "
                f"numerical attributes of {variable.strip()} (get_attributes lists them)",
                tool=tool_name,
            )
        return self._new(
            Variable(v.type, Arg(v.program, attribute, maximum)), f"Observation: variable ##, which are instances of {v.type}"
        )

    @tool
    async def argmax(self, variable: str, attribute: str) -> str:
        """Finds the entity with the maximum value of the specified attribute, can be used after identifying valid attributes with get_attributes().

        Args:
            variable: The variable or set of entities among which to find the maximum.
            attribute: The attribute to maximize over the entities.
        """
        return await self._arg("argmax", variable, attribute, True)

    @tool
    async def argmin(self, variable: str, attribute: str) -> str:
        """Finds the entity with the minimum value of the specified attribute, can be used after identifying valid attributes with get_attributes().

        Args:
            variable: The variable or set of entities among which to find the minimum.
            attribute: The attribute to minimize over the entities.
        """
        return await self._arg("argmin", variable, attribute, False)

    @tool
    async def count(self, variable: str) -> str:
        """Counts the number of entities within a given variable.

        Args:
            variable: The variable or set of entities to count.
        """
        v = self._set_variable("count", variable)
        return self._new(Variable(NUMBER, Count(v.program)), "Observation: variable ##, which is a number")

    # ------------------------------------------------------------------ the answer

    async def on_text(self, text: str) -> str | None:
        """``Final Answer: #k`` ends the episode and is scored; other text asks for a tool call."""
        found = _FINAL.findall(text.split("Observation:")[0].replace("\\_", "_"))
        if not found:
            return NO_CALL
        k = int(found[0])
        if k >= len(self.variables):
            self.finish(0.0, status=SampleStatus.AGENT_VALIDATION_FAILED, f1=0.0, answer=f"#{k}")
            have = f"#0 to #{len(self.variables) - 1}" if self.variables else "none"
            return f"Final Answer #{k} names no variable (variables: {have})."
        program = self.variables[k].program
        if (why := agentbench_cannot_score(program)) is not None:
            self.finish(0.0, status=SampleStatus.AGENT_VALIDATION_FAILED, f1=0.0, answer=f"#{k}")
            return f"Final Answer #{k}: {why}."
        predicted = set(await self.store.select(select_query(program)))
        correct = predicted == self.gold
        self.finish(1.0 if correct else 0.0, f1=f1(predicted, self.gold), answer=f"#{k}", answer_size=len(predicted))
        return None


def f1(predicted: set[str], gold: set[str]) -> float:
    """AgentBench's F1 of an answer set against the gold set (0 when they share nothing)."""
    tp = len(predicted & gold)
    if tp == 0:
        return 0.0
    precision, recall = tp / len(predicted), tp / len(gold)
    return 2 * precision * recall / (precision + recall)
