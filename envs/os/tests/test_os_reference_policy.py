"""The OS reference policy's decisions, without a sandbox: on hand-written observations, and its
shell scripts run in a local bash (the judge's side played by :func:`evaluate_check` there)."""

from __future__ import annotations

import asyncio
import base64
import json
import lzma
import os
import shutil
import subprocess

import pytest

from agentrl_env_os import OSTask
from agentrl_env_os.prompts import os_output
from agentrl_env_os.reference import CHUNK, OSReferencePolicy, reference_policy, regex_example
from agentrl_env_os.scoring import evaluate_match

OPENING = [{"role": "system", "content": "system"}, {"role": "user", "content": "problem"}]


def _null_chain(code: str, language: str = "bash") -> dict:
    return {"description": "d", "init": [], "start": None, "match": None, "labels": [],
            "check": [None, {"language": "python", "code": "CHECK"}], "example": {"language": language, "code": code}}  # fmt: skip


def _call(message: dict) -> tuple[str, dict]:
    [call] = message["tool_calls"]
    assert message["role"] == "assistant"
    return call["function"]["name"], json.loads(call["function"]["arguments"])


class Conversation:
    """Feeds the policy the observations a test writes, as the episode loop would."""

    def __init__(self, policy: OSReferencePolicy) -> None:
        self.policy = policy
        self.messages = list(OPENING)

    def act(self) -> tuple[str, dict]:
        message = asyncio.run(self.policy.act(self.messages, OSTask.tool_definitions()))
        self.messages.append(message)
        return _call(message)

    def observe(self, printed: str) -> None:
        call_id = self.messages[-1]["tool_calls"][0]["id"]
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": os_output(printed)})


def _chunk(text: str, a: int, b: int, *, compressed: bool = False) -> str:
    label = "example output, compressed" if compressed else "example output"
    return f"[{label}: chars {a}-{min(b, len(text))} of {len(text)}]\n{text[a:b]}"


def test_match_answers_the_answer_and_regex_gets_a_matching_string():
    sample = {"match": {"answer": "42", "strip": True}, "check": None, "example": None}
    assert Conversation(OSTask.reference_policy(sample)).act() == ("answer_action", {"answer": "42"})
    for pattern in [r"^\d+$", r"^(abc|de)+x?$", r"\bfoo\s*=\s*[A-Z][a-z]{2,3}\b", r"^[^a-z0-9]+$", r"^/home/\w+$"]:
        built = regex_example(pattern, strip=True)
        assert built is not None and evaluate_match(built, {"regex": pattern, "strip": True}), pattern
        policy = OSTask.reference_policy({"match": {"regex": pattern, "strip": True}, "check": None, "example": None})
        assert Conversation(policy).act() == ("answer_action", {"answer": built})
    # a regex the generator cannot satisfy: the example's output if there is one, else no reference
    impossible = {"match": {"regex": r"(?!a)a"}, "check": None}
    assert OSTask.reference_policy({**impossible, "example": None}) is None
    policy = OSTask.reference_policy({**impossible, "example": {"language": "bash", "code": "echo a"}})
    name, args = Conversation(policy).act()
    assert name == "bash_action" and "echo a" in args["script"]


def test_null_chain_runs_the_example_as_the_judge_does_and_answers_its_exact_output():
    conversation = Conversation(OSTask.reference_policy(_null_chain("du -sh /home | awk '{print $1}'")))
    name, args = conversation.act()
    assert name == "bash_action"
    script = args["script"]
    # as the judge runs it: bash -c CODE -- ANSWER, from /root, stdin empty, stderr dropped
    assert "cd /root" in script and "exec bash -c 'du -sh /home | awk '\"'\"'{print $1}'\"'\"'' -- ''" in script
    assert "2>/dev/null </dev/null" in script
    conversation.observe(_chunk("12K\n", 0, CHUNK))
    assert conversation.act() == ("answer_action", {"answer": "12K"})  # as a model answers: no final newline


