"""--runs K (avg@K, pass@K), token usage and several models side by side, on real episodes:
the embedded controller and ``echo`` worker (subprocesses) with scripted OpenAI-compatible models."""

from __future__ import annotations

import json
from collections import Counter
from html.parser import HTMLParser

import pytest
from conftest import FakeModel, first_turn_requests

from agentrl_envs.eval import EvalConfig, evaluate, pass_at_k, run_eval, summarize

P, C = FakeModel.PROMPT_TOKENS_PER_MESSAGE, FakeModel.COMPLETION_TOKENS


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(10, 1, 1) == pytest.approx(0.1)  # pass@1 is c/n
    assert pass_at_k(3, 0, 3) == 0.0 and pass_at_k(3, 1, 3) == 1.0  # n = k: solved in any run
    assert pass_at_k(4, 3, 2) == 1.0  # fewer failures than k: every draw holds a success
    assert pass_at_k(2, 1, 3) == 1.0 and pass_at_k(2, 0, 3) == 0.0  # n < k: solved in any scored run
    with pytest.raises(ValueError):
        pass_at_k(2, 3, 1)


def by_arrival(solved_on: dict[str, set[int]]):
    """A policy that solves the n-th episode of a word (in arrival order) iff n is in ``solved_on[word]``.
    Episodes last one turn (max_turns=1), so every request is a first turn."""
    arrivals: Counter[str] = Counter()

    def policy(word: str, turn: int) -> tuple[str, str]:
        arrivals[word] += 1
        return ("call", word if arrivals[word] in solved_on.get(word, set()) else word + "s")

    return policy


async def test_runs_give_avg_and_pass_at_k_on_real_episodes(echo_stack, model):
    # apple: 3 of 3 runs solved, river 1 of 3, stone 0 of 3, cloud 2 of 3
    fake, base_url = model(by_arrival({"apple": {1, 2, 3}, "river": {1}, "cloud": {1, 2}}))
    config = EvalConfig(
        tasks="echo", controller=echo_stack, base_url=base_url, limit=4, runs=3, max_turns=1, concurrency=4, progress=False
    )
    result = await evaluate(config)

    assert sorted((ep.index, ep.run) for ep in result.episodes) == [(i, r) for i in range(4) for r in range(3)]
    assert [(ep.index, ep.run) for ep in result.episodes][:3] == [(0, 0), (0, 1), (0, 2)]  # a sample's runs together
    assert all(ep.scored and ep.turns == 1 for ep in result.episodes)
    solved = Counter(ep.index for ep in result.episodes if ep.success)
    assert solved == {0: 3, 1: 1, 3: 2}
    assert first_turn_requests(fake) == {("fake-model", w): 3 for w in ("apple", "river", "stone", "cloud")}

    echo = summarize(result)["tasks"]["echo"]
    assert (echo["n"], echo["n_samples"], echo["k"]) == (12, 4, 3)
    assert echo["success_rate"] == echo["avg_at_k"] == pytest.approx(6 / 12)
    assert echo["pass_at_k"] == pytest.approx(3 / 4)
    assert echo["avg_reward"] == pytest.approx(0.5)
    assert sum(echo["run_success_rates"]) / 3 == pytest.approx(0.5)
    assert echo["status_counts"] == {"completed": 6, "task limit reached": 6}
    # one call per episode, on the system and user messages
    assert (echo["prompt_tokens"], echo["completion_tokens"]) == (12 * 2 * P, 12 * C)
    assert all((ep.prompt_tokens, ep.completion_tokens) == (2 * P, C) for ep in result.episodes)


async def test_one_run_keeps_the_plain_success_rate(echo_stack, model):
    _, base_url = model(by_arrival({"apple": {1}, "cloud": {1}}))
    config = EvalConfig(tasks="echo", controller=echo_stack, base_url=base_url, limit=4, max_turns=1, progress=False)
    s = summarize(await evaluate(config))
    echo = s["tasks"]["echo"]
    assert echo["success_rate"] == echo["avg_at_k"] == echo["pass_at_k"] == 0.5 and echo["k"] == 1
    assert s["model"] == "fake-model" and s["runs"] == 1 and s["overall"]["success_rate"] == 0.5


def scripted(word: str, turn: int) -> tuple[str, str]:
    """river: wrong then right; cloud: plain text then right; stone: always wrong; the rest right at once."""
    if word == "river" and turn == 0:
        return ("call", "rivers")
    if word == "cloud" and turn == 0:
        return ("say", "I think it is cloud")
    if word == "stone":
        return ("call", "pebble")
    return ("call", word)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in ("meta", "line", "rect"):
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in ("line", "rect"):
            return
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(tag)


