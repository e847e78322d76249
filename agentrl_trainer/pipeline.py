"""The rollout pipeline: episodes stream from engines into a bounded buffer of complete groups.

Two modes over the same machinery (docs/architecture.md, "agentrl-trainer"):

* **async** (AgentRL): rollout coroutines run all the time on their own event-loop thread,
  concurrently with training. Finished episodes go into a :class:`GroupBuffer`, which releases a
  GRPO group only once all its episodes are in. The queue is bounded — queued plus in-flight
  groups never exceed ``capacity_groups`` — and each training step drains it: it waits for
  ``min_groups`` complete groups, then takes every complete group queued (so a batch holds
  ``min_groups`` to ``capacity_groups`` groups and nothing complete waits for a later step).
  Staleness: with ``min_groups == capacity_groups`` a step waits for every group there is, so a
  group started after step s drained the queue is trained at step s + 1: a turn from a current
  engine is at most one version old (docs/trainer.md, "Staleness").
* **sync** (the baseline): each step starts exactly ``groups`` groups, waits for all of them,
  and only then trains; the engines idle while the trainer works.

Weights: :meth:`RolloutPipeline.publish` hands the new trainable parameters to the current
engines after every optimizer step and to the lagging ones every ``lag_steps`` steps
(:mod:`agentrl_trainer.lagging`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch

from agentrl_envs.client import AsyncControllerClient
from agentrl_envs.protocol.agentrl import SampleIndex

from .lagging import choose_engine, engines_to_sync, lagging_engine_ids
from .rollout import EngineChoice, Episode, EpisodeSpec, RolloutEngine, RolloutSettings, run_episode_retrying, turn_seed

__all__ = ["Group", "GroupBuffer", "PipelineEngine", "RolloutPipeline", "TaskSampler"]

log = logging.getLogger(__name__)


class PipelineEngine(RolloutEngine, Protocol):
    """An engine the pipeline can also update and measure."""

    busy_seconds: float  # wall time with at least one generation in flight

    def load_weights(self, named: Mapping[str, torch.Tensor], version: int) -> None: ...

    def close(self) -> None: ...


@dataclass
class Group:
    """A complete GRPO group: the episodes of one prompt that did not fail for infrastructure."""

    group_id: int
    task: str
    index: SampleIndex
    episodes: list[Episode]
    dropped: int = 0  # episodes lost to infrastructure failures
    released_at: float = field(default_factory=time.monotonic)


class GroupBuffer:
    """Collects episodes by group id; a group comes out only when all ``group_size`` are in.

    Infrastructure failures are removed from their group (never scored); a group left with fewer
    than ``min_valid`` episodes is discarded whole (``discarded`` counts them).
    """

    def __init__(self, group_size: int, min_valid: int = 2) -> None:
        if group_size < 1:
            raise ValueError("group_size must be at least 1")
        self.group_size = group_size
        self.min_valid = min(min_valid, group_size)
        self._pending: dict[int, list[Episode]] = {}
        self.discarded = 0

    def add(self, episode: Episode) -> Group | None:
        gid = episode.spec.group_id
        eps = self._pending.setdefault(gid, [])
        eps.append(episode)
        if len(eps) < self.group_size:
            return None
        del self._pending[gid]
        valid = [e for e in eps if not e.infra_failure]
        if len(valid) < self.min_valid:
            self.discarded += 1
            return None
        return Group(gid, episode.spec.task, episode.spec.index, valid, dropped=len(eps) - len(valid))

    @property
    def incomplete(self) -> int:
        return len(self._pending)


class TaskSampler:
    """Draws (task, index) pairs: a task by weight, then its samples in a shuffled cycle."""

    def __init__(self, indices: Mapping[str, Sequence[SampleIndex]], weights: Mapping[str, float] | None = None, seed: int = 0):
        if not indices or any(len(v) == 0 for v in indices.values()):
            raise ValueError(f"every task needs at least one sample index; got { ({k: len(v) for k, v in indices.items()}) }")
        weights = dict(weights or {})
        unknown = set(weights) - set(indices)
        if unknown:
            raise ValueError(f"weights name tasks that are not sampled: {sorted(unknown)}")
        self.tasks = list(indices)
        self.weights = [float(weights.get(t, 1.0)) for t in self.tasks]
        if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
            raise ValueError(
                f"task weights must be >= 0 with a positive sum; got {dict(zip(self.tasks, self.weights, strict=False))}"
            )
        self._rng = random.Random(seed)
        self._indices = {t: list(v) for t, v in indices.items()}
        self._cycles: dict[str, deque[SampleIndex]] = {t: deque() for t in self.tasks}

    def draw(self) -> tuple[str, SampleIndex]:
        task = self._rng.choices(self.tasks, weights=self.weights)[0]
        cycle = self._cycles[task]
        if not cycle:
            order = list(self._indices[task])
            self._rng.shuffle(order)
            cycle.extend(order)
        return task, cycle.popleft()


class RolloutPipeline:
    """Runs episodes on its own event-loop thread and hands complete groups to the trainer."""

    def __init__(
        self,
        controller_url: str,
        engines: Sequence[PipelineEngine],
        tokenizer: Any,
        stop_token_ids: Sequence[int],
        sampler: TaskSampler,
        settings: RolloutSettings,
        *,
        group_size: int,
        mode: Literal["async", "sync"] = "async",
        capacity_groups: int = 8,
        max_concurrent_groups: int | None = None,
        lagging_fraction: float = 0.0,
        lag_steps: int = 1,
        lagging_prob: float = 0.0,
        seed: int = 0,
    ) -> None:
        if mode not in ("async", "sync"):
            raise ValueError(f"mode must be 'async' or 'sync'; got {mode!r}")
        if not engines:
            raise ValueError("the pipeline needs at least one engine")
        self.controller_url = controller_url
        self.engines = list(engines)
        self.tokenizer = tokenizer
        self.stop_token_ids = list(stop_token_ids)
        self.sampler = sampler
        self.settings = settings
        self.group_size = group_size
        self.mode = mode
        self.capacity_groups = capacity_groups
        self.max_concurrent_groups = max_concurrent_groups or capacity_groups
        self.lagging = lagging_engine_ids(len(self.engines), lagging_fraction)
        self.current = [i for i in range(len(self.engines)) if i not in self.lagging]
        self.lag_steps = lag_steps
        self.lagging_prob = lagging_prob
        self.seed = seed
        self.buffer = GroupBuffer(group_size)
        self._ready: deque[Group] = deque()
        self._cond = threading.Condition()
        self._inflight = 0
        self._next_group = 0
        self._next_episode = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: AsyncControllerClient | None = None
        self._producer: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._stopping = False
        self.started_at = 0.0
        self.episodes_done = 0
        self.infra_failures = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> RolloutPipeline:
        if self._thread is not None:
            return self
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._client = AsyncControllerClient(self.controller_url)
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="rollout-loop", daemon=True)
        self._thread.start()
        ready.wait()
        self.started_at = time.monotonic()
        if self.mode == "async":
            self._producer = asyncio.run_coroutine_threadsafe(self._produce(), self._loop)
        return self

    def stop(self) -> None:
        """Stop producing, cancel episodes in flight (their sessions are cancelled), join the thread."""
        if self._thread is None or self._loop is None:
            return
        self._stopping = True
        loop = self._loop

        async def shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._client is not None:
                await self._client.aclose()

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=60)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout=30)
        self._thread = None
        with self._cond:
            self._cond.notify_all()

    def __enter__(self) -> RolloutPipeline:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ engines

    def _pick(self, episode_id: int) -> Any:
        # Each turn's engine is drawn from its own seed (episode, turn), not from a stream shared
        # by the episodes running at once, so the choice does not depend on their interleaving.
        def pick(turn: int) -> EngineChoice:
            rng = random.Random(turn_seed(self.seed, episode_id, turn, purpose="engine"))
            eid = choose_engine(rng, self.current, self.lagging, self.lagging_prob, episode_id + turn)
            return EngineChoice(self.engines[eid], eid, eid in self.lagging)

        return pick

    def publish(self, step: int, named: Mapping[str, torch.Tensor], every_engine: bool = False) -> list[int]:
        """Give optimizer step ``step``'s weights to the engines due for them; returns their ids.

        ``every_engine`` updates the lagging ones too (at the start of training or a resume).
        """
        due = (
            list(range(len(self.engines)))
            if every_engine
            else engines_to_sync(step, len(self.engines), self.lagging, self.lag_steps)
        )
        for eid in due:
            self.engines[eid].load_weights(named, step)
        return due

    # ------------------------------------------------------------------ groups

    async def _run_group(self) -> None:
        task, index = self.sampler.draw()
        gid = self._next_group
        self._next_group += 1
        specs = []
        for _ in range(self.group_size):
            specs.append(EpisodeSpec(task, index, gid, self._next_episode))
            self._next_episode += 1
        assert self._client is not None
        episodes = await asyncio.gather(
            *(
                run_episode_retrying(
                    self._client, s, self._pick(s.episode_id), self.tokenizer, self.stop_token_ids, self.settings
                )
                for s in specs
            )
        )
        group = None
        for ep in episodes:
            self.episodes_done += 1
            self.infra_failures += ep.attempts - 1 + int(ep.infra_failure)  # every lost attempt
            group = self.buffer.add(ep) or group
        with self._cond:
            self._inflight -= 1
            if group is not None:
                self._ready.append(group)
            self._cond.notify_all()

    async def _produce(self) -> None:
        """Async mode: keep groups running while queued + in flight stays under capacity."""
        try:
            running: set[asyncio.Task[None]] = set()
            while not self._stopping:
                with self._cond:
                    room = min(
                        self.capacity_groups - len(self._ready) - self._inflight,
                        self.max_concurrent_groups - self._inflight,
                    )
                    if room > 0:
                        self._inflight += room
                for _ in range(max(room, 0)):
                    t = asyncio.create_task(self._run_group())
                    running.add(t)
                    t.add_done_callback(running.discard)
                    t.add_done_callback(self._check)
                await asyncio.sleep(0.005 if room > 0 else 0.02)
        except BaseException as e:
            if not isinstance(e, asyncio.CancelledError):
                self._fail(e)
            raise

    def _check(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._fail(task.exception())  # type: ignore[arg-type]

    def _fail(self, error: BaseException) -> None:
        log.error("rollout failed: %r", error)
        with self._cond:
            self._error = error
            self._cond.notify_all()

    def get_batch(self, min_groups: int, timeout: float | None = None) -> list[Group]:
        """Async mode: wait for ``min_groups`` complete groups, then take every complete group
        queued (at most ``capacity_groups``: the queue never holds more), oldest first."""
        if self.mode != "async":
            raise RuntimeError("get_batch is for async mode; use collect() in sync mode")
        # Limits that can never be met are refused: min_groups above the capacity used to wait
        # forever (queued groups never exceed capacity_groups) and min_groups 0 to return no group.
        if min_groups < 1:
            raise ValueError(f"need min_groups >= 1, got {min_groups}")
        if min_groups > self.capacity_groups:
            raise ValueError(
                f"min_groups ({min_groups}) exceeds capacity_groups ({self.capacity_groups}): that many are never queued"
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while len(self._ready) < min_groups:
                if self._error is not None:
                    raise RuntimeError("the rollout pipeline failed") from self._error
                if self._thread is None:
                    raise RuntimeError("the rollout pipeline is stopped")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"{len(self._ready)} of {min_groups} groups ready after {timeout} s")
                self._cond.wait(timeout=left if left is not None else 1.0)
            batch = list(self._ready)
            self._ready.clear()
            return batch

    def collect(self, groups: int) -> list[Group]:
        """Sync mode: run exactly ``groups`` groups now and return the complete ones."""
        if self.mode != "sync":
            raise RuntimeError("collect is for sync mode; use get_batch() in async mode")
        assert self._loop is not None
        with self._cond:
            self._inflight += groups

        async def run_all() -> None:
            await asyncio.gather(*(self._run_group() for _ in range(groups)))

        asyncio.run_coroutine_threadsafe(run_all(), self._loop).result()
        with self._cond:
            out = list(self._ready)
            self._ready.clear()
        return out

    @property
    def queued(self) -> int:
        with self._cond:
            return len(self._ready)

    def stats(self) -> dict[str, float]:
        wall = max(time.monotonic() - self.started_at, 1e-9)
        busy = [min(e.busy_seconds / wall, 1.0) for e in self.engines]
        return {
            "episodes": float(self.episodes_done),
            "infra_failures": float(self.infra_failures),
            "groups_discarded": float(self.buffer.discarded),
            "engine_idle_fraction": 1.0 - sum(busy) / len(busy),
            "wall_seconds": wall,
        }
