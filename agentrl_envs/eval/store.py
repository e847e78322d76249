"""A run's directory while it runs: ``config.json`` first, then one line per episode as it ends.

    DIR/config.json          written when the run starts: the config (API keys left out), the
                             models (label and API name) and every task's indices
    DIR/trajectories.jsonl   one JSON line per finished episode, appended (and flushed) the moment
                             it ends; rewritten in order, one line per episode, when the run ends
    DIR/summary.json         written when the run ends (its absence marks an unfinished run)
    DIR/report.html          written when the run ends

A crash (even SIGKILL) loses at most the episodes in flight: every line already written stays
whole, since each is written with one ``write`` call on an unbuffered file. A last line cut
short is dropped on resume (the file is truncated back to the last newline) and its episode
played again. ``--resume DIR`` keeps the last line of each (model, task, index, run): a scored
episode is never played again, an infrastructure failure is.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import AgentRLEnvsError
from ..protocol.agentrl import SampleIndex
from .config import EvalConfig
from .results import EpisodeKey, EpisodeResult

log = logging.getLogger(__name__)

CONFIG = "config.json"
TRAJECTORIES = "trajectories.jsonl"
SUMMARY = "summary.json"
REPORT = "report.html"
FORMAT_VERSION = 1


def trajectory_record(ep: EpisodeResult) -> dict[str, Any]:
    """One line of ``trajectories.jsonl``: the episode's outcome, its tools once, every message."""
    return {
        "model": ep.model,
        "task": ep.task,
        "index": ep.index,
        "run": ep.run,
        "status": ep.status,
        "reward": ep.reward,
        "success": ep.success,
        "turns": ep.turns,
        "infra_error": ep.infra_error,
        "attempts": ep.attempts,
        "seconds": round(ep.seconds, 3),
        "usage": {"prompt_tokens": ep.prompt_tokens, "completion_tokens": ep.completion_tokens},
        "metrics": ep.metrics,
        "tools": ep.tools,
        "messages": ep.messages,
    }


def episode_from_record(record: dict[str, Any]) -> EpisodeResult:
    """The inverse of :func:`trajectory_record` (``success`` is recomputed from the reward)."""
    usage = record.get("usage") or {}
    return EpisodeResult(
        task=record["task"],
        index=record["index"],
        status=record["status"],
        reward=float(record.get("reward", 0.0)),
        turns=int(record.get("turns", 0)),
        messages=list(record.get("messages") or []),
        tools=list(record.get("tools") or []),
        metrics=dict(record.get("metrics") or {}),
        infra_error=record.get("infra_error"),
        attempts=int(record.get("attempts", 1)),
        seconds=float(record.get("seconds", 0.0)),
        model=str(record.get("model", "")),
        run=int(record.get("run", 0)),
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
    )


def encode(ep: EpisodeResult) -> bytes:
    return (json.dumps(trajectory_record(ep), ensure_ascii=False, default=str) + "\n").encode("utf-8")


def read_config(directory: str | Path) -> dict[str, Any]:
    """The ``config.json`` of a run directory; :class:`AgentRLEnvsError` if there is none."""
    path = Path(directory) / CONFIG
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AgentRLEnvsError(f"{directory} holds no {CONFIG}: it is not the output directory of an eval run") from None
    except ValueError as e:
        raise AgentRLEnvsError(f"{path} is not valid JSON: {e}") from None
    if saved.get("version") != FORMAT_VERSION:
        raise AgentRLEnvsError(f"{path} has format version {saved.get('version')!r}; this version reads {FORMAT_VERSION}")
    return saved