def test_two_models_side_by_side_each_at_its_own_url(echo_stack, model, tmp_path, capsys):
    alpha, alpha_url = model(name="alpha")
    beta, beta_url = model(scripted, name="beta")
    out = tmp_path / "run"
    code = run_eval(
        {
            "tasks": "echo", "model": "alpha,beta", "base_url": [alpha_url, beta_url], "controller": echo_stack,
            "limit": 6, "runs": 2, "max_turns": 3, "output": out, "progress": False,
        }
    )  # fmt: skip
    assert code == 0
    assert {r["model"] for r in alpha.requests} == {"alpha"} and {r["model"] for r in beta.requests} == {"beta"}

    summary = json.loads((out / "summary.json").read_text())
    assert summary["models"] == ["alpha", "beta"] and summary["runs"] == 2
    assert "tasks" not in summary  # several models: only by_model
    a, b = summary["by_model"]["alpha"]["tasks"]["echo"], summary["by_model"]["beta"]["tasks"]["echo"]
    assert (a["n"], a["avg_at_k"], a["pass_at_k"]) == (12, 1.0, 1.0)
    assert (b["n"], b["avg_at_k"], b["pass_at_k"]) == (12, pytest.approx(5 / 6), pytest.approx(5 / 6))
    assert (a["prompt_tokens"], a["completion_tokens"]) == (12 * 2 * P, 12 * C)
    # per run: apple 2, river 2+4, stone 2+4+6, cloud 2+4, ember 2, maple 2 messages sent, in 10 calls
    assert (b["prompt_tokens"], b["completion_tokens"]) == (2 * 30 * P, 2 * 10 * C)
    assert summary["by_model"]["beta"]["overall"]["prompt_tokens"] == b["prompt_tokens"]

    lines = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    keys = [(r["model"], r["index"], r["run"]) for r in lines]
    assert sorted(keys) == sorted((m, i, r) for m in ("alpha", "beta") for i in range(6) for r in range(2))
    assert keys[0] == ("alpha", 0, 0) and keys[-1] == ("beta", 5, 1)  # model, then index, then run

    printed = capsys.readouterr().out
    assert "model: alpha" in printed and "model: beta" in printed and "side by side:" in printed
    table = printed.split("side by side:")[1].splitlines()
    assert "alpha" in table[1] and "beta" in table[1]
    assert table[2].split() == ["task"] + ["n", "avg@2", "pass@2", "reward", "tokens", "p/c"] * 2
    echo_row = next(line for line in table if line.startswith("echo"))
    assert echo_row.split() == ["echo", "12", "100.0%", "100.0%", "1.000", "240/36", "12", "83.3%", "83.3%", "0.833", "600/60"]

    html = (out / "report.html").read_text()
    checker = _Tags()
    checker.feed(html)
    assert checker.errors == [] and checker.stack == []
    assert 'class="compare"' in html and "<th colspan=" in html
    assert 'id="alpha-echo-0-run1"' in html and 'id="beta-echo-5-run2"' in html
    assert html.count('class="episode"') == 24


@pytest.mark.slow
@pytest.mark.model
def test_real_model_reports_usage_per_run(echo_stack, tmp_path):
    """The built-in server (SmolLM2-135M on the CPU): two runs of one sample, one turn each."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from agentrl_envs.models.launch import LocalModelServer

    with LocalModelServer() as server:
        code = run_eval(
            {
                "tasks": "echo", "limit": 1, "runs": 2, "max_tokens": 24, "max_turns": 1, "tool_choice": "required",
                "controller": echo_stack, "base_url": server.base_url, "output": tmp_path, "progress": False,
            }
        )  # fmt: skip
    assert code == 0
    records = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert [(r["index"], r["run"]) for r in records] == [(0, 0), (0, 1)]
    prompts = [r["usage"]["prompt_tokens"] for r in records]
    assert prompts[0] == prompts[1] > 0  # the same prompt, counted by the server's tokenizer
    assert all(0 < r["usage"]["completion_tokens"] <= 24 for r in records)
    echo = json.loads((tmp_path / "summary.json").read_text())["tasks"]["echo"]
    assert echo["prompt_tokens"] == sum(prompts)
    assert echo["completion_tokens"] == sum(r["usage"]["completion_tokens"] for r in records)
    solved = [r["success"] for r in records]
    assert echo["avg_at_k"] == sum(solved) / 2 and echo["pass_at_k"] == float(any(solved))
