"""What an evaluation run produces: one :class:`EpisodeResult` per episode, an :class:`EvalResult`
per run. The loop (:mod:`.runner`), the store (:mod:`.store`) and the reports read these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..protocol.agentrl import SampleIndex
from .config import EvalConfig


@dataclass
class EpisodeResult:
    """One evaluated sample. ``infra_error`` set means: not scored (excluded from every rate)."""

    task: str
    index: SampleIndex
    status: str
    reward: float = 0.0
    turns: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    infra_error: str | None = None
    attempts: int = 1
    seconds: float = 0.0
    model: str = ""
    run: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def key(self) -> EpisodeKey:
        """What identifies the episode in a run: (model, task, index, run)."""
        return (self.model, self.task, self.index, self.run)

    @property
    def scored(self) -> bool:
        return self.infra_error is None

    @property
    def success(self) -> bool:
        return self.scored and self.reward >= 1.0


#: (model, task, index, run): one episode of a run.
EpisodeKey = tuple[str, str, SampleIndex, int]


@dataclass
class EvalResult:
    """Every episode of a run, in model order, then task order, index order and run order.

    ``model`` is the first (with one model: the only) model; ``models`` lists all of them.
    ``resumed`` counts the episodes taken over from an earlier, interrupted run.
    """

    model: str
    config: EvalConfig
    episodes: list[EpisodeResult]
    seconds: float = 0.0
    models: list[str] = field(default_factory=list)
    resumed: int = 0

    def __post_init__(self) -> None:
        if not self.models:
            self.models = [self.model]

    def by_model(self) -> dict[str, list[EpisodeResult]]:
        grouped: dict[str, list[EpisodeResult]] = {m: [] for m in self.models}
        for ep in self.episodes:
            grouped.setdefault(ep.model or self.model, []).append(ep)
        return grouped

    def by_task(self, model: str | None = None) -> dict[str, list[EpisodeResult]]:
        """Episodes per task, of ``model`` only when given."""
        grouped: dict[str, list[EpisodeResult]] = {t: [] for t in self.config.tasks}
        for ep in self.episodes:
            if model is None or (ep.model or self.model) == model:
                grouped.setdefault(ep.task, []).append(ep)
        return grouped
