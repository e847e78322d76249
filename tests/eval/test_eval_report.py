"""write_outputs(): summary.json, trajectories.jsonl, report.html, and the printed table."""

from __future__ import annotations

import io
import json
from html.parser import HTMLParser

from agentrl_envs.eval import EvalConfig, evaluate, format_table, print_table, summarize, write_outputs

EVIL = "<script>alert('x')</script> & done"


def policy(word: str, turn: int) -> tuple[str, str]:
    if word == "river" and turn == 0:
        return ("say", EVIL)
    if word == "stone":
        return ("call", f"</pre>{word}!")
    return ("call", word)


class _TagChecker(HTMLParser):
    """Checks that every non-void tag is closed in order."""

    VOID = {"meta", "br", "hr", "img", "input", "link", "line", "rect"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.details = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "details":
            self.details += 1
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        pass

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


async def _result(controller, model):
    fake_controller, url = controller
    _, base_url = model(policy)
    fake_controller.start_failures = {3: -1}  # one infrastructure failure in the report
    cfg = EvalConfig(
        tasks="echo", controller=url, base_url=base_url, limit=4, max_turns=2, max_retries=1, retry_backoff=0.001, progress=False
    )
    return await evaluate(cfg)


async def test_three_files_with_the_documented_shapes(controller, model, tmp_path):
    result = await _result(controller, model)
    paths = write_outputs(result, tmp_path / "out")
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"summary.json", "trajectories.jsonl", "report.html"}

    summary = json.loads(paths["summary"].read_text())
    assert summary == summarize(result)
    assert set(summary) >= {"model", "tasks", "overall"} and "success_rate" in summary["overall"]
    assert set(summary["tasks"]["echo"]) >= {"n", "success_rate", "avg_reward", "avg_turns", "status_counts"}
    assert summary["tasks"]["echo"]["infra_failures"] == 1 and summary["tasks"]["echo"]["n"] == 3

    lines = [json.loads(line) for line in paths["trajectories"].read_text().splitlines()]
    assert [(r["task"], r["index"]) for r in lines] == [("echo", i) for i in range(4)]
    for record in lines:
        assert set(record) >= {"task", "index", "status", "reward", "turns", "infra_error", "messages", "tools"}
    assert lines[0]["tools"][0]["function"]["name"] == "echo"
    assert [m["role"] for m in lines[1]["messages"]] == ["system", "user", "assistant", "user", "assistant", "tool"]
    assert lines[1]["messages"][2]["content"] == EVIL
    assert lines[3]["infra_error"] and lines[3]["messages"] == []


async def test_report_html_is_self_contained_escaped_and_complete(controller, model, tmp_path):
    result = await _result(controller, model)
    html = write_outputs(result, tmp_path)["report"].read_text()

    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    checker = _TagChecker()
    checker.feed(html)
    assert checker.errors == [] and checker.stack == []
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "<svg" in html and "<rect" in html  # the inline chart
    for ep in result.episodes:
        assert f'id="echo-{ep.index}"' in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; done" in html
    assert "&lt;/pre&gt;stone!" in html  # tool-call arguments escaped, pretty-printed
    assert "{\n  &quot;text&quot;: &quot;&lt;/pre&gt;stone!&quot;\n}" in html
    assert "infrastructure failure" in html and "NoWorkerError" in html
    assert checker.details >= len(result.episodes)


async def test_table_lists_every_task_aligned(controller, model):
    result = await _result(controller, model)
    text = format_table(summarize(result))
    lines = text.splitlines()
    assert lines[0] == "model: fake-model"
    header = ["task", "n", "success", "avg", "reward", "avg", "turns", "infra", "failures", "prompt", "tok", "compl", "tok"]
    assert lines[1].split() == header
    echo = next(line for line in lines if line.startswith("echo"))
    # tokens: apple 1 call (2 messages), river and stone 2 calls (2, then 4 messages); #3 never started
    assert echo.split() == ["echo", "3", "66.7%", "0.667", "1.7", "1", "140", "15"]
    assert len({len(line) for line in lines[1:3]}) == 1  # header and rule line up
    buffer = io.StringIO()
    print_table(summarize(result), file=buffer)
    assert buffer.getvalue() == text + "\n"
