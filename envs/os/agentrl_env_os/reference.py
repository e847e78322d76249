"""The OS task's reference policy: what a careful agent does to solve a sample, decided at run time.

:meth:`OSTask.reference_policy <agentrl_env_os.task.OSTask.reference_policy>` returns
:func:`reference_policy` ``(sample)``: a fresh :class:`OSReferencePolicy` per episode, or ``None``
when no way to solve the sample is known. The policy reads only what a model reads (the tool
messages, cut at 800 chars); it never looks into the sandbox.

* ``match`` with ``answer``: ``answer_action(answer)``.
* ``match`` with ``regex`` (none in AgentBench's data): a string built from the regex and checked
  here with the judge's own :func:`~agentrl_env_os.scoring.evaluate_match`; if none can be built,
  the ``example``'s output as for a ``null`` chain; with neither, no reference.
* A ``check`` chain with a ``null`` entry: the answer is compared with what ``example`` prints
  when the judge runs it, as an independent process (cwd ``/root``, stdin empty, the answer as
  its ``$1``, stdout only; :meth:`OSTask._judge <agentrl_env_os.task.OSTask._judge>`). The first
  call runs ``example`` the same way from the session's shell (``bash -c CODE -- ''`` or
  ``python3 -c CODE ''`` in ``/root``, stdin ``/dev/null``, stderr dropped; through a process
  substitution that ``exec`` s it, so the example's process tree is the judge's, with no shell in
  between) and keeps its stdout, trailing newlines included, in the shell variable
  ``__ref_out``; it prints a header (``[example output: chars 0-720 of N]``) and the first chunk.
  Each later call prints the next chunk, so that no observation reaches the 800-char cut, until
  the whole output is read; then ``answer_action`` answers it without its final newlines (as a
  model answers, and as ``$(...)`` reads it: every ``null`` chain in AgentBench compares with
  ``strip()`` or ``int()``, and an example that reads its ``$1``, the answer, wants it bare:
  ``7/bootstrap.json`` 84 counts the lines holding `` $1 ``). An output longer
  than the rounds left can show (7 chunks of 720 chars in 8 rounds) is kept and read as
  ``xz`` (else ``gzip``) in base64 instead, which the first call decides in the shell. A chunk
  that does not come back as asked (cut, or a background job printed into it) is asked again,
  in smaller chunks; the example is never run twice.
* A ``check`` chain without ``null``: ``example`` runs in the session's shell as a model would
  type it (its cwd, its background jobs); the chain may read the answer (``$1``: AgentBench's
  ``4/Q47.json`` asks for a path that way), so the policy answers what ``example`` printed
  (``answer_action``, without final newlines), or calls ``finish_action("done")`` when it printed
  nothing or its output was cut.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import lzma
import re
import shlex
from typing import Any

from agentrl_envs.policy import call_turn, last_tool_output

from .prompts import TRUNCATED
from .scoring import evaluate_match

try:  # Python 3.11+
    import re._parser as _sre  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover
    import sre_parse as _sre  # type: ignore[no-redef]

#: The round limit when the sample sets none (``OSTask.max_turns``).
DEFAULT_ROUNDS = 8
#: Characters of example output printed per observation: the header plus a chunk stays below
#: AgentBench's 800-char cut.
CHUNK = 720
OUTPUT_PREFIX = "The output of the OS:\n\n"
EMPTY_OUTPUT = "The output of the OS is empty."
_HEADER = re.compile(r"\[example output(?P<gz>, compressed)?: chars (?P<a>\d+)-(?P<b>\d+) of (?P<n>\d+)\]\n")


def reference_policy(sample: dict[str, Any], *, rounds: int | None = None) -> OSReferencePolicy | None:
    """A fresh policy that solves ``sample``, or ``None`` when no way is known."""
    policy = OSReferencePolicy(sample, rounds=rounds)
    return policy if policy.plan is not None else None


def os_text(observation: str | None) -> tuple[str | None, bool]:
    """``(what the command printed, whether it was cut)`` from a ``bash_action`` reply; ``None``
    when the message is not one."""
    if observation is None:
        return None, False
    if observation == EMPTY_OUTPUT:
        return "", False
    if not observation.startswith(OUTPUT_PREFIX):
        return None, False
    text = observation[len(OUTPUT_PREFIX) :]
    return text, text.endswith(TRUNCATED)


def regex_example(pattern: str, strip: bool = False) -> str | None:
    """A string ``s`` for which the judge's ``re.search(pattern, s)`` succeeds (after ``strip``
    when the match strips), or ``None`` if this small generator cannot build one."""
    try:
        parsed = _sre.parse(pattern)
    except re.error:
        return None
    for variant in (0, 1):
        try:
            text = _build(list(parsed), {}, variant)
        except _Unsupported:
            return None
        try:
            if evaluate_match(text, {"regex": pattern, "strip": strip}):
                return text
        except TimeoutError:
            return None
    return None


class _Unsupported(Exception):
    pass


def _build(items: list[tuple[Any, Any]], groups: dict[int, str], variant: int) -> str:
    out = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append("a" if chr(arg) != "a" else "b")
        elif name == "ANY":
            out.append("a")
        elif name == "IN":
            out.append(_in_sample(arg))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, sub = arg
            count = max(low, 1 if variant and high else 0)
            out.append("".join(_build(list(sub), groups, variant) for _ in range(count)))
        elif name == "SUBPATTERN":
            group, _, _, sub = arg
            text = _build(list(sub), groups, variant)
            if group is not None:
                groups[group] = text
            out.append(text)
        elif name == "ATOMIC_GROUP":
            out.append(_build(list(arg), groups, variant))
        elif name == "BRANCH":
            out.append(_build(list(arg[1][0]), groups, variant))
        elif name == "GROUPREF":
            out.append(groups.get(arg, ""))
        elif name in ("AT", "ASSERT_NOT"):
            continue  # anchors and negative look-arounds: the verification decides
        elif name == "ASSERT":
            direction, sub = arg
            if direction < 0:
                continue
            # a lookahead: what it wants follows; the rest must fit it (verified afterwards)
            out.append(_build(list(sub), groups, variant))
        else:
            raise _Unsupported(name)
    return "".join(out)


_CATEGORY_CLASSES = {
    "CATEGORY_DIGIT": r"\d",
    "CATEGORY_NOT_DIGIT": r"\D",
    "CATEGORY_SPACE": r"\s",
    "CATEGORY_NOT_SPACE": r"\S",
    "CATEGORY_WORD": r"\w",
    "CATEGORY_NOT_WORD": r"\W",
}
_CANDIDATES = "a0Z_-.:/!#@%+=,~ 9zA"


def _in_sample(items: list[tuple[Any, Any]]) -> str:
    """A character of the class ``[...]`` (printable, not blank where possible)."""

    def member(c: str) -> bool:
        for op, arg in items:
            name = str(op)
            if name == "LITERAL" and c == chr(arg):
                return True
            if name == "RANGE" and arg[0] <= ord(c) <= arg[1]:
                return True
            if name == "CATEGORY" and re.fullmatch(_CATEGORY_CLASSES.get(str(arg), "(?!)"), c):
                return True
        return False

    negate = any(str(op) == "NEGATE" for op, _ in items)
    pool = list(_CANDIDATES)
    for op, arg in items:
        if str(op) == "LITERAL":
            pool.append(chr(arg))
        elif str(op) == "RANGE":
            pool.append(chr(arg[0]))
    for c in pool:
        if member(c) != negate:
            return c
    raise _Unsupported("IN")


def _run_command(script: dict[str, str]) -> str:
    """The shell line that runs ``script`` as the judge does, from the session's shell."""
    code = shlex.quote(script["code"])
    if script["language"] == "python":
        return f"python3 -c {code} ''"
    return f"bash -c {code} -- ''"


