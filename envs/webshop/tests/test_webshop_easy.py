"""The ``easy`` / ``easy-test`` / ``easy-val`` splits: sizes, disjoint targets, the reference solves
every goal through the real task, the compact pages and their next-step line, the worked example is
the task's own, and a whole episode fits SmolLM2's 2,048-token context."""

from __future__ import annotations

import json
import random

import pytest

from agentrl_env_webshop import WebShopTask
from agentrl_env_webshop.generator import GOAL_POOL, index_of_asin
from agentrl_env_webshop.html import render_message_html
from agentrl_env_webshop.make_easy import (
    EXAMPLE_PRODUCT,
    RESULTS_PER_PAGE,
    easy_goal,
    make_splits,
    record_example,
    spelled_steps,
)
from agentrl_env_webshop.prompts import EASY_EXAMPLES, EASY_SYSTEM_PROMPT
from agentrl_env_webshop.samples import SPLITS, validate_goal
from agentrl_env_webshop.shop import OPTION_STEP, compact_clickables
from agentrl_envs import TaskRuntime, get_task
from agentrl_envs.agent import InProcessSessions, run_episode
from agentrl_envs.cli import main
from agentrl_envs.errors import DataError

EASY = ("easy", "easy-test", "easy-val")
CONTEXT = 2048  # the trainer's context for SmolLM2-135M (RolloutSettings.max_context in the demo runs)
TURN_TOKENS = 48  # the trainer's tokens per assistant turn (benchmarks/base_rate.py --max-turn-tokens)


def _product(goal: dict) -> int:
    i = index_of_asin(0, goal["asin"])
    assert i is not None
    return i


@pytest.fixture
async def easy_runtime(index_dir: str):
    async def open_(split: str) -> TaskRuntime:
        rt = TaskRuntime(get_task("webshop"), split=split, config={"products": 1000, "index_dir": index_dir})
        await rt.open()
        opened.append(rt)
        return rt

    opened: list[TaskRuntime] = []
    yield open_
    for rt in opened:
        await rt.close()


def test_easy_splits_are_sized_disjoint_and_reproducible() -> None:
    assert set(EASY) <= set(WebShopTask.splits)
    splits = {s: WebShopTask.load_samples(s) for s in EASY}
    assert {s: len(g) for s, g in splits.items()} == {"easy": 200, "easy-test": 100, "easy-val": 100}
    assert make_splits() == splits  # regenerated identically (own seeds, no global state)
    products = {s: [_product(g) for g in goals] for s, goals in splits.items()}
    every = [p for ps in products.values() for p in ps]
    assert len(every) == len(set(every)) == 400  # no product is the target of two easy goals
    assert all(300 <= p < GOAL_POOL for p in products["easy"])  # the train split's products
    held_out = products["easy-test"] + products["easy-val"]
    assert all(0 <= p < 250 for p in held_out)
    assert EXAMPLE_PRODUCT not in every
    standard = {s: {_product(g) for g in WebShopTask.load_samples(s)} for s in SPLITS}
    assert not set(products["easy"]) & (standard["test"] | standard["dev"])  # easy never trains on held-out products
    for split, goals in splits.items():
        with_option = sum(bool(g["goal_options"]) for g in goals)
        assert 0.35 * len(goals) <= with_option <= 0.65 * len(goals), split
        for g in goals:
            assert validate_goal(g, split) is g
            steps = spelled_steps(g)
            assert len(steps) in (3, 4) and len(g["goal_options"]) == len(steps) - 3
            assert g["max_turns"] == len(steps) + 1 <= 5  # the steps and one slack round
            assert (g["prompt"], g["results_per_page"]) == ("easy", RESULTS_PER_PAGE)
            spelled = ", ".join(f'{verb} "{value}"' for verb, value in steps)
            assert g["instruction_text"].endswith(f"Steps: {spelled}.")


def test_an_easy_goal_needs_its_keywords() -> None:
    goal = easy_goal(0, 5, random.Random(1))
    del goal["keywords"]
    with pytest.raises(DataError, match="keywords"):
        validate_goal(goal, "custom_task")


@pytest.mark.parametrize("split", EASY)
async def test_the_reference_solves_every_easy_goal_in_its_steps(easy_runtime, split: str) -> None:
    runtime = await easy_runtime(split)
    sessions = InProcessSessions(runtime)
    for i, goal in enumerate(runtime.samples):
        t = await run_episode(sessions, "webshop", i, WebShopTask.reference_policy(goal))
        assert t.solved and t.reward == 1.0, (split, i, t.messages[-1])
        assert t.turns == len(spelled_steps(goal)), (split, i)


