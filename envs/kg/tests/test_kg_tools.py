"""The seven tools, the final answer and the scores, session by session on the embedded store:
AgentBench's observation texts, its variable numbering, and every error explained to the model."""

from __future__ import annotations

import pytest
from agentrl_env_kg import generate as G
from agentrl_env_kg.prompts import INSTRUCTIONS, ONE_SHOT
from agentrl_env_kg.task import NO_CALL

from agentrl_envs import TaskRuntime, get_task
from agentrl_envs.policy import call_turn
from agentrl_envs.protocol.agentrl import SampleStatus


@pytest.fixture(scope="module")
def graph():
    return G.build_graph(G.DEFAULT_SEED, 1.0)[0]


@pytest.fixture
async def runtime():
    rt = TaskRuntime(get_task("kg"), split="dev")
    await rt.open()
    yield rt
    await rt.close()


def _index(runtime, kind):
    return next(i for i, s in enumerate(runtime.samples) if s["source"].endswith(":" + kind))


class Session:
    def __init__(self, runtime, index, config=None):
        self.sample = runtime.samples[index]
        self.episode = runtime.episode(index)
        self.out = None

    async def start(self):
        self.out = await self.episode.start()
        return self.out

    async def call(self, name, **arguments):
        self.out = await self.episode.step([call_turn(name, arguments)])
        (message,) = self.out.messages
        assert message["role"] == "tool"
        return message["content"]

    async def say(self, text):
        self.out = await self.episode.step([{"role": "assistant", "content": text}])
        return self.out


def _entity(sample, i=0):
    name, mid = list(sample["entities"].items())[i]
    return name, mid


async def test_opening_is_agentbench_prompt_and_question_with_entity_names(runtime):
    s = Session(runtime, 0)
    out = await s.start()
    system, user = out.messages
    assert system == {"role": "system", "content": INSTRUCTIONS.format(max_round=15)}
    assert user["content"] == f"{s.sample['question']}\nEntities: [{', '.join(s.sample['entities'])}]"
    assert [t["function"]["name"] for t in out.tools] == [
        "get_relations",
        "get_neighbors",
        "intersection",
        "get_attributes",
        "argmax",
        "argmin",
        "count",
    ]


async def test_one_shot_option_prepends_agentbench_example():
    rt = TaskRuntime(get_task("kg"), split="dev", config={"one_shot": True})
    await rt.open()
    out = await rt.episode(0).start()
    assert out.messages[1 : 1 + len(ONE_SHOT)] == ONE_SHOT
    await rt.close()


async def test_relations_then_neighbors_make_variables_in_agentbench_text(runtime, graph):
    i = _index(runtime, "two_hop")
    s = Session(runtime, i)
    await s.start()
    name, mid = _entity(s.sample)
    # an entity by the name the question lists, or by its id: the same relations
    by_name = await s.call("get_relations", variable=name)
    by_id = await s.call("get_relations", variable=mid)
    expected = sorted(set(graph.edges[mid]) & G.GENERATED.relations)
    assert by_name == by_id == f"Observation: [{', '.join(expected)}]"
    first = s.sample["actions"][1].split(",")[1].rstrip(")")
    rng = G.GENERATED.range_of[first]
    assert (
        await s.call("get_neighbors", variable=name, relation=first) == f"Observation: variable #0, which are instances of {rng}"
    )
    # the variable's relations: those of the entities it holds
    members = set(graph.out(mid, first))
    want = sorted({r for m in members for r in graph.edges.get(m, {})} & G.GENERATED.relations)
    assert await s.call("get_relations", variable="#0") == f"Observation: [{', '.join(want)}]"
    assert s.out.metric["tool_errors"] == 0


async def test_count_and_final_answer_score_the_set(runtime):
    i = _index(runtime, "count")
    s = Session(runtime, i)
    await s.start()
    _, mid = _entity(s.sample)
    rels = [a.split(",")[1].rstrip(")") for a in s.sample["actions"] if a.startswith("get_neighbors")]
    var = mid
    for k, rel in enumerate(rels):
        await s.call("get_neighbors", variable=var, relation=rel)
        var = f"#{k}"
    assert await s.call("count", variable=var) == f"Observation: variable #{len(rels)}, which is a number"
    # a count is a number: it has no relations
    err = await s.call("get_relations", variable=f"#{len(rels)}")
    assert err == f"Error: get_relations: #{len(rels)} is a number (a count), not a set of entities"
    out = await s.say(f"Thought: done. Final Answer: #{len(rels)}")
    assert out.finish and out.status == SampleStatus.COMPLETED and out.reward == 1.0
    assert out.metric["f1"] == 1.0 and out.messages == []


