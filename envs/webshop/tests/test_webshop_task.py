"""The task: tools, messages (AgentBench's format), scoring and metrics, the reference, `check`."""

from __future__ import annotations

import ast
import json

from agentrl_env_webshop import WebShopTask
from agentrl_env_webshop.prompts import SYSTEM_PROMPT
from agentrl_envs.agent import InProcessSessions, run_episode
from agentrl_envs.cli import main


def actions_of(text: str) -> dict:
    return ast.literal_eval(text.rpartition("Available Actions:\n")[2])


async def started(runtime, index: int = 0) -> WebShopTask:
    task = runtime.task_cls(runtime.samples[index], config=runtime.config, resources=runtime.resources)
    opening = await task.setup()
    assert opening[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert opening[1]["content"].startswith("The initial observation:\nWebShop [SEP] Instruction: [SEP] ")
    assert actions_of(opening[1]["content"]) == {"has_search_bar": True, "clickables": ["search"]}
    return task


def test_tools_are_agentbench_s():
    tools = {t["function"]["name"]: t["function"] for t in WebShopTask.tool_definitions()}
    assert tools["search_action"]["description"] == "Use search functionality with specified keywords."
    assert tools["search_action"]["parameters"]["required"] == ["keywords"]
    assert tools["click_action"]["parameters"]["properties"]["value"]["description"] == (
        "The value to click from the list of available actions."
    )
    assert WebShopTask.max_turns == 20


async def test_tool_output_format_and_invalid_click(runtime):
    task = await started(runtime)
    goal = task.sample
    out = await task.search_action(goal["name"])
    head, _, rest = out.partition("\n\nObservation:\n")
    assert head == f"Action: search[{goal['name']}]"
    assert rest.startswith("Instruction: [SEP] ")
    assert goal["asin"].lower() in actions_of(out)["clickables"]
    bad = await task.click_action("add to cart")
    assert 'Observation:\nInvalid action: "add to cart" is not a clickable value on this page. Nothing happened.' in bad
    assert actions_of(bad) == actions_of(out) and not task.done


async def test_buying_the_target_without_its_options_scores_the_parts(runtime):
    task = await started(runtime, 1)
    goal = task.sample
    assert goal["goal_options"], "dev sample 1 has options"
    await task.search_action(goal["name"])
    await task.click_action(goal["asin"])
    out = await task.click_action("buy now")
    n_att, n_opt = len(goal["attributes"]), len(goal["goal_options"])
    expected = (n_att + 0 + 1) / (n_att + n_opt + 1)
    assert task.done and task.reward == expected
    assert out.split("\n\nAvailable")[0].endswith(f"Your score (min 0.0, max 1.0) [SEP] {expected}")
    m = task.metrics
    assert (m["r_type"], m["r_att"], m["r_option"], m["r_price"]) == (1.0, 1.0, 0.0, True)
    assert m["correct_product"] is True and m["bought_asin"] == goal["asin"] and m["clicks"] == 2


async def test_buying_another_kind_of_product_scores_less(runtime):
    task = await started(runtime, 2)
    goal = task.sample
    catalog, _ = runtime.resources.generated
    other = next(catalog.product(i) for i in range(len(catalog)) if catalog.product(i)["query"] != goal["query"])
    await task.search_action(other["Title"])
    await task.click_action(other["asin"])
    await task.click_action("buy now")
    assert task.done and task.reward < 0.5
    assert task.metrics["correct_product"] is False and task.metrics["query_match"] is False


async def test_reference_solves_dev_in_process(runtime):
    sessions = InProcessSessions(runtime)
    for i in range(0, len(runtime.samples), 5):
        t = await run_episode(sessions, "webshop", i, WebShopTask.reference_policy(runtime.samples[i]))
        assert t.solved and t.reward == 1.0, (i, t.messages[-1])
        assert t.turns <= 20


def test_check_webshop_dev_solves_every_sample(capsys):
    """`agentrl-envs check webshop --split dev` (default catalog: 10,000 products): reward 1.0 on every sample."""
    code = main(["check", "webshop", "--split", "dev", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["total"] == report["solved"] == 50
    assert all(s["reward"] == 1.0 for s in report["samples"])
