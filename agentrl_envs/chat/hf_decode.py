"""The decode core: rows that join and leave a running batch (continuous batching) on transformers.

A :class:`DecodeBatch` holds the KV cache of the rows being sampled. :meth:`DecodeBatch.add`
prefills new rows and merges them into the running batch, so a request that arrives while others
decode joins them at the next step instead of waiting for the whole batch to end;
:meth:`DecodeBatch.step` feeds every row its last token and samples the next. A row leaves as soon
as it stops. This is what :meth:`.engine.TransformersEngine.generate_batch` runs to completion and
what :class:`.sampling.BatchSampler` drives step by step.

Layout: row ``i`` of the cache is ``[left padding][its tokens]``; the attention mask hides the
padding and every row has its own position ids, so a row samples from the same distribution as
it would alone (up to float rounding). Rows that join are left-padded to the running length (or
the running rows to theirs); columns that only padding uses are dropped when rows leave.

Prompt heads are computed once: rows prefilled together share their common head (system prompt,
tool schemas), and :class:`PrefixCache` keeps the KV of recent heads, so the next turn of a
conversation, whose prompt extends the previous one, only computes what is new (the same reuse
as vLLM's automatic prefix caching, for whole heads).

Hand-written: transformers' own continuous batching (``generate_batch`` / paged attention, 5.x)
takes neither per-request logits processors (the xgrammar tool-call grammar) nor per-request
callbacks for streaming, and needs its paged attention kernels; this file is ~200 lines over
``DynamicCache``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from .decode import MIN_HEAD, DecodeEngine, DecodeRow, Sampled, prepare_rows, sample_tokens, shared_head_length, take_cancelled

if TYPE_CHECKING:
    from .grammar import ToolCallGrammar

__all__ = ["DecodeBatch", "PrefixCache"]


class PrefixCache:
    """The KV of recently computed prompt heads, least recently used evicted first.

    ``max_tokens`` bounds the tokens kept over all entries (0: off). An entry is a token tuple and,
    per layer, its keys and values (1, heads, T, dim); tensors are never changed in place, so
    entries are shared, not copied.
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = OrderedDict()
        self._tokens = 0
        self.hits = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, head: Sequence[int]) -> tuple[int, list[tuple[torch.Tensor, torch.Tensor]] | None]:
        """The KV of the longest prefix of ``head`` that an entry shares (at least ``MIN_HEAD``
        tokens): ``(its length, its KV cut to that length)``, or ``(0, None)``. An entry need not be
        a prefix of ``head`` as a whole: prompts of one task share their system prompt and tools
        with every cached conversation of that task."""
        best_key: tuple[int, ...] | None = None
        best = 0
        for key in self._entries:
            n = min(len(key), len(head))
            common = next((i for i in range(n) if key[i] != head[i]), n)
            if common > best:
                best_key, best = key, common
        if best_key is None or best < MIN_HEAD:
            return 0, None
        self._entries.move_to_end(best_key)
        self.hits += 1
        self.reused_tokens += best
        kv = self._entries[best_key]
        if best < len(best_key):
            kv = [(k[:, :, :best], v[:, :, :best]) for k, v in kv]
        return best, kv

    def store(self, head: Sequence[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Keep ``kv`` for ``head``; entries that are prefixes of it are dropped (it covers them)."""
        if self.max_tokens <= 0 or len(head) > self.max_tokens:
            return
        key = tuple(head)
        for old in [k for k in self._entries if len(k) <= len(key) and key[: len(k)] == k]:
            self._tokens -= len(old)
            del self._entries[old]
        self._entries[key] = kv
        self._tokens += len(key)
        while self._tokens > self.max_tokens:
            old, _ = self._entries.popitem(last=False)
            self._tokens -= len(old)

    def clear(self) -> None:
        """Forget every entry (after the weights change)."""
        self._entries.clear()
        self._tokens = 0


def _layers(cache: Any) -> list[Any]:
    layers = getattr(cache, "layers", None)
    if layers is None:  # pragma: no cover - transformers < 4.56 kept key_cache/value_cache lists
        raise RuntimeError("this transformers version's DynamicCache has no layers; upgrade transformers")
    return layers


class DecodeBatch:
    """The rows being sampled together and their KV cache (see the module docstring).

    Not thread-safe: one thread drives a batch. Every forward pass holds the engine's lock, so
    weights cannot change in the middle of a pass (callers that must not mix weight versions within
    a completion drain the batch first: :meth:`.sampling.BatchSampler.exclusive`).
    """

    def __init__(
        self,
        engine: DecodeEngine,
        grammar: ToolCallGrammar | None = None,
        prefix_cache: PrefixCache | None = None,
        max_slot_tokens: int = 0,
    ) -> None:
        self.engine = engine
        self.grammar = grammar
        self.prefix_cache = prefix_cache
        self.rows: list[DecodeRow] = []
        self._cache: Any = None
        self._attn: torch.Tensor | None = None  # (B, L)
        self._next: torch.Tensor | None = None  # (B,) the last sampled ids, not yet in the cache
        self._pos: torch.Tensor | None = None  # (B,) their positions
        self.steps = 0
        self.max_slot_tokens = max_slot_tokens  # not enforced here (see room)
        self.prefilled_tokens = 0

    def __len__(self) -> int:
        return len(self.rows)

    def room(self, rows: Sequence[DecodeRow]) -> int:
        """How many of ``rows`` can join now: all of them (``max_slot_tokens`` bounds the packed
        decoder's slot buffers; this path's cache is transformers' own)."""
        return len(rows)

    # ------------------------------------------------------------------ joining

    @torch.inference_mode()
    def add(self, rows: Sequence[DecodeRow]) -> list[DecodeRow]:
        """Prefill ``rows`` together, sample their first token and merge them into the batch.

        Returns the rows that already ended (a stop token first, ``max_tokens`` of 1...); the
        others decode with the batch from the next :meth:`step` on. A prompt too long for the
        context raises :class:`~.errors.ContextLengthError` before anything runs.
        """
        engine = self.engine
        prepare_rows(rows, engine, self.grammar)
        if not rows:
            return []
        cache, attn, logits = self._prefill([r.prompt_ids for r in rows])
        drawn = self._sample(logits, list(rows))
        tokens = drawn.tokens
        ended, live = [], []
        for i, r in enumerate(rows):
            r._take(drawn, i, engine.stop_token_ids)
            (ended if r.done else live).append(i)
        if live:
            keep = torch.tensor(live)
            if len(live) < len(rows):
                cache.batch_select_indices(keep)
                attn = attn[keep]
            pos = torch.tensor([len(rows[i].prompt_ids) for i in live])
            self._merge(cache, attn, tokens[keep], pos, [rows[i] for i in live])
        return [rows[i] for i in ended]

    def _prefill(self, prompts: list[list[int]]) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """KV cache (B, ., L, .), attention mask (B, L) and last logits (B, V) of ``prompts``.

        Rows are [shared head][left padding][own suffix]; the head's KV comes from the prefix
        cache where it can and is computed once for all rows otherwise."""
        from transformers import DynamicCache

        engine = self.engine
        model, kwarg = engine.model, engine._cache_kwarg
        B = len(prompts)
        shortest = min(len(p) for p in prompts)
        P = shared_head_length(prompts, shortest - 1) if B > 1 else (shortest - 1 if shortest - 1 >= MIN_HEAD else 0)
        head = prompts[0][:P]
        cache = DynamicCache(config=model.config)
        with engine._lock:
            if P:
                cached, kv = self.prefix_cache.lookup(head) if self.prefix_cache is not None else (0, None)
                if kv is not None:
                    for i, (k, v) in enumerate(kv):
                        cache.update(k, v, i)
                if cached < P:
                    ids = torch.tensor([head[cached:]], dtype=torch.long)  # (1, P - cached)
                    positions = torch.arange(cached, P)[None]  # (1, P - cached)
                    model(input_ids=ids, position_ids=positions, use_cache=True, logits_to_keep=1, **{kwarg: cache})
                    self.prefilled_tokens += P - cached
                    if self.prefix_cache is not None:
                        self.prefix_cache.store(head, [(layer.keys, layer.values) for layer in _layers(cache)])
                if B > 1:
                    cache.batch_repeat_interleave(B)
            suffixes = [p[P:] for p in prompts]
            S = max(len(x) for x in suffixes)
            ids = torch.full((B, S), engine.pad_token_id, dtype=torch.long)  # (B, S)
            attn = torch.zeros((B, P + S), dtype=torch.long)  # (B, P + S)
            attn[:, :P] = 1
            positions = torch.zeros((B, S), dtype=torch.long)  # (B, S)
            for i, x in enumerate(suffixes):
                ids[i, S - len(x) :] = torch.tensor(x)
                attn[i, P + S - len(x) :] = 1
                positions[i, S - len(x) :] = torch.arange(P, P + len(x))
            out = model(
                input_ids=ids,
                attention_mask=attn,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,
                **{kwarg: cache},
            )
            self.prefilled_tokens += sum(len(x) for x in suffixes)
        return cache, attn, out.logits[:, -1].float()

    def _merge(self, cache: Any, attn: torch.Tensor, tokens: torch.Tensor, pos: torch.Tensor, rows: list[DecodeRow]) -> None:
        if self._cache is None:
            self._cache, self._attn, self._next, self._pos, self.rows = cache, attn, tokens, pos, list(rows)
            return
        assert self._attn is not None and self._next is not None and self._pos is not None
        old_len, new_len = self._attn.shape[1], attn.shape[1]
        width = max(old_len, new_len)
        for mine, theirs in zip(_layers(self._cache), _layers(cache), strict=True):
            mine.keys = torch.cat([_left_pad(mine.keys, width), _left_pad(theirs.keys, width)], dim=0)
            mine.values = torch.cat([_left_pad(mine.values, width), _left_pad(theirs.values, width)], dim=0)
        self._attn = torch.cat([_left_pad_mask(self._attn, width), _left_pad_mask(attn, width)], dim=0)
        self._next = torch.cat([self._next, tokens])
        self._pos = torch.cat([self._pos, pos])
        self.rows.extend(rows)

    # ------------------------------------------------------------------ decoding

    @torch.inference_mode()
    def step(self) -> list[DecodeRow]:
        """One token for every row; returns (and removes) the rows that ended."""
        if not self.rows:
            return []
        assert self._attn is not None and self._next is not None and self._pos is not None
        ended = take_cancelled(self.rows)
        if ended:
            self._drop()
            if not self.rows:
                return ended
        B = len(self.rows)
        self._attn = torch.cat([self._attn, torch.ones((B, 1), dtype=torch.long)], dim=1)  # (B, L + 1)
        engine = self.engine
        with engine._lock:
            out = engine.model(
                input_ids=self._next[:, None],
                attention_mask=self._attn,
                position_ids=self._pos[:, None],
                use_cache=True,
                logits_to_keep=1,
                **{engine._cache_kwarg: self._cache},
            )
        self.steps += 1
        drawn = self._sample(out.logits[:, -1].float(), self.rows)
        for i, r in enumerate(self.rows):
            r._take(drawn, i, engine.stop_token_ids)
        self._next, self._pos = drawn.tokens, self._pos + 1
        finished = [r for r in self.rows if r.done]
        if finished:
            self._drop()
        return ended + finished

    def _drop(self) -> None:
        """Remove the rows that are done, then the columns only padding still uses."""
        assert self._attn is not None and self._next is not None and self._pos is not None
        keep = [i for i, r in enumerate(self.rows) if not r.done]
        if not keep:
            self.rows, self._cache, self._attn, self._next, self._pos = [], None, None, None, None
            return
        index = torch.tensor(keep)
        self.rows = [self.rows[i] for i in keep]
        self._attn, self._next, self._pos = self._attn[index], self._next[index], self._pos[index]
        start = int((self._attn.sum(dim=0) > 0).nonzero()[0])
        for layer in _layers(self._cache):
            layer.keys = layer.keys[index, :, start:]
            layer.values = layer.values[index, :, start:]
        self._attn = self._attn[:, start:]

    def _sample(self, logits: torch.Tensor, rows: list[DecodeRow]) -> Sampled:
        return sample_tokens(logits, rows, self.grammar)


def _left_pad(t: torch.Tensor, width: int) -> torch.Tensor:
    """(B, H, L, D) -> (B, H, width, D), zeros on the left."""
    missing = width - t.shape[2]
    if missing <= 0:
        return t
    return torch.cat([t.new_zeros((t.shape[0], t.shape[1], missing, t.shape[3])), t], dim=2)


def _left_pad_mask(m: torch.Tensor, width: int) -> torch.Tensor:
    """(B, L) -> (B, width), zeros on the left."""
    missing = width - m.shape[1]
    return m if missing <= 0 else torch.cat([m.new_zeros((m.shape[0], missing)), m], dim=1)
