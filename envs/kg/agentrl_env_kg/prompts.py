"""AgentBench's KG prompts (its text, reproduced as data) and the opening messages of a session."""

from __future__ import annotations

from typing import Any

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


def opening_messages(question: str, entity_names: list[str], max_round: int, one_shot: bool) -> list[dict[str, Any]]:
    """System prompt, the optional one-shot example, then the question with its entities (AgentBench's form)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": INSTRUCTIONS.format(max_round=max_round)}]
    if one_shot:
        messages += [dict(m) for m in ONE_SHOT]
    messages.append({"role": "user", "content": f"{question}\nEntities: [{', '.join(entity_names)}]"})
    return messages
