"""AgentBench's KG prompts (its text, reproduced as data), the easy splits' short prompt and
worked examples, and the opening messages of a session."""

from __future__ import annotations

from typing import Any

from agentrl_envs.protocol.openai import worked_example

#: AgentBench's system prompt (``{max_round}``: the round limit), verbatim, leading space included.
INSTRUCTIONS = " \nYou are an intelligent agent tasked with answering questions based on the knowledge stored in a \nknowledge base (KB). You can utilize several tools to probe the KB and retrieve relevant \ninformation to answer the questions posed to you.\nUse the tools provided effectively to navigate through the KB, find relationships, \nattributes, and intersections where applicable, and determine the most pertinent \ninformation to answer the questions.\nRemember:\n- A variable can be an entity or a set of entities as results from previous queries.\n- You should always ensure the tool used is appropriate for the question's demands and \nfollow the logical order where necessary (e.g., fetch relations before finding neighbors).\n- After a variable is produced along the process, you need to judge whether a variable is \nthe final answer to the question. Each variable is represented as an id starting from 0. \nFor example, #0 is the first variable, #1 is the second variable, and so on.\n- Once you identify the final answer to the question, respond with 'Final Answer: #id' \nwhere id is the identifier of the variable you determine to be the final answer. For \nexample, if you think #3 is the final answer, you MUST respond with 'Final Answer: #3'. Do\nnot call tools regarding the commission of final answer!!!\n- You need to execute one action at a time and can perform a maximum of {max_round} actions to find\nthe answer.\n- You should use the supplied tools unless the final answer is identifies.\nYour thoughtful application of these tools and careful consideration of the interactions \nwill guide you to the correct answers.\nNote that you must finish the task in {max_round} rounds! Arrange your attempts according to it!\n"

