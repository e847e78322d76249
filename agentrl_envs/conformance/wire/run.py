"""Run the wire-level checks on a task behind a controller and report each one's outcome."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..common import ConformanceSkip
from .checks import CHECKS
from .options import WireOptions
from .target import WireTarget

Outcome = Literal["passed", "failed", "skipped"]


@dataclass
class CheckResult:
    """One check: its outcome, what it says (the failure, or why it was skipped), its notes."""

    name: str
    outcome: Outcome
    message: str = ""
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Report:
    """Every check run on ``task`` behind ``controller``; ``logs``: the worker's, when it failed (an image's)."""

    task: str
    controller: str
    results: list[CheckResult] = field(default_factory=list)
    logs: str = ""

    @property
    def passed(self) -> bool:
        return all(r.outcome != "failed" for r in self.results)

    def result(self, name: str) -> CheckResult:
        return next(r for r in self.results if r.name == name)

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "controller": self.controller, "passed": self.passed, **asdict(self)}

    def text(self) -> str:
        """The report as a person reads it: a line a check, its notes, a summary."""
        lines = [f"conform: task {self.task!r} behind {self.controller}"]
        for r in self.results:
            label = {"passed": "passed ", "failed": "FAILED ", "skipped": "skipped"}[r.outcome]
            lines.append(f"  {label} {r.name:<17} {r.seconds:6.1f} s" + (f"  {r.message}" if r.message else ""))
            lines += [f"           note: {note}" for note in r.notes]
        counts = {o: sum(r.outcome == o for r in self.results) for o in ("passed", "failed", "skipped")}
        lines.append(
            f"{len(self.results)} checks: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
        )
        if self.logs and not self.passed:
            lines.append("the worker's log (tail):\n" + self.logs)
        return "\n".join(lines)


def run_conformance(
    controller: str,
    task: str,
    *,
    options: WireOptions | None = None,
    checks: list[str] | None = None,
    container_health: Callable[[], str | None] | None = None,
) -> Report:
    """Run ``checks`` (default: all of :data:`~agentrl_envs.conformance.wire.checks.CHECKS`) on task
    ``task`` behind the controller at ``controller``. A check that raises anything but an
    assertion or a skip (a connection refused, a crash) fails with that error."""
    options = options or WireOptions()
    names = checks or list(CHECKS)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ValueError(f"unknown checks {unknown}; the checks are {list(CHECKS)}")
    with WireTarget(controller, task, container_health=container_health) as target:
        report = Report(task, target.controller)
        for name in names:
            t0 = time.monotonic()
            try:
                notes = CHECKS[name](target, options)
                result = CheckResult(name, "passed", notes=notes)
            except ConformanceSkip as e:
                result = CheckResult(name, "skipped", str(e))
            except AssertionError as e:
                result = CheckResult(name, "failed", str(e))
            except Exception as e:  # a transport error or a crash is this check's failure, not the run's
                result = CheckResult(name, "failed", f"{target.who}: {type(e).__name__}: {e}")
            result.seconds = round(time.monotonic() - t0, 2)
            report.results.append(result)
    return report
