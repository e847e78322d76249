"""The README is a newcomer's guide that points at its evidence, and the docs match the code.

* ``README.md`` is at most 300 lines (issue 30: run records and design notes live under ``docs/``
  and ``benchmarks/results/``).
* Every relative link in ``README.md`` and ``docs/*.md`` names a file or folder of the repository,
  and a ``#anchor`` names a heading of the page it points at (GitHub's slugs).
* Every line of ``README.md`` that states a measured figure (a percentage, a ratio, a rate, a
  latency or duration, a size, a score such as 8/20, a count with thousands separators, or ± a
  standard error) links a file under ``benchmarks/results/`` on that same line, and git tracks
  that file, so a figure can be checked against the committed result it comes from.
* Every repository path the pages name outside code blocks (``envs/db/README.md``,
  ``agentrl_envs/chat/llama.py``, ``deploy/k8s/``...) exists, placeholders aside.
* The commands the README and the docs show exist: every ``agentrl-envs`` subcommand and option
  (and every ``agentrl-envs`` command in a README code block parses whole with the CLI's own
  parser), every ``make`` target, every ``agentrl-train`` option (a field of ``AgentRLConfig``)
  and every option given to a script under ``examples/`` or ``benchmarks/``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl_envs.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 300

FENCE = re.compile(r"^\s*```")
# [text](target) and ![alt](target); the target ends at the first space or ')'.
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:
INLINE_CODE = re.compile(r"`([^`]+)`")
# What a measured figure looks like in prose: 40%, 6.0×, 14 tokens/s, 51 ms, 3 min 40 s, 142 MB,
# 8/20, 8 of the 20, 710,673, 0.542 ± 0.051. (Version numbers, model sizes such as 135M and
# settings written as code are not figures.)
FIGURE = re.compile(
    r"\d(?:[\d,.]*\d)?\s?(?:%|×|µs\b|ms\b|s\b|min\b|tokens/s|tok/s|steps/s|episodes/s|trajectories/s"
    r"|episodes per minute|[KMG]i?B\b|GB/s|GFLOP)"
    r"|\b\d+/\d+\b"
    r"|\b\d{1,3}(?:,\d{3})+\b"
    r"|\b\d[\d,]* of (?:the )?\d[\d,]*\b"
    r"|±"
)
RESULT_LINK = re.compile(r"\]\((?:\./)?benchmarks/results/[^)\s]+\)")


def _lines_outside_code(text: str) -> list[tuple[int, str]]:
    """(line number, line) for every line outside fenced code blocks."""
    out, fenced = [], False
    for no, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((no, line))
    return out


def _code_blocks(text: str) -> list[str]:
    """The lines of every fenced block, a line ending in a backslash joined with the next."""
    commands: list[str] = []
    fenced, buf = False, ""
    for line in text.splitlines():
        if FENCE.match(line):
            fenced, buf = not fenced, ""
            continue
        if not fenced:
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        commands.append(buf + line)
        buf = ""
    return commands


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading keeps its text
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    for _, line in _lines_outside_code(page.read_text()):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = _slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _links(page: Path) -> list[tuple[int, str]]:
    found = []
    for no, line in _lines_outside_code(page.read_text()):
        # Links inside inline code are text, not links.
        line = INLINE_CODE.sub("", line)
        found += [(no, m.group(1)) for m in INLINE_LINK.finditer(line)]
        m = REFERENCE_LINK.match(line)
        if m:
            found.append((no, m.group(1)))
    return found


def test_readme_is_at_most_300_lines() -> None:
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines; at most {MAX_README_LINES}: move detail to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for no, target in _links(page):
        if EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"line {no}: {target} (no such file: {dest})")
        elif not dest.is_relative_to(ROOT):
            broken.append(f"line {no}: {target} (outside the repository)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"line {no}: {target} (no heading with anchor #{anchor} in {dest.name})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links:\n" + "\n".join(broken)


def _tracked(path: Path) -> bool | None:
    """Whether git tracks path (a file, or any file under a folder); None without a git checkout."""
    if not (ROOT / ".git").exists():
        return None
    try:
        out = subprocess.run(
            ["git", "ls-files", "--", str(path.relative_to(ROOT))], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return bool(out.strip())


def test_every_readme_figure_links_its_result_file() -> None:
    figure_lines = [
        (no, line) for no, line in _lines_outside_code(README.read_text()) if FIGURE.search(INLINE_CODE.sub("", line))
    ]
    missing = [f"line {no}: {line.strip()}" for no, line in figure_lines if not RESULT_LINK.search(line)]
    assert not missing, (
        "README lines that state a figure without linking the file under benchmarks/results/ it comes "
        "from (put the link on the same line):\n" + "\n".join(missing)
    )
    # The result a figure points at is committed, not a file left in someone's working tree.
    uncommitted = []
    for no, line in figure_lines:
        for m in RESULT_LINK.finditer(line):
            target = m.group(0)[2:-1].split("#", 1)[0]
            if not (ROOT / target).exists() or _tracked(ROOT / target) is False:
                uncommitted.append(f"line {no}: {target}")
    assert not uncommitted, "README figures link result files that are missing or git does not track:\n" + "\n".join(uncommitted)


# Paths a page names that are not in the repository on purpose: what a benchmark writes when run
# (not committed), and the package the scaffold example creates.
NOT_COMMITTED = {
    "benchmarks/results/async_vs_sync.json",
    "benchmarks/results/gpu_smoke.json",
    "envs/my_task",
}
PATH_TOKEN = re.compile(r"(?<![\w./-])\.?[\w][\w.*{},-]*(?:/[\w.*{},<>-]*)+")
PLACEHOLDER = re.compile(r"(?<![A-Za-z])(?!README\b)[A-Z][A-Z_]{2,}(?![a-z])|<|>|\.\.\.")  # NAME, test_TASK.py, <task>


def _expand_braces(path: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [x for alt in m.group(1).split(",") for x in _expand_braces(path[: m.start()] + alt + path[m.end() :])]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_repository_paths_exist(page: Path) -> None:
    # runs/ (and the venv) are what the software writes, ignored by git: present only after a run
    top = {p.name for p in ROOT.iterdir()} - {".git", ".venv", "runs"}
    missing = []
    for no, line in _lines_outside_code(page.read_text()):
        line = re.sub(r"\]\([^)]*\)", "]", line)  # link targets are test_relative_links_resolve's
        for token in PATH_TOKEN.findall(line):
            token = token.rstrip(".,:;")
            if token.split("/", 1)[0] not in top or PLACEHOLDER.search(token):
                continue
            for path in _expand_braces(token):
                if path.rstrip("/") not in NOT_COMMITTED and not list(ROOT.glob(path.rstrip("/"))):
                    missing.append(f"line {no}: {path}")
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist:\n" + "\n".join(missing)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _shell_chunks(text: str, *, inline: bool = True) -> list[str]:
    """The page's code-block lines and, with inline, its inline code spans."""
    chunks = _code_blocks(text)
    if inline:
        chunks += [m.group(1) for _, line in _lines_outside_code(text) for m in INLINE_CODE.finditer(line)]
    return chunks


