"""agentrl-envs eval-report: finished (and unfinished) runs side by side, as text, HTML and JSON."""

from __future__ import annotations

import json
import os
from html.parser import HTMLParser

from agentrl_envs.cli import main as cli_main
from agentrl_envs.eval import run_eval


def half_right(word: str, turn: int) -> tuple[str, str]:
    return ("call", word if word in ("apple", "stone") else word + "s")


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag != "meta":
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(tag)


def test_eval_report_compares_runs(echo_stack, model, tmp_path, capsys):
    _, good_url = model(name="good")
    _, half_url = model(half_right, name="half")
    common = {"tasks": "echo", "limit": 4, "controller": echo_stack, "max_turns": 1, "progress": False}
    assert run_eval({**common, "base_url": good_url, "output": tmp_path / "baseline"}) == 0
    assert (
        run_eval({**common, "model": "good,half", "base_url": [good_url, half_url], "runs": 2, "output": tmp_path / "both"}) == 0
    )
    assert run_eval({**common, "base_url": half_url, "output": tmp_path / "cut"}) == 0
    os.remove(tmp_path / "cut" / "summary.json")  # as if interrupted after all of its episodes but before the end
    capsys.readouterr()

    out = tmp_path / "cmp"
    dirs = [str(tmp_path / d) for d in ("baseline", "both", "cut")]
    assert cli_main(["eval-report", *dirs, "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert (
        "baseline/good" in lines[0]
        and "both/good" in lines[0]
        and "both/half" in lines[0]
        and "cut/half (unfinished)" in lines[0]
    )
    one, two = ["n", "success", "reward", "tokens", "p/c"], ["n", "avg@2", "pass@2", "reward", "tokens", "p/c"]
    assert lines[1].split() == ["task", *one, *two, *two, *one]
    echo = next(line for line in lines if line.startswith("echo")).split()
    # baseline: 4/4; both/good: 8/8; both/half: 2 of 4 samples in both runs; cut: 2/4
    assert echo == ["echo", "4", "100.0%", "1.000", "80/12"] + ["8", "100.0%", "100.0%", "1.000", "160/24"] + [
        "8", "50.0%", "50.0%", "0.500", "160/24"
    ] + ["4", "50.0%", "0.500", "80/12"]  # fmt: skip
    assert "unfinished: 0 episodes missing" in printed

    assert (out / "comparison.txt").read_text().splitlines() == lines[:6]  # groups, header, rule, echo, rule, overall
    html = (out / "comparison.html").read_text()
    checker = _Tags()
    checker.feed(html)
    assert checker.errors == [] and checker.stack == []
    assert html.count("<th colspan=") == 4 and "cut/half (unfinished)" in html and "<td>echo</td>" in html
    data = json.loads((out / "comparison.json").read_text())
    assert [c["label"] for c in data] == ["baseline/good", "both/good", "both/half", "cut/half (unfinished)"]
    assert data[2]["tasks"]["echo"]["pass_at_k"] == 0.5 and data[2]["runs"] == 2


def test_eval_report_of_something_else_is_an_error(tmp_path, capsys):
    assert cli_main(["eval-report", str(tmp_path)]) == 2
    assert "neither summary.json nor config.json" in capsys.readouterr().err


def test_eval_report_reads_summaries_written_before_runs_and_models(tmp_path, capsys):
    """A summary.json from before --runs and several models (no runs, tokens or by_model) still compares."""
    run = tmp_path / "old"
    run.mkdir()
    summary = {
        "model": "m",
        "tasks": {
            "db": {"n": 10, "success_rate": 0.4, "avg_reward": 0.45, "avg_turns": 3.0, "status_counts": {}, "infra_failures": 0}
        },
        "overall": {"success_rate": 0.4, "micro_success_rate": 0.4, "n": 10, "infra_failures": 0},
    }
    (run / "summary.json").write_text(json.dumps(summary))
    assert cli_main(["eval-report", str(run), "--output", str(tmp_path / "cmp")]) == 0
    db = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("db"))
    assert db.split() == ["db", "10", "40.0%", "0.450", "-/-"]