def read_script(start: int, size: int = CHUNK, *, compressed: bool = False) -> str:
    """Print a header and characters ``start``..``start + size`` of the kept output (or of its
    compressed copy)."""
    var, label = ("__ref_z", "example output, compressed") if compressed else ("__ref_out", "example output")
    return (
        f"__ref_n=${{#{var}}}; __ref_e=$(( {start} + {size} < __ref_n ? {start} + {size} : __ref_n ))\n"
        f'printf \'[{label}: chars %d-%d of %d]\\n%s\' {start} "$__ref_e" "$__ref_n" "${{{var}:{start}:{size}}}"'
    )


def compress_script(size: int = CHUNK) -> str:
    """Keep the output xz- (else gzip-) compressed in base64 in ``$__ref_z``; print its first chunk."""
    keep = '__ref_z=$(printf %s "$__ref_out" | { xz -9e || gzip -9n; } 2>/dev/null | base64 -w0)'
    return f"{keep}\n{read_script(0, size, compressed=True)}"


def capture_script(example: dict[str, str], size: int = CHUNK, plain_max: int | None = None) -> str:
    """Run ``example`` as the judge does, keep its stdout in ``$__ref_out`` and print its first
    chunk; past ``plain_max`` chars, the first chunk of its compressed copy instead."""
    run = f"IFS= read -r -d '' __ref_out < <(cd /root 2>/dev/null; exec {_run_command(example)} 2>/dev/null </dev/null)"
    if plain_max is None:
        return f"{run}\n{read_script(0, size)}"
    return f"{run}\nif (( ${{#__ref_out}} > {plain_max} )); then\n{compress_script(size)}\nelse\n{read_script(0, size)}\nfi"