def _command_uses(chunks: list[str], program: str) -> list[list[str]]:
    """The argument lists given to ``program`` in shell text ([optional] brackets dropped)."""
    uses = []
    for chunk in chunks:
        for part in re.split(r"&&|\|\||;|\|", chunk):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:  # an unbalanced quote in prose
                continue
            for i, word in enumerate(words):
                if word.rsplit("/", 1)[-1] == program:
                    args = [w.strip("[]") for w in words[i + 1 :]]
                    while args and args[-1] in ("&", ""):
                        args.pop()
                    uses.append(args)
    return uses


def _unknown_names(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """Subcommands and --options in args that the parser does not define (placeholders allowed)."""
    problems = []
    subs = _subcommands(parser)
    if subs:
        if not args or args[0].startswith("-"):
            return problems
        if args[0] not in subs:
            return [f"no subcommand {args[0]!r}"]
        return [f"{args[0]} {p}" for p in _unknown_names(subs[args[0]], args[1:])]
    known = set(parser._option_string_actions)
    for word in args:
        if word == "--":
            break
        if word.startswith("--") and word.split("=", 1)[0] not in known:
            problems.append(f"unknown option {word.split('=', 1)[0]}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_agentrl_envs_commands_exist(page: Path) -> None:
    parser = build_parser()
    problems = []
    for args in _command_uses(_shell_chunks(page.read_text()), "agentrl-envs"):
        problems += [f"agentrl-envs {' '.join(args)}: {p}" for p in _unknown_names(parser, args)]
    assert not problems, f"{page.relative_to(ROOT)}:\n" + "\n".join(problems)


def test_readme_agentrl_envs_commands_parse() -> None:
    """Every agentrl-envs command in a README code block is accepted whole by the CLI's parser."""
    failures = []
    for args in _command_uses(_shell_chunks(README.read_text(), inline=False), "agentrl-envs"):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                build_parser().parse_args(args)
        except SystemExit:
            failures.append(f"agentrl-envs {' '.join(args)}: {err.getvalue().strip().splitlines()[-1]}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_make_targets_exist(page: Path) -> None:
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    used = {args[0] for args in _command_uses(_shell_chunks(page.read_text()), "make") if args and "=" not in args[0]}
    assert used <= targets, f"{page.relative_to(ROOT)}: no such make target: {sorted(used - targets)}"


@pytest.mark.slow
def test_agentrl_train_options_are_config_fields() -> None:
    import dataclasses

    from agentrl_trainer.config import AgentRLConfig

    fields = {f.name for f in dataclasses.fields(AgentRLConfig)} | {"config"}
    problems = []
    for page in PAGES:
        for args in _command_uses(_shell_chunks(page.read_text()), "agentrl-train"):
            for word in args:
                name = word[2:].split("=", 1)[0] if word.startswith("--") else None
                if name and name not in fields:
                    problems.append(f"{page.relative_to(ROOT)}: agentrl-train --{name} is not a field of AgentRLConfig")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_script_options_exist() -> None:
    used: dict[Path, set[str]] = {}
    for page in PAGES:
        for args in _command_uses(_shell_chunks(page.read_text()), "python"):
            if args and args[0].startswith(("examples/", "benchmarks/")) and args[0].endswith(".py"):
                used.setdefault(ROOT / args[0], set()).update(w.split("=", 1)[0] for w in args[1:] if w.startswith("--"))
    problems = []
    for script, options in used.items():
        assert script.exists(), f"{script} does not exist"
        help_text = subprocess.run(
            [sys.executable, str(script), "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
        ).stdout
        problems += [f"{script.relative_to(ROOT)} {o}" for o in sorted(options) if not re.search(rf"(?<![\w-]){o}\b", help_text)]
    assert not problems, "options the docs give that the scripts do not take:\n" + "\n".join(problems)
