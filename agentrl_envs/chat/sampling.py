"""Concurrent requests sampled together, continuously: a request joins the running batch.

:class:`BatchSampler` is the sampling layer shared by the model server and the RL trainer's
local engine (``agentrl_trainer.engines.local``). ``await sampler.generate(prompt_ids, ...)`` may
be called by many coroutines (from any event loop). One sampler thread drives a
:class:`.hf_decode.DecodeBatch`: between two decode steps it admits the requests that arrived
(prefilled together, their shared prompt head computed once or taken from the prefix cache) into
the running batch, up to ``max_batch`` rows; a row leaves as soon as it ends and its caller is
answered at once. When idle, the first request waits ``batch_wait_s`` for company.

Each request has its own temperature, top-p, seed (one generator per request, so a seeded request
draws the same tokens whether or not it shares the batch, up to float rounding of the batched
forward) and, given ``tools``, the tool-call grammar of those tools (:mod:`.grammar`).

:meth:`BatchSampler.exclusive` drains the batch and holds new requests back while the caller
changes the weights, so no completion mixes two weight versions; the caller labels the new
weights there (``weights_version``) and every completion carries the label of the weights that
sampled it.

On two CPU cores, 16 concurrent requests decode at several times the tokens/s of one:
``benchmarks/model_server.py`` measures it.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from .decode import DecodeRow, StopReason
from .engine import TransformersEngine
from .fast_decode import FastDecodeBatch
from .hf_decode import DecodeBatch

__all__ = ["BatchSampler", "Completion"]

log = logging.getLogger(__name__)


class Completion(NamedTuple):
    """What :meth:`BatchSampler.generate` returns (the logprobs' contract: :class:`.decode.DecodeRow`)."""

    completion_ids: list[int]
    logprobs: list[float]  # under the model's own softmax(logits / temperature)
    stop_reason: StopReason
    sampled_logprobs: list[float]  # under the distribution drawn from (the grammar's allowed tokens)
    allowed: list[Any]  # per token, the packed allowed tokens (decode.pack_token_mask); None: all
    weights_version: int  # BatchSampler.weights_version when it was sampled


class _Request:
    __slots__ = ("row", "tools", "call_required", "future", "loop")

    def __init__(
        self,
        row: DecodeRow,
        tools: Sequence[Any] | None,
        call_required: bool,
        future: asyncio.Future,
        loop: asyncio.AbstractEventLoop,
    ):
        self.row, self.tools, self.call_required, self.future, self.loop = row, tools, call_required, future, loop


class BatchSampler:
    """Samples the completions of concurrent requests in one continuously batched decode.

    ``max_batch``: rows decoded at once. ``prefix_cache_tokens``: prompt-head tokens whose KV is
    kept for reuse (0: off). ``max_slot_tokens`` (0: none): the most KV token slots the running
    rows may hold in the packed decoder's buffers (rows x the longest row's own tokens; see
    :class:`.fast_decode.FastDecodeBatch`): a request waits, in order, until it fits; it bounds the
    decode's memory (46 KB a slot for SmolLM2 in float32: 16,384 slots are 0.75 GB). The
    transformers path (:class:`.hf_decode.DecodeBatch`) admits up to ``max_batch`` regardless.
    ``busy_seconds`` (wall time with rows decoding), ``steps`` (batched forward passes), ``batches`` (admissions: prefills of one or more requests) and
    ``generated_tokens`` count the work done. ``close()`` stops the thread after the current step;
    requests still waiting or decoding then fail with ``RuntimeError``. ``weights_version``: a
    label of the weights, set by whoever changes them (inside :meth:`exclusive`, where nothing
    decodes); each :class:`Completion` carries the value it was sampled under.
    """

    def __init__(
        self,
        engine: TransformersEngine,
        *,
        max_batch: int = 32,
        batch_wait_s: float = 0.02,
        prefix_cache_tokens: int = 16384,
        max_slot_tokens: int = 0,
        name: str = "sampler",
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if max_slot_tokens < 0:
            raise ValueError(f"max_slot_tokens must be >= 0, got {max_slot_tokens}")
        self.engine = engine
        self.max_batch = max_batch
        self.max_slot_tokens = max_slot_tokens
        self.batch_wait_s = batch_wait_s
        self.prefix_cache = engine.new_prefix_cache(prefix_cache_tokens)
        self.batches = 0
        self.generated_tokens = 0
        self.weights_version = 0
        self._busy_done = 0.0
        self._busy_since: float | None = None
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._closed = False
        self._batch: FastDecodeBatch | DecodeBatch | None = None
        self._pending: list[_Request] = []  # taken from the queue, not yet admitted
        self._inflight: dict[int, _Request] = {}  # id(row) -> request, for rows in the batch
        self._hold = threading.Event()  # set: admit nothing (exclusive())
        self._drained = threading.Event()
        self._exclusive_lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name=f"{name}-batches", daemon=True)
        self._thread.start()

    @property
    def busy_seconds(self) -> float:
        since = self._busy_since
        return self._busy_done + (time.monotonic() - since if since is not None else 0.0)

    @property
    def steps(self) -> int:
        return self._batch.steps if self._batch is not None else 0

    @property
    def running(self) -> int:
        """Rows decoding now."""
        return len(self._batch) if self._batch is not None else 0

    async def generate(
        self,
        prompt_ids: Sequence[int],
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        tools: Sequence[Any] | None = None,
        seed: int | None = None,
        *,
        call_required: bool = True,
        deadline: float | None = None,
        repetition_window: int = 0,
        on_token: Callable[[int], None] | None = None,
        close_in_budget: bool = False,
    ) -> Completion:
        """One completion of ``prompt_ids`` (see :class:`.decode.DecodeRow` for the contract of
        each argument; ``deadline`` is a ``time.monotonic()`` time). Given ``tools``, it is sampled
        under their tool-call grammar: one call (``call_required``) or text in which any call is
        well-formed (see :meth:`.grammar.ToolCallGrammar.compiled`); ``close_in_budget``: a call
        still open when the tokens left just suffice is completed (:class:`.decode.DecodeRow`).
        ``on_token`` is called in the caller's event loop. Cancelling the awaiting task drops the row at the next step."""
        if self._closed:
            raise RuntimeError("the sampler is closed")
        self.engine.check_prompt_length(prompt_ids)  # refused alone, not with the rows it would join
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        callback = None
        if on_token is not None:

            def callback(token: int) -> None:
                _post(loop, on_token, token)

        row = DecodeRow(
            list(prompt_ids),
            max_tokens,
            temperature,
            top_p,
            seed,
            deadline=deadline,
            repetition_window=repetition_window,
            on_token=callback,
            cancelled=future.cancelled,
            close_in_budget=close_in_budget,
        )
        self._queue.put(_Request(row, tools or None, call_required, future, loop))
        return await future

    @contextmanager
    def exclusive(self, timeout: float | None = None) -> Iterator[None]:
        """Within the block no row decodes: the batch is drained first (rows running finish) and
        new requests wait. For changing weights between completions."""
        with self._exclusive_lock:
            self._drained.clear()
            self._hold.set()
            self._queue.put_nowait(_WAKE)
            if not self._drained.wait(timeout):
                self._hold.clear()
                raise TimeoutError("the sampler did not drain in time")
            try:
                yield
            finally:
                self.prefix_cache.clear()  # the heads' KV belongs to the old weights
                self._hold.clear()
                self._queue.put_nowait(_WAKE)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout=60)
        error = RuntimeError("the sampler is closed")
        leftovers = list(self._pending) + list(self._inflight.values())
        while True:
            try:
                req = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(req, _Request):
                leftovers.append(req)
        for req in leftovers:
            _post(req.loop, _settle, req.future, None, error)

    # ------------------------------------------------------------------ the sampler thread

    def _keep(self, item: _Request | None) -> bool:
        """File a queue item under ``_pending``; False for the stop sentinel."""
        if item is None:
            return False
        if item is not _WAKE:
            self._pending.append(item)
        return True

    def _take(self, block: bool) -> bool:
        """Move waiting requests to ``_pending``; False when asked to stop."""
        try:
            if not self._keep(self._queue.get() if block else self._queue.get_nowait()):
                return False
        except queue.Empty:
            return True
        if block and not self._hold.is_set():  # idle: give the first request company
            deadline = time.monotonic() + self.batch_wait_s
            while len(self._pending) < self.max_batch and (left := deadline - time.monotonic()) > 0:
                try:
                    if not self._keep(self._queue.get(timeout=left)):
                        return False
                except queue.Empty:
                    break
        while True:  # and whatever else is waiting
            try:
                if not self._keep(self._queue.get_nowait()):
                    return False
            except queue.Empty:
                return True

    def _serve(self) -> None:
        # This thread's own OpenMP team does the decoding. (A process should have one thread whose
        # torch ops use several cores: libgomp wakes the workers of a second such team through the
        # kernel, ~60 us per parallel op instead of ~20, once its threads outnumber the cores;
        # the model server keeps its main thread at one, see models/server.py.)
        import torch

        torch.set_num_threads(self.engine.num_threads)
        while True:
            idle = self.running == 0
            if idle and self._hold.is_set():
                self._drained.set()
            if not self._take(block=idle and (not self._pending or self._hold.is_set())):
                return
            self._pending = [r for r in self._pending if not r.future.cancelled()]
            if self._pending and not self._hold.is_set() and self.running < self.max_batch:
                self._admit()
            if self.running:
                self._step()

    def _admit(self) -> None:
        if self._batch is None:
            self._batch = self.engine.new_batch(prefix_cache=self.prefix_cache, max_slot_tokens=self.max_slot_tokens)
        room = self._batch.room([r.row for r in self._pending[: self.max_batch - self.running]])
        admitted, self._pending = self._pending[:room], self._pending[room:]
        if not admitted:
            return
        if any(r.tools for r in admitted):
            grammar = self.engine.tool_call_grammar()
            self._batch.grammar = grammar
            for r in admitted:
                if r.tools:
                    r.row.matcher = grammar.matcher(r.tools, r.call_required)
        # rows of one prompt head prefill together (their head computed once); others apart
        groups: dict[tuple[int, ...], list[_Request]] = {}
        for r in admitted:
            groups.setdefault(tuple(r.row.prompt_ids[:64]), []).append(r)
        for group in groups.values():
            self._timed(self._admit_group, group)

    def _admit_group(self, group: list[_Request]) -> None:
        assert self._batch is not None
        self.batches += 1
        for r in group:
            self._inflight[id(r.row)] = r
        try:
            ended = self._batch.add([r.row for r in group])
        except Exception as e:  # every request of the group learns of it; the batch goes on
            for r in group:
                self._inflight.pop(id(r.row), None)
                _post(r.loop, _settle, r.future, None, e)
            return
        self._answer(ended)

    def _step(self) -> None:
        assert self._batch is not None
        try:
            ended = self._timed(self._batch.step)
        except Exception as e:  # a failed forward fails every row in it; the sampler lives on
            log.exception("a decode step failed")
            for r in self._batch.rows:
                req = self._inflight.pop(id(r), None)
                if req is not None:
                    _post(req.loop, _settle, req.future, None, e)
            self._batch = None
            return
        self._answer(ended)

    def _timed(self, fn: Callable[..., Any], *args: Any) -> Any:
        self._busy_since = time.monotonic()
        try:
            return fn(*args)
        finally:
            self._busy_done += time.monotonic() - self._busy_since
            self._busy_since = None

    def _answer(self, rows: list[DecodeRow]) -> None:
        for row in rows:
            req = self._inflight.pop(id(row), None)
            if req is None:
                continue
            self.generated_tokens += len(row.completion_ids)
            # weights change only inside exclusive(), with no row decoding: the label now is the
            # label of the weights that sampled every token of this row
            result = Completion(
                row.completion_ids,
                row.logprobs,
                row.stop_reason or "length",
                row.sampled_logprobs,
                row.allowed,
                self.weights_version,
            )
            _post(req.loop, _settle, req.future, result, None)


_WAKE: Any = object()  # a queue item that only wakes the sampler thread


def _post(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` on the requester's ``loop``; nothing when that loop has closed (its
    ``asyncio.run`` was interrupted, e.g. by SIGTERM: nobody awaits the answer any more, and
    raising here would replace the interruption, or kill the sampler thread)."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        if not loop.is_closed():
            raise


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