def test_null_chain_with_empty_output_answers_empty():
    conversation = Conversation(OSTask.reference_policy(_null_chain("true")))
    conversation.act()
    conversation.observe(_chunk("", 0, CHUNK))
    assert conversation.act() == ("answer_action", {"answer": ""})


def test_long_output_is_read_in_chunks_over_several_turns():
    output = "".join(f"line {i}\n" for i in range(300))  # 2,490 chars: 4 chunks
    conversation = Conversation(OSTask.reference_policy(_null_chain("seq 300")))
    conversation.act()
    conversation.observe(_chunk(output, 0, CHUNK))
    for start in range(CHUNK, len(output), CHUNK):
        name, args = conversation.act()
        assert name == "bash_action" and f"__ref_out:{start}:{CHUNK}" in args["script"]
        conversation.observe(_chunk(output, start, start + CHUNK))
    assert conversation.act() == ("answer_action", {"answer": output.rstrip("\n")})
    assert sum(m["role"] == "assistant" for m in conversation.messages) == 5 <= OSTask.max_turns


def test_a_cut_or_garbled_observation_is_asked_again_in_smaller_chunks():
    output = "x" * 1000
    conversation = Conversation(OSTask.reference_policy(_null_chain("big")))
    conversation.act()
    # a background job printed into the first observation: it is cut at 800 chars
    conversation.observe("noise " * 20 + _chunk(output, 0, CHUNK))
    assert conversation.messages[-1]["content"].endswith("[truncated because the output is too long]")
    name, args = conversation.act()
    assert name == "bash_action" and f"__ref_out:0:{CHUNK // 2}" in args["script"]  # re-read, not re-run
    for start in range(0, 1000, CHUNK // 2):
        if start:
            conversation.act()
        conversation.observe(_chunk(output, start, start + CHUNK // 2))
    assert conversation.act() == ("answer_action", {"answer": output})


def test_output_longer_than_the_rounds_allow_is_read_compressed():
    output = "".join(f"{i}\n" for i in range(3000))  # 13,890 chars: 20 plain chunks, 8 rounds
    compressed = base64.b64encode(lzma.compress(output.encode(), preset=9)).decode()
    assert len(compressed) <= CHUNK * (OSTask.max_turns - 1)
    conversation = Conversation(OSTask.reference_policy(_null_chain("seq 0 2999")))
    _, args = conversation.act()
    assert f"> {CHUNK * (OSTask.max_turns - 1)} ))" in args["script"] and "xz -9e" in args["script"]
    conversation.observe(_chunk(compressed, 0, CHUNK, compressed=True))
    for start in range(CHUNK, len(compressed), CHUNK):
        name, args = conversation.act()
        assert name == "bash_action" and f"__ref_z:{start}:{CHUNK}" in args["script"]
        conversation.observe(_chunk(compressed, start, start + CHUNK, compressed=True))
    assert conversation.act() == ("answer_action", {"answer": output.rstrip("\n")})


def test_the_policy_answers_in_the_last_round_whatever_it_has():
    sample = {**_null_chain("long"), "max_turns": 3}
    output = "y" * 3000
    conversation = Conversation(OSTask.reference_policy(sample))
    conversation.act()
    conversation.observe(_chunk(output, 0, CHUNK))
    assert conversation.act()[0] == "bash_action"
    conversation.observe(_chunk(output, CHUNK, 2 * CHUNK))
    assert conversation.act() == ("answer_action", {"answer": output[: 2 * CHUNK]})


def test_python_example_runs_as_python3_c_with_the_answer_slot():
    conversation = Conversation(OSTask.reference_policy(_null_chain("print(6 * 7)", language="python")))
    _, args = conversation.act()
    assert "exec python3 -c 'print(6 * 7)' '' 2>/dev/null" in args["script"]
    conversation.observe(_chunk("42\n", 0, CHUNK))
    assert conversation.act() == ("answer_action", {"answer": "42"})


def test_chain_without_null_runs_the_example_in_the_shell_then_answers_what_it_printed():
    check = [{"language": "bash", "code": "test -e /x"}]
    operate = {"match": None, "check": check, "example": {"language": "bash", "code": "touch /x"}}
    conversation = Conversation(OSTask.reference_policy(operate))
    assert conversation.act() == ("bash_action", {"script": "touch /x"})
    conversation.observe("")
    assert conversation.act() == ("finish_action", {"thought": "done"})
    # the chain may read the answer ($1): what the example printed
    conversation = Conversation(
        OSTask.reference_policy({**operate, "example": {"language": "bash", "code": "mv a b && echo /a"}})
    )
    conversation.act()
    conversation.observe("/a\n")
    assert conversation.act() == ("answer_action", {"answer": "/a"})
    conversation = Conversation(
        OSTask.reference_policy({**operate, "example": {"language": "python", "code": "open('/x', 'w')"}})
    )
    assert conversation.act() == ("bash_action", {"script": "python3 -c 'open('\"'\"'/x'\"'\"', '\"'\"'w'\"'\"')'"})
    assert OSTask.reference_policy({**operate, "example": None}) is None


def test_every_shipped_sample_has_a_reference():
    for split in OSTask.splits:
        assert all(OSTask.reference_policy(s) is not None for s in OSTask.load_samples(split)), split


# ---------------------------------------------------------------------- the scripts, in a local bash


class LocalShell:
    """A persistent local bash with the sandbox shell's output framing (stdout+stderr, exact)."""

    def __init__(self, home: str) -> None:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "HOME": home}
        self.home = home
        self.proc = subprocess.Popen(
            ["bash", "--norc", "--noprofile"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=home,
        )

    def run(self, script: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        script = script.replace("cd /root", f"cd {self.home}")
        encoded = base64.b64encode(script.encode()).decode()
        self.proc.stdin.write(f"eval \"$(printf %s {encoded} | base64 -d)\" </dev/null; printf '\\n__END__\\n'\n".encode())
        self.proc.stdin.flush()
        buf = b""
        while not buf.endswith(b"\n__END__\n"):
            buf += os.read(self.proc.stdout.fileno(), 65536)
        return buf[: -len(b"\n__END__\n")].decode("utf-8", "replace")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.mark.skipif(
    not (shutil.which("bash") and shutil.which("base64") and shutil.which("gzip")), reason="needs bash, base64, gzip"
)
@pytest.mark.parametrize(
    "code",
    [
        "echo 42",
        "printf 'a\\n\\nb\\n\\n'",  # inner newlines kept, final ones not
        "echo err >&2; echo out",  # stderr is not the answer
        "seq 1 900",  # 3,492 chars: plain chunks
        "seq 1 3000",  # 13,893 chars: compressed
        "python3 -c 'print(\"\\u00e9\" * 1000)'",  # characters, not bytes
        "printf '\\xff\\xfe x'",  # not UTF-8
        "true",
    ],
)
def test_scripts_in_a_local_bash_read_exactly_what_the_example_prints(tmp_path, code):
    expected = subprocess.run(["bash", "-c", code, "--", ""], capture_output=True, cwd=tmp_path).stdout.decode("utf-8", "replace")
    policy = reference_policy(_null_chain(code))
    assert policy is not None
    shell = LocalShell(str(tmp_path))
    messages = list(OPENING)
    try:
        for _ in range(policy.rounds):
            message = asyncio.run(policy.act(messages, []))
            messages.append(message)
            name, args = _call(message)
            if name != "bash_action":
                break
            messages.append({"role": "tool", "tool_call_id": "c", "content": os_output(shell.run(args["script"]))})
    finally:
        shell.close()
    assert (name, args) == ("answer_action", {"answer": expected.rstrip("\n")})
