"""SIGTERM to a running `make train-demo` (its `python -m agentrl_trainer.demo`), while it trains and
while it evaluates: it exits promptly with 143 and leaves no process behind (controller, workers,
their children), without waiting for the workers' own watch of their parent."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(900)]

DEMO = [
    "--tasks", "db", "--eval-samples", "8", "--max-steps", "50", "--group-size", "2", "--groups-per-step", "2",
    "--max-turn-tokens", "12", "--max-turns", "2", "--bfcl-limit", "0",
]  # fmt: skip
# (--bfcl-limit 0: BFCL's evaluations, between the base evaluation and training, are tested in test_train_demo)


def _tree(pid: int) -> dict[int, str]:
    """The process and its descendants now: pid -> command line."""
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    out = {}
    for p in procs:
        try:
            out[p.pid] = " ".join(p.cmdline())
        except psutil.Error:
            continue
    return out


def _alive(pids: dict[int, str]) -> dict[int, str]:
    left = {}
    for pid, cmd in pids.items():
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left[pid] = cmd
        except psutil.NoSuchProcess:
            continue
    return left


@pytest.mark.parametrize("phase", ["training", "evaluation"])
def test_sigterm_stops_the_demo_and_every_process_it_started(tmp_path: Path, phase: str) -> None:
    cmd = [sys.executable, "-X", "faulthandler", "-u", "-m", "agentrl_trainer.demo", "--out", str(tmp_path), *DEMO]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen: dict[int, str] = {}
    log: list[str] = []
    try:
        assert proc.stdout is not None
        # training: once the training's workers (train split "easy") are up and a step is under way;
        # evaluation: once the base evaluation has finished its first episode
        for line in proc.stdout:
            log.append(line)
            seen.update(_tree(proc.pid))
            if phase == "evaluation" and "evaluated 1/8 episodes" in line:
                break
            if phase == "training" and "base: mean reward" in line:
                # the event: the training's workers appear (the test's timeout guards a hang)
                while not any("--split easy " in c + " " for c in _tree(proc.pid).values()):
                    assert proc.poll() is None, "the demo ended before its training's workers came up"
                    time.sleep(0.5)
                time.sleep(10)  # engines built, rollouts running
                break
        else:
            pytest.fail("the demo ended before the phase was reached:\n" + "".join(log[-30:]))
        seen.update(_tree(proc.pid))
        assert len(seen) >= 3, seen  # the demo, a controller and a worker at least
        proc.send_signal(signal.SIGTERM)
        try:
            rest, _ = proc.communicate(timeout=300)  # a hang guard, not a speed check
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            rest, _ = proc.communicate(timeout=60)
            pytest.fail("still running 300 s after SIGTERM; its threads:\n" + rest[-8000:])
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, rest[-3000:]
    time.sleep(2)
    left = _alive(seen)
    for pid in left:  # only on failure: the next run starts clean
        psutil.Process(pid).kill()
    assert left == {}, f"left behind after the demo exited: {left}"
