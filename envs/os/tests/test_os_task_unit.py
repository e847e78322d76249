"""The OS task without a sandbox: schemas, prompts, truncation, data, match/check semantics."""

from __future__ import annotations

import json
import os
import signal

from agentrl_env_os import OSTask
from agentrl_env_os.prompts import os_output
from agentrl_env_os.samples import load_path
from agentrl_env_os.scoring import evaluate_check, evaluate_match, init_command
from agentrl_envs import get_task
from agentrl_envs.sandbox import CommandResult

# AgentBench's os.yaml tool definitions, verbatim.
AGENTBENCH_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash_action",
            "description": "Execute bash code to perform an operation in the Linux environment.",
            "parameters": {
                "type": "object",
                "properties": {"script": {"type": "string", "description": "The bash script to be executed."}},
                "required": ["script"],
                "additionalProperties": False,
            },
        },
    },  # noqa: E501
    {
        "type": "function",
        "function": {
            "name": "finish_action",
            "description": "Indicate that the task has been finished or need some additional information to be finished.",
            "parameters": {
                "type": "object",
                "properties": {
                    "thought": {"type": "string", "description": "The thought or reason indicating the task is finished."}
                },
                "required": ["thought"],
                "additionalProperties": False,
            },
        },
    },  # noqa: E501
    {
        "type": "function",
        "function": {
            "name": "answer_action",
            "description": "Provide the answer to the question.",
            "parameters": {
                "type": "object",
                "properties": {"answer": {"type": "string", "description": "The answer to the question."}},
                "required": ["answer"],
                "additionalProperties": False,
            },
        },
    },  # noqa: E501
]


def test_os_is_registered_with_agentbench_tools_and_limits():
    assert get_task("os") is OSTask
    assert OSTask.tool_definitions() == AGENTBENCH_TOOLS
    assert OSTask.max_turns == 8


def test_output_is_cut_as_agentbench_does():
    assert os_output("") == "The output of the OS is empty."
    assert os_output("hi\n") == "The output of the OS:\n\nhi\n"
    long = os_output("x" * 801)
    assert long == "The output of the OS:\n\n" + "x" * 780 + "\n[truncated because the output is too long]"
    assert os_output("x" * 800) == "The output of the OS:\n\n" + "x" * 800


def test_splits_load_with_scripts_inlined():
    dev, train = OSTask.load_samples("dev"), OSTask.load_samples("train")
    assert (len(dev), len(train)) == (26, 1000)
    for s in dev + train:
        for script in [*s["init"], s["start"], s["example"], *(s["check"] or [])]:
            assert script is None or (script["language"] in ("bash", "python") and isinstance(script["code"], str))
        assert (s["match"] is None) != (s["check"] is None)


def test_data_path_takes_a_problem_file_with_scripts_next_to_it(tmp_path):
    (tmp_path / "scripts" / "check").mkdir(parents=True)
    (tmp_path / "scripts" / "check" / "c.sh").write_text('test "$1" = yes')
    problem = {"description": "d", "create": {"init": {"code": "touch /x"}}, "evaluation": {"check": {"file": "check/c.sh"}}}
    (tmp_path / "p.json").write_text(json.dumps([problem]))
    [s] = load_path(tmp_path / "p.json")
    assert s["check"] == [{"language": "bash", "code": 'test "$1" = yes'}]
    assert s["init"] == [{"language": "bash", "code": "touch /x"}]


def test_match_is_exact_after_strip_or_regex_search():
    assert evaluate_match(" 1\n", {"answer": "1", "strip": True})
    assert not evaluate_match(" 1", {"answer": "1", "strip": False})
    assert not evaluate_match("11", {"answer": "1", "strip": True})
    assert evaluate_match("abc123", {"regex": r"\d+"})
    assert not evaluate_match("abc", {"regex": r"\d+"})


async def test_check_chain_passes_answer_and_earlier_outputs_and_runs_example_for_null():
    calls = []
    example = {"language": "bash", "code": "EXAMPLE"}
    check = {"language": "python", "code": "CHECK"}

    async def run(script, params):
        calls.append((script["code"], list(params)))
        if script["code"] == "EXAMPLE":
            return CommandResult(0, "42\n")
        return CommandResult(0 if int(params[0]) == int(params[1]) else 1, "")

    ok, outs = await evaluate_check("42", [None, check], example, run)
    assert ok and outs == ["42\n", ""]
    assert calls == [("EXAMPLE", ["42"]), ("CHECK", ["42", "42\n"])]
    ok, _ = await evaluate_check("41", [None, check], example, run)
    assert not ok


def test_init_returns_when_the_script_exits_even_with_background_jobs(tmp_path):
    """As ``docker exec`` does for AgentBench: a background job of an init script does not hold
    the init open; the script's stdout and stderr come back."""
    import subprocess

    pid_file = tmp_path / "pid"
    code = f"sleep 30 & echo $! > {pid_file}; echo out; echo err >&2; exit 3"
    r = subprocess.run(
        ["bash", "-c", init_command({"language": "bash", "code": code}), "bash", code], capture_output=True, timeout=20
    )
    background = int(pid_file.read_text())
    try:
        os.kill(background, 0)  # the init returned while its background job still runs: it did not wait for it
        assert (r.returncode, r.stdout) == (3, b"out\nerr\n")
    finally:
        os.kill(background, signal.SIGKILL)
    r = subprocess.run(
        ["bash", "-c", init_command({"language": "python", "code": "print('py')"}), "bash", "print('py')"], capture_output=True
    )
    assert (r.returncode, r.stdout) == (0, b"py\n")