async def test_a_partial_answer_scores_zero_with_its_f1(runtime, graph):
    # answer an intersection question with one side only: a superset of the gold answer
    i = _index(runtime, "intersection")
    s = Session(runtime, i)
    await s.start()
    _, mid = _entity(s.sample, 0)
    acts = s.sample["actions"]
    first_side = [a for a in acts if a.startswith("get_neighbors")]
    src = first_side[0].split("(")[1].split(",")[0]
    side = []
    for a in first_side:
        if a.split("(")[1].split(",")[0] == src or (side and a.split("(")[1].split(",")[0].startswith("#")):
            side.append(a.split(",")[1].rstrip(")"))
        else:
            break
    var = src
    for k, rel in enumerate(side):
        await s.call("get_neighbors", variable=var, relation=rel)
        var = f"#{k}"
    out = await s.say(f"Final Answer: {var}")
    gold = {a["answer_argument"] for a in s.sample["answer"]}
    members = {src}
    for rel in side:
        members = graph.follow(members, rel)
    members.discard(src)
    assert gold < members  # the generator made the intersection strictly smaller
    assert out.reward == 0.0 and out.status == SampleStatus.COMPLETED
    assert out.metric["f1"] == pytest.approx(2 * len(gold) / (len(gold) + len(members)))


async def test_errors_are_explained_and_the_episode_goes_on(runtime):
    i = _index(runtime, "superlative")
    s = Session(runtime, i)
    await s.start()
    name, mid = _entity(s.sample)
    assert (
        await s.call("get_relations", variable="#3")
        == "Error: get_relations: there is no variable #3 (variables so far: none yet)"
    )
    err = await s.call("get_relations", variable="Atlantis")
    assert err.startswith("Error: get_relations: variable must be a variable or an entity; 'Atlantis' is neither")
    assert name in err
    err = await s.call("get_neighbors", variable=name, relation="film.film.genre")
    assert err.startswith("Error: get_neighbors: relation must be a relation of the variable; 'film.film.genre'")
    rel = s.sample["actions"][1].split(",")[1].rstrip(")")
    assert (await s.call("get_neighbors", variable=name, relation=rel)).startswith("Observation: variable #0,")
    err = await s.call("argmax", variable="#0", attribute="type.object.name")
    assert err.startswith("Error: argmax: attribute must be an attribute of the variable; 'type.object.name'")
    err = await s.call("get_attributes", variable=name)
    assert err.startswith("Error: get_attributes: variable must be a variable (#k)")
    attrs = await s.call("get_attributes", variable="#0")
    attribute = s.sample["actions"][-1].split(",")[1].rstrip(")")
    assert attrs.startswith("Observation: [") and attribute in attrs
    assert s.out.metric["tool_errors"] == 5
    assert not s.out.finish


async def test_intersection_needs_the_same_type(runtime):
    i = _index(runtime, "intersection")
    s = Session(runtime, i)
    await s.start()
    m1 = s.sample["actions"][0][len("get_relations(") : -1]
    (m2,) = set(s.sample["entities"].values()) - {m1}
    r1 = s.sample["actions"][1].split(",")[1].rstrip(")")
    await s.call("get_neighbors", variable=m1, relation=r1)
    other = None
    for m in (m2, m1):
        rels = (await s.call("get_relations", variable=m))[len("Observation: [") : -1].split(", ")
        other = next((r for r in rels if G.GENERATED.range_of[r] != G.GENERATED.range_of[r1]), None)
        if other:
            await s.call("get_neighbors", variable=m, relation=other)
            break
    assert other is not None
    err = await s.call("intersection", variable1="#0", variable2="#1")
    assert err == (
        f"Error: intersection: two variables must have the same type (#0 holds instances of "
        f"{G.GENERATED.range_of[r1]}, #1 of {G.GENERATED.range_of[other]})"
    )


async def test_text_without_a_final_answer_asks_for_calls_and_a_bad_index_fails(runtime):
    s = Session(runtime, 0)
    await s.start()
    out = await s.say("I think the answer is Paris.")
    assert out.messages == [{"role": "user", "content": NO_CALL}] and not out.finish
    out = await s.say("Final Answer: #4")
    assert out.finish and out.status == SampleStatus.AGENT_VALIDATION_FAILED and out.reward == 0.0
    assert out.messages[0]["content"] == "Final Answer #4 names no variable (variables: none)."


async def test_fifteen_rounds_then_task_limit(runtime):
    s = Session(runtime, 0)
    await s.start()
    for _ in range(14):
        out = await s.say("thinking")
        assert not out.finish
    out = await s.say("thinking")
    assert out.finish and out.status == SampleStatus.TASK_LIMIT_REACHED