def read_records(path: Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """Every whole line of a ``trajectories.jsonl``, in file order.

    A last line without its newline was cut short by a crash: it is skipped, and with ``repair``
    cut off the file, so that lines appended later start on a line of their own."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    end = data.rfind(b"\n") + 1
    if end < len(data):
        log.warning("%s: dropping a last line cut short (%d bytes); its episode is played again", path, len(data) - end)
        if repair:
            with path.open("r+b") as f:
                f.truncate(end)
    records = []
    for number, line in enumerate(data[:end].splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            log.warning("%s:%d is not valid JSON; its episode is played again", path, number)
    return records


def latest_episodes(records: list[dict[str, Any]]) -> dict[EpisodeKey, EpisodeResult]:
    """The last record of each (model, task, index, run)."""
    out: dict[EpisodeKey, EpisodeResult] = {}
    for record in records:
        try:
            ep = episode_from_record(record)
        except (KeyError, TypeError, ValueError) as e:
            log.warning("skipping a malformed trajectory record: %s", e)
            continue
        out[ep.key] = ep
    return out


def is_unfinished(directory: str | Path) -> bool:
    """True when ``directory`` holds a run that started and never wrote its summary."""
    directory = Path(directory)
    return (directory / CONFIG).is_file() and not (directory / SUMMARY).is_file()


class RunStore:
    """Where :func:`~agentrl_envs.eval.evaluate` records a run: see the module docstring.

    ``config`` is the run's configuration as the user gave it (before embedded services filled
    in URLs): it is what ``config.json`` keeps for a resume. With ``resume=True`` the directory
    must hold a run; :meth:`begin` then checks that the models and indices are the saved ones
    and returns the episodes already recorded.
    """

    def __init__(self, directory: str | Path, config: EvalConfig, *, resume: bool = False) -> None:
        self.directory = Path(directory)
        self.config = config
        self.resume = resume
        self._fd: int | None = None

    @property
    def trajectories(self) -> Path:
        return self.directory / TRAJECTORIES

    def begin(self, models: list[tuple[str, str]], indices: dict[str, list[SampleIndex]]) -> dict[EpisodeKey, EpisodeResult]:
        """Start recording; ``models`` are (label, API name) pairs. Returns the recorded episodes
        (none for a fresh run)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        done = self._check_saved(models, indices) if self.resume else {}
        for name in (SUMMARY, REPORT):  # they describe a run this one replaces or completes
            (self.directory / name).unlink(missing_ok=True)
        if not self.resume:
            self._write_config(models, indices)
            self.trajectories.write_bytes(b"")
        self._fd = os.open(self.trajectories, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return done

    def record(self, ep: EpisodeResult) -> None:
        """Append one finished episode: one ``write`` of a whole line, nothing buffered here."""
        if self._fd is None:
            raise RuntimeError("RunStore.record before begin")
        view = memoryview(encode(ep))
        while view:
            view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write_config(self, models: list[tuple[str, str]], indices: dict[str, list[SampleIndex]]) -> None:
        saved = {
            "version": FORMAT_VERSION,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            # the models by the names the API knows them: a resume asks the same models
            "config": {**self.config.to_json(), "model": [name for _, name in models], "output": None},
            "models": [{"label": label, "name": name} for label, name in models],
            "indices": indices,
        }
        tmp = self.directory / (CONFIG + ".tmp")
        tmp.write_text(json.dumps(saved, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, self.directory / CONFIG)

    def _check_saved(
        self, models: list[tuple[str, str]], indices: dict[str, list[SampleIndex]]
    ) -> dict[EpisodeKey, EpisodeResult]:
        saved = read_config(self.directory)
        labels = [m["label"] for m in saved["models"]]
        if labels != [label for label, _ in models]:
            raise AgentRLEnvsError(
                f"cannot resume {self.directory}: it evaluated models {labels}, "
                f"this run would evaluate {[label for label, _ in models]}"
            )
        for task, idx in indices.items():
            if saved["indices"].get(task) != idx:
                raise AgentRLEnvsError(
                    f"cannot resume {self.directory}: the controller serves other samples of task {task!r} "
                    f"({len(idx)} indices) than the run started with ({len(saved['indices'].get(task) or [])}); "
                    "is it serving another split?"
                )
        return latest_episodes(read_records(self.trajectories, repair=True))