@pytest.mark.parametrize("split", ["easy-test", "easy-val"])
def test_check_solves_the_held_out_easy_splits(capsys, split: str) -> None:
    """`agentrl-envs check webshop --split easy-test` (default catalog: 10,000 products)."""
    code = main(["check", "webshop", "--split", split, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["total"] == report["solved"] == 100


async def test_compact_pages_clickables_and_next_step(easy_runtime) -> None:
    runtime = await easy_runtime("easy-val")
    i = next(i for i, g in enumerate(runtime.samples) if g["goal_options"])
    task = runtime.task_cls(runtime.samples[i], config=runtime.config, resources=runtime.resources)
    goal = task.sample
    keywords, asin, option = goal["keywords"], goal["asin"].lower(), goal["goal_options"][0]
    opening = await task.setup()
    assert opening[0] == {"role": "system", "content": EASY_SYSTEM_PROMPT}
    assert opening[1:-1] == EASY_EXAMPLES
    assert opening[-1]["content"] == (
        f'WebShop\nInstruction: {goal["instruction_text"]}\n[search]\nNext step: search "{keywords}"'
    )
    shop = task.shop
    assert shop is not None and shop.compact and shop.page_size == RESULTS_PER_PAGE

    def shown(out: str) -> str:
        """What the model sees is the page's compact form; its bracketed values are the page's clickables."""
        page = shop.page()
        assert out == page.compact
        assert compact_clickables(out) == page.clickables or set(compact_clickables(out)) == set(page.clickables)
        assert "[SEP]" not in out and "Available Actions" not in out
        return out.splitlines()[-1]

    assert shown(await task.search_action(keywords)) == f'Next step: click "{asin}"'
    assert shop.page().clickables[-RESULTS_PER_PAGE:][0] == asin  # the keywords put the target first
    assert shown(await task.click_action(asin)) == OPTION_STEP  # which option: the model's to read
    for sub in ("description", "features", "reviews"):
        assert shown(await task.click_action(sub)) == 'Next step: click "< prev"'
        assert shown(await task.click_action("< prev")) == OPTION_STEP
    other = next(v for v in shop.page().clickables[6:] if v != option)
    assert shown(await task.click_action(other)) == OPTION_STEP  # a wrong value leaves the option to choose
    bad = await task.click_action("add to cart")
    assert bad == f'Invalid action: "add to cart" is not a clickable value on this page. Nothing happened.\n{OPTION_STEP}'
    assert shown(await task.click_action(option)) == 'Next step: click "buy now"'
    assert shown(await task.click_action("< prev")) == f'Next step: click "{asin}"'
    assert shown(await task.search_action("something else entirely")).startswith('Next step: search "')
    await task.search_action(keywords)
    other_product = shop.page().clickables[-1]
    assert shown(await task.click_action(other_product)) == 'Next step: click "< prev"'
    assert shown(await task.click_action("< prev")) == f'Next step: click "{asin}"'
    await task.click_action(asin)
    await task.click_action(option)
    done = await task.click_action("buy now")
    assert task.done and task.reward == 1.0
    assert (
        done
        == f'Thank you for shopping with us! Purchased: {asin}, options: {{"{next(iter(shop.options))}": "{option}"}}. Your score (min 0.0, max 1.0): 1.0'
    )
    # the report shows compact pages as text (no WebShop page to draw), without failing
    assert render_message_html({"role": "tool", "content": done}) is None

    dev = runtime.task_cls(WebShopTask.load_samples("dev")[0], config=runtime.config, resources=runtime.resources)
    dev_opening = await dev.setup()
    assert dev.shop is not None and not dev.shop.compact and dev.shop.steps == []
    assert dev_opening[-1]["content"].startswith("The initial observation:\nWebShop [SEP] Instruction: [SEP] ")


async def test_the_worked_example_is_the_task_s_own(easy_runtime) -> None:
    """easy_example.json is what ``python -m agentrl_env_webshop.make_easy --example`` records now."""
    runtime = await easy_runtime("easy-val")
    assert await record_example(runtime) == EASY_EXAMPLES
    assert [m["role"] for m in EASY_EXAMPLES] == ["user"] + ["assistant", "tool"] * 4  # search, product, option, buy


async def test_a_whole_easy_episode_fits_smollm2_s_context(easy_runtime) -> None:
    """Every easy reference episode, rendered with SmolLM2's chat template and the tools, fits in
    2,048 tokens with room: each call within the trainer's 48 tokens a turn, and even a worst
    episode (every round a call of 48 tokens answered by the largest page seen) stays within it."""
    transformers = pytest.importorskip("transformers")
    from agentrl_envs.chat.loading import model_directory
    from agentrl_envs.chat.toolcalls import render_prompt
    from agentrl_envs.protocol.openai import Message, ToolDefinition

    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_directory()), local_files_only=True)
    except Exception as e:  # the embedded model is an optional package
        pytest.skip(f"SmolLM2's tokenizer is not available: {e}")
    tools = [ToolDefinition.model_validate(t) for t in WebShopTask.tool_definitions()]

    def tokens(messages: list[dict], generation_prompt: bool = True) -> int:
        text = render_prompt(
            tokenizer, [Message.model_validate(m) for m in messages], tools, add_generation_prompt=generation_prompt
        )
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    head = longest_call = largest_reply = whole = 0
    for split in EASY:
        runtime = await easy_runtime(split)
        for i, goal in enumerate(runtime.samples):
            episode = runtime.episode(i)
            first = await episode.start()
            messages = list(first.messages)
            policy = WebShopTask.reference_policy(goal)
            head = max(head, tokens(messages))
            while not episode.finished:
                prompt = tokens(messages)
                turn = await policy.act(messages, first.tools)
                assert turn is not None
                longest_call = max(longest_call, tokens([*messages, turn], False) - prompt)
                out = await episode.step([turn])
                messages += [turn, *out.messages]
                if not episode.finished:
                    largest_reply = max(largest_reply, tokens(messages) - tokens([*messages[:-1]], False))
            assert episode.task.reward == 1.0
            whole = max(whole, prompt + TURN_TOKENS)
    assert longest_call <= TURN_TOKENS
    assert head < 1200 and whole < 1800, (head, whole)
    worst = head + 4 * (TURN_TOKENS + largest_reply) + TURN_TOKENS  # 5 rounds, each answered by the largest page
    assert worst <= CONTEXT, (head, largest_reply, worst)
