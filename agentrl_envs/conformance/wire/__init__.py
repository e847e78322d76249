"""The conformance suite over the wire: ``agentrl-envs conform``.

:mod:`agentrl_envs.conformance` checks a Task class in-process; this package checks a *worker*
from the outside, speaking only HTTP to a controller (and, for the worker's own rules, to the
worker at the address the controller lists), so a worker written in any language, or an image
nobody here built, can be checked::

    from agentrl_envs.conformance.wire import run_conformance, WireOptions
    report = run_conformance("http://127.0.0.1:5020", "db", options=WireOptions(idle_timeout=5))
    assert report.passed, report.text()

    from agentrl_envs.conformance.wire.image import conform_image        # needs a Docker engine
    report = conform_image("agentrl/worker-node_sum")

* :mod:`.target` — :class:`WireTarget`: raw HTTP answers from the controller and its workers.
* :mod:`.checks` — the checks (:data:`CHECKS`, :data:`PROTOCOL_CHECKS`); the worker-level ones.
* :mod:`.moves` — the rounds the checks play, and the one that keeps a session open.
* :mod:`.rounds`, :mod:`.lifecycle`, :mod:`.references` — how a task answers rounds; how
  sessions end (cancelled, ended, left idle); the reference replay.
* :mod:`.options` — :class:`WireOptions`, what the wire cannot tell them (the command line's options).
* :mod:`.run` — :func:`run_conformance` and its :class:`Report`.
* :mod:`.image` — :func:`~.image.conform_image`: an image started as ``up`` starts a worker.
* :mod:`.command` — the command line.

It checks what AgentRL's protocol promises, not how agentrl-envs' own workers do things: a worker
written the way AgentRL's examples write one passes. The rules and what a worker must serve:
``docs/conformance.md``.
"""

from __future__ import annotations

from .checks import CHECKS, PROTOCOL_CHECKS
from .options import WireOptions
from .run import CheckResult, Report, run_conformance
from .target import Answer, WireTarget

__all__ = ["CHECKS", "PROTOCOL_CHECKS", "Answer", "CheckResult", "Report", "WireOptions", "WireTarget", "run_conformance"]