class OSReferencePolicy:
    """Solves one OS sample (one episode); see the module docstring for what it does.

    ``plan`` is ``"answer"`` (a fixed answer), ``"capture"`` (answer what ``example`` prints),
    ``"operate"`` (run ``example``, then finish) or ``None`` (no way known)."""

    def __init__(self, sample: dict[str, Any], *, rounds: int | None = None) -> None:
        self.sample = sample
        limit = sample.get("max_turns")
        self.rounds = rounds or (limit if type(limit) is int and limit > 0 else DEFAULT_ROUNDS)
        self.example: dict[str, str] | None = sample.get("example")
        self.answer: str | None = None
        self.plan: str | None = None
        match, check = sample.get("match"), sample.get("check")
        if match:
            if "answer" in match:
                self.plan, self.answer = "answer", match["answer"]
            elif "regex" in match:
                built = regex_example(match["regex"], bool(match.get("strip")))
                if built is not None:
                    self.plan, self.answer = "answer", built
                elif self.example is not None:
                    self.plan = "capture"
        elif check and self.example is not None:
            self.plan = "capture" if None in check else "operate"
        # capture state
        self._total: int | None = None
        self._parts: list[str] = []
        self._gz = False
        self._retries = 0
        self._turn = 0
        self._asked = False
        self._size = CHUNK

    # ------------------------------------------------------------------ policy

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        self._turn += 1
        used = sum(1 for m in messages if m.get("role") == "assistant")
        left = self.rounds - used  # rounds left, this one included
        if self.plan == "answer":
            return self._call("answer_action", answer=self.answer)
        if self.plan == "operate":
            return self._operate(messages)
        if self.plan == "capture":
            return self._capture(messages, left)
        return self._call("finish_action", thought="no reference known")

    @staticmethod
    def _call(name: str, **arguments: Any) -> dict[str, Any]:
        return call_turn(name, arguments)

    def _operate(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        assert self.example is not None
        if not any(m.get("role") == "assistant" for m in messages):
            code = self.example["code"]
            script = code if self.example["language"] == "bash" else f"python3 -c {shlex.quote(code)}"
            return self._call("bash_action", script=script)
        text, cut = os_text(last_tool_output(messages))
        if text and text.strip() and not cut:
            return self._call("answer_action", answer=text.rstrip("\n"))
        return self._call("finish_action", thought="done")

    def _capture(self, messages: list[dict[str, Any]], left: int) -> dict[str, Any]:
        assert self.example is not None
        if not self._asked:
            self._asked = True
            plain_max = (left - 1) * self._size
            return self._call("bash_action", script=capture_script(self.example, self._size, plain_max))
        text, cut = os_text(last_tool_output(messages))
        if self._take(text or ""):
            self._retries = 0
        else:
            # not the chunk asked for (cut, the command failed, a background job printed into it)
            self._retries += 1
            if cut:
                self._size = max(self._size // 2, 40)
            if self._retries > 3:
                return self._call("answer_action", answer=self._result().rstrip("\n"))
            if self._retries > 1 and not self._gz and self._total is not None:
                # the shell counts characters otherwise than the judge (bytes that are not UTF-8?)
                self._gz, self._parts, self._total = True, [], None
                return self._call("bash_action", script=compress_script(self._size))
        have = sum(len(p) for p in self._parts)
        if (self._total is not None and have >= self._total) or left <= 1:
            return self._call("answer_action", answer=self._result().rstrip("\n"))
        return self._call("bash_action", script=read_script(have, self._size, compressed=self._gz))

    def _take(self, text: str) -> bool:
        """Keep the chunk in ``text`` if it is the next one; say whether it was."""
        found = list(_HEADER.finditer(text))
        if not found:
            return False
        m = found[-1]
        a, b, n, gz = int(m["a"]), int(m["b"]), int(m["n"]), bool(m["gz"])
        chunk = text[m.end() :]
        if gz and not self._gz and a == 0 and not self._parts:  # the capture printed the compressed copy
            self._gz = True
        if gz != self._gz or a != sum(len(p) for p in self._parts) or len(chunk) != b - a or b > n:
            return False
        self._parts.append(chunk)
        self._total = n
        return True

    def _result(self) -> str:
        text = "".join(self._parts)
        if not self._gz:
            return text
        try:
            data = base64.b64decode(text)
            raw = lzma.decompress(data) if data.startswith(b"\xfd7zXZ") else gzip.decompress(data)
        except (binascii.Error, lzma.LZMAError, OSError, EOFError, ValueError):
            return ""
        return raw.decode("utf-8", "replace")