#: AgentBench's one-shot example (used with ``one_shot=true``, as its ``kg-std`` config does), verbatim:
#: its slips (a stray ``}`` in two arguments, ``#2`` used before it exists, ``pspaceflight``) included.
ONE_SHOT: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": "Question: the bipropellant rocket engine with kerosene and gas-generator cycle is designed by who? \nEntities: [Gas-generator cycle, Kerosene]",
    },
    {
        "role": "assistant",
        "content": "Thought: I need to first find engines with gas-generator cycle. To achieve this, I will query the KB to find relations connected to the entity 'Gas-generator cycle' and see if any of them can help me find the answer.",
        "tool_calls": [
            {
                "function": {"arguments": '{"variable":"Gas-generator cycle"}', "name": "get_relations"},
                "id": "call_bl80SGcnZhRLsKtoFIUNR80D",
                "type": "function",
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_bl80SGcnZhRLsKtoFIUNR80D",
        "content": "Observation: [spaceflight.rocket_engine_cycle.rocket_engines, spaceflight.satellite.orbiting, spaceflight.rocket_stage.fuel, spaceflight.satellite_manufacturer.spacecraft_manufactured, automotive.fuel.engines]",
    },
    {
        "role": "assistant",
        "content": "Thought: From the above relations, I might use spaceflight.rocket_engine_cycle.rocket_engines to find the engines of Gas-generator cycle.",
        "tool_calls": [
            {
                "function": {
                    "arguments": '{"variable":"Gas-generator cycle", "relation": "spaceflight.rocket_engine_cycle.rocket_engines}"}',
                    "name": "get_neighbors",
                },
                "id": "call_bl80SGcnZhRLsKtoFIUNR80D",
                "type": "function",
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_bl80SGcnZhRLsKtoFIUNR80D",
        "content": "Observation: variable #0, which are instances of spaceflight.bipropellant_rocket_engine",
    },
    {
        "role": "assistant",
        "content": "Thought: I also need to find engines with kerosene. To achieve this, I will query the KB to find relations connected to the entity 'Kerosene",
        "tool_calls": [
            {
                "function": {"arguments": '{"variable":"Kerosene"}', "name": "get_relations"},
                "id": "call_bl80SGcnZhRLsKtoFIUNR80D",
                "type": "function",
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_bl80SGcnZhRLsKtoFIUNR80D",
        "content": "Observation: [spaceflight.satellite_manufacturer.spacecraft_manufactured, automotive.fuel.engines, spaceflight.rocket_engine_cycle.rocket_engines]",
    },
    {
        "role": "assistant",
        "content": "Thought: From the above relations, I might use spaceflight.rocket_engine_cycle.rocket_engines to find engines with kerosene cycle.",
        "tool_calls": [
            {
                "function": {
                    "arguments": '{"variable":"Kerosene", "relation": "spaceflight.rocket_engine_cycle.rocket_engines}"}',
                    "name": "get_neighbors",
                },
                "id": "call_bl80SGcnZhRLsKtoFIUNR80D",
                "type": "function",
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_bl80SGcnZhRLsKtoFIUNR80D",
        "content": "Observation: variable #1, which are instances of spaceflight.bipropellant_rocket_engine",
    },
    {
        "role": "assistant",
        "content": "Thought: From the above relations, I might use spaceflight.rocket_engine_cycle.rocket_engines to find engines with kerosene cycle.",
        "tool_calls": [
            {
                "function": {"arguments": '{"variable1":"#0", "variable2": "#2"}', "name": "intersection"},
                "id": "call_bl80SGcnZhRLsKtoFIUNR80D",
                "type": "function",
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_bl80SGcnZhRLsKtoFIUNR80D",
        "content": "Observation: variable #2, which are instances of spaceflight.bipropellant_rocket_engine",
    },
    {
        "role": "assistant",
        "content": "Thought: From the above relations, I might use spaceflight.rocket_engine.designed_by to find the designer of the engines.",
        "tool_calls": [
            {
                "function": {
                    "arguments": '{"variable":"#2", "relation": "spaceflight.rocket_engine.designed_by"}',
                    "name": "get_neighbors",
                },
                "id": "call_bl80SGcnZhRLsKtoFIUNR80D",
                "type": "function",
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_bl80SGcnZhRLsKtoFIUNR80D",
        "content": "Observation: variable #3, which are instances of pspaceflight.rocket_engine_designer",
    },
    {
        "role": "assistant",
        "content": "Thought: #3 is the final answer to the question, which represents the target rocket engine designer. Final Answer: #3",
    },
]


#: System prompt of samples with ``"prompt": "easy"`` (the easy splits): short, so that a small
#: model's prompt stays small; same tools, same rules. Followed by :data:`EASY_EXAMPLES`.
EASY_SYSTEM_PROMPT = """You answer questions with a knowledge base. Each tool call that finds entities makes a variable: \
the first is #0, the next #1. Call the tool the question names. When a variable holds the answer, reply with the text \
Final Answer: #id (not a tool call)."""


def easy_instruction(entity: str, relation: str, quoted: bool = False) -> str:
    """The sentence of an easy question that spells out its call and its answer. ``quoted``: the
    relation in double quotes, as the call's JSON writes it (SmolLM2-135M copies it then; named
    plainly, it often drops or repeats a part of it: ``person.profession``)."""
    written = f'"{relation}"' if quoted else relation
    return f"Call get_neighbors with variable {entity} and relation {written}, then reply Final Answer: #0."


#: The worked examples' questions: (question, entity, its id in the default graph, relation, the
#: relation's range). Short names, so that the four fit the prompt; :mod:`.make_easy` keeps their
#: entities out of the splits, and a test replays them through the task (same observations).
EASY_EXAMPLE_QUESTIONS: tuple[tuple[str, str, str, str, str], ...] = (
    ("who directed Samar Echo?", "Samar Echo", "m.031bg", "film.film.directed_by", "film.director"),
    ("where was Ansa Rajo born?", "Ansa Rajo", "m.0p3x91", "people.person.place_of_birth", "location.location"),
    ("what sport does Kajo Crowns play?", "Kajo Crowns", "m.05v6r3", "sports.sports_team.sport", "sports.sport"),
    ("who is the author of Elda Echo?", "Elda Echo", "m.05cdr", "book.written_work.author", "book.author"),
)
EASY_EXAMPLE_ENTITIES = {name: mid for _, name, mid, _, _ in EASY_EXAMPLE_QUESTIONS}


def _easy_example(i: int, question: str, entity: str, relation: str, range_type: str) -> list[dict[str, Any]]:
    """A worked easy episode: the question (as the splits write it; the relation quoted in the
    second and fourth), one ``get_neighbors`` call and its observation, then the text answer
    ``Final Answer: #0``."""
    return [
        *worked_example(
            f"{question} {easy_instruction(entity, relation, quoted=i % 2 == 1)}\nEntities: [{entity}]",
            [
                (
                    "get_neighbors",
                    {"variable": entity, "relation": relation},
                    f"Observation: variable #0, which are instances of {range_type}",
                )
            ],
            id_prefix=f"easy_example_{i}",
        ),
        {"role": "assistant", "content": "Final Answer: #0"},
    ]


#: Worked examples that open every ``easy`` episode as chat turns after the system prompt
#: (AgentBench's one-shot style). SmolLM2-135M needs four: with two it opens its first turn with
#: ``<tool_response>`` (a text turn) rather than ``<tool_call>`` on every easy-val question.
EASY_EXAMPLES: list[dict[str, Any]] = [
    m for i, (q, name, _, rel, rng) in enumerate(EASY_EXAMPLE_QUESTIONS) for m in _easy_example(i, q, name, rel, rng)
]


def opening_messages(
    question: str, entity_names: list[str], max_round: int, one_shot: bool, prompt: str | None = None
) -> list[dict[str, Any]]:
    """System prompt, the optional one-shot example, then the question with its entities
    (AgentBench's form). ``prompt="easy"``: the short system prompt and :data:`EASY_EXAMPLES`
    instead (``one_shot`` then adds nothing: the easy examples are that prompt's shots)."""
    if prompt == "easy":
        messages: list[dict[str, Any]] = [{"role": "system", "content": EASY_SYSTEM_PROMPT}, *EASY_EXAMPLES]
    else:
        messages = [{"role": "system", "content": INSTRUCTIONS.format(max_round=max_round)}]
        if one_shot:
            messages += [dict(m) for m in ONE_SHOT]
    messages.append({"role": "user", "content": f"{question}\nEntities: [{', '.join(entity_names)}]"})
    return messages
