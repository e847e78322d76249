"""The decode core for Llama-family models on the CPU: packed weights, one KV slot per row, and
prompt heads attended once for every row that shares them.

Same contract as :class:`.hf_decode.DecodeBatch` (rows join a running batch and leave when they
end; :meth:`FastDecodeBatch.add`, :meth:`FastDecodeBatch.step`), computed with
:class:`.llama.PackedLlama` instead of transformers' forward. What it does differently, and why
(2 CPU cores, SmolLM2-135M, fp32):

* **KV layout.** A row's context is a *head* — the KV of a prompt prefix shared by many rows
  (system prompt, tools, worked examples; an earlier turn of a GRPO group), one immutable tensor
  that every row using it references — then its *own* tokens in a slot of a preallocated buffer
  (no ``torch.cat`` of the whole cache per token, as transformers' ``DynamicCache`` does). A
  token is written into its row's slot in place.
* **Shared-head attention.** At each step the queries of all rows that share a head are
  multiplied with its keys in one batched product (the head's KV read once, not once per row),
  then combined with each row's own keys under one softmax. 16 rows on a 700-token head read
  ~32 MB of keys and values per step instead of ~520 MB, as much as the weights themselves.
* **Head cache** (:class:`HeadCache`, the counterpart of :class:`.hf_decode.PrefixCache`): heads of
  recent prompts and *snapshots* of finished rows (their own KV), so the next turn of an episode,
  whose prompt extends the last one, computes only the new tokens, and shares its head with the
  other episodes of its group.

Numerically this is transformers' arithmetic in another summation order: greedy completions equal
the transformers path's and logprobs are within 1e-4 (``tests/models/test_fast_decode.py``).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.nn.functional as F

from .decode import (
    MIN_HEAD,
    DecodeEngine,
    DecodeRow,
    common_prefix,
    prepare_rows,
    sample_tokens,
    shared_head_length,
    take_cancelled,
)
from .llama import PackedLlama

if TYPE_CHECKING:
    from .grammar import ToolCallGrammar

__all__ = ["FastDecodeBatch", "Head", "HeadCache"]

_CHUNK = 256  # the own-token capacity of the slots grows in multiples of this


def _chunks(tokens: int) -> int:
    """``tokens`` rounded up to the slots' granularity."""
    return -(-tokens // _CHUNK) * _CHUNK


@dataclass(eq=False)
class Head:
    """The KV of a prompt prefix that rows share; never changed after it is made.

    ``keys`` / ``values``: (L, KV, P, D) for the ``P = len(tokens)`` tokens at positions 0..P-1.
    Rows group by the identity of their head object, so the cache hands out one object per prefix.
    """

    tokens: tuple[int, ...]
    keys: torch.Tensor
    values: torch.Tensor

    def __len__(self) -> int:
        return len(self.tokens)

    def cut(self, n: int) -> Head:
        """The first ``n`` tokens' head (views, no copy)."""
        return Head(self.tokens[:n], self.keys[:, :, :n], self.values[:, :, :n])


@dataclass(eq=False)
class _Snapshot:
    """A finished row's context: its head and a copy of its own KV (L, KV, n, D)."""

    tokens: tuple[int, ...]  # head tokens + own tokens
    head: Head | None
    keys: torch.Tensor
    values: torch.Tensor


def _storage_bytes(tensors: list[torch.Tensor]) -> int:
    seen: set[int] = set()
    total = 0
    for t in tensors:
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total


class HeadCache:
    """Heads and row snapshots of recent prompts, least recently used evicted first.

    ``max_tokens`` bounds the tokens of all entries (0: off). :meth:`lookup` finds what a new
    prompt can reuse; :meth:`add_head` and :meth:`add_snapshot` keep new entries. ``hits`` and
    ``reused_tokens`` count what was reused. :meth:`live` lists the caches that exist.
    """

    _live: ClassVar[weakref.WeakSet[HeadCache]] = weakref.WeakSet()

    def __init__(self, max_tokens: int) -> None:
        HeadCache._live.add(self)
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[int, ...], Head | _Snapshot] = OrderedDict()
        self._tokens = 0
        self.hits = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    @classmethod
    def live(cls) -> list[HeadCache]:
        """The caches not yet garbage-collected, in no particular order."""
        return list(cls._live)

    @property
    def kv_bytes(self) -> int:
        """Bytes of the KV tensors its entries hold (storage shared between entries counted once)."""
        return _storage_bytes([t for e in self._entries.values() for t in (e.keys, e.values)])

    def clear(self) -> None:
        """Forget every entry (after the weights change)."""
        self._entries.clear()
        self._tokens = 0

    def lookup(self, tokens: Sequence[int]) -> tuple[Head | None, torch.Tensor | None, torch.Tensor | None, int]:
        """What a prompt starting with ``tokens`` can reuse: ``(head, own_keys, own_values, n)``:
        its first ``n`` tokens' KV are ``head`` followed by ``own_keys``/``own_values`` (L, KV,
        n - len(head), D) (``None`` when nothing beyond the head). ``(None, None, None, 0)`` when no
        entry shares at least ``MIN_HEAD`` tokens."""
        best_key, n = self._best(tokens)
        if best_key is None:
            return None, None, None, 0
        self._entries.move_to_end(best_key)
        self.hits += 1
        self.reused_tokens += n
        entry = self._entries[best_key]
        if isinstance(entry, Head):
            return (entry if len(entry) == n else self._cut(entry, n)), None, None, n
        head = entry.head
        P = len(head) if head is not None else 0
        if head is None:  # a row that had no head: its own tokens become one others can share
            return self._cut(Head(entry.tokens, entry.keys, entry.values), n), None, None, n
        if n <= P:
            return (head if n == P else self._cut(head, n)), None, None, n
        return head, entry.keys[:, :, : n - P], entry.values[:, :, : n - P], n

    def _best(self, tokens: Sequence[int]) -> tuple[tuple[int, ...] | None, int]:
        """The key of the entry sharing the longest prefix with ``tokens`` and that length
        (``(None, 0)`` under ``MIN_HEAD`` tokens); an exact head wins a tie."""
        best: tuple[int, bool] = (0, False)
        best_key: tuple[int, ...] | None = None
        tokens = tuple(tokens)
        for key, entry in self._entries.items():
            c = common_prefix(key, tokens)
            score = (c, isinstance(entry, Head) and len(entry) == c)
            if score > best:
                best, best_key = score, key
        return (best_key, best[0]) if best_key is not None and best[0] >= MIN_HEAD else (None, 0)

    def head_length(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` :meth:`lookup` would hand out as a shared head (not counted as
        a row's own tokens); changes nothing."""
        key, n = self._best(tokens)
        if key is None:
            return 0
        entry = self._entries[key]
        if isinstance(entry, Head) or entry.head is None:
            return n
        return min(n, len(entry.head))

    def _cut(self, head: Head, n: int) -> Head:
        """``head`` cut to ``n`` tokens, kept as an entry of its own so rows that reuse the same
        prefix get the same object (and share attention)."""
        existing = self._entries.get(tuple(head.tokens[:n]))
        if isinstance(existing, Head):
            return existing
        cut = head.cut(n)
        self._put(cut.tokens, cut)
        return cut

    def add_head(self, head: Head) -> None:
        self._put(head.tokens, head)

    def add_snapshot(self, tokens: Sequence[int], head: Head | None, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Keep a finished row's context; snapshots that are prefixes of it are dropped (it covers
        them), heads are kept (other rows share them)."""
        key = tuple(tokens)
        for old in [
            k for k, e in self._entries.items() if isinstance(e, _Snapshot) and len(k) <= len(key) and key[: len(k)] == k
        ]:
            self._drop(old)
        self._put(key, _Snapshot(key, head, keys, values))

    def _put(self, key: tuple[int, ...], entry: Head | _Snapshot) -> None:
        if self.max_tokens <= 0 or len(key) > self.max_tokens:
            return
        if key in self._entries:
            self._drop(key)
        self._entries[key] = entry
        self._tokens += len(key)
        while self._tokens > self.max_tokens:
            old = next(iter(self._entries))
            self._drop(old)

    def _drop(self, key: tuple[int, ...]) -> None:
        del self._entries[key]
        self._tokens -= len(key)


class FastDecodeBatch:
    """The rows being sampled together over a :class:`.llama.PackedLlama` (see the module doc).

    Not thread-safe: one thread drives a batch. Every forward pass holds the engine's lock.
    ``steps`` counts decode steps, ``prefilled_tokens`` the prompt tokens computed.
    ``max_slot_tokens`` (0: none) bounds the slot buffers' size in token slots (rows x the
    longest row's own tokens, completion budget included; 46 KB each for SmolLM2 in float32):
    :meth:`room` says how many new rows fit, and the buffers never grow past the bound for rows
    that fit it (a lone row longer than the bound still runs). :meth:`live` lists the batches
    that exist (``benchmarks/demo_memory.py`` reads their ``kv_bytes``).
    """

    _live: ClassVar[weakref.WeakSet[FastDecodeBatch]] = weakref.WeakSet()

    def __init__(
        self,
        engine: DecodeEngine,
        grammar: ToolCallGrammar | None = None,
        prefix_cache: HeadCache | None = None,
        max_slot_tokens: int = 0,
    ) -> None:
        packed = engine.packed
        if packed is None:
            raise ValueError("FastDecodeBatch needs an engine with a packed model (engine.packed)")
        FastDecodeBatch._live.add(self)
        self.engine = engine
        self.model: PackedLlama = packed
        self.grammar = grammar
        self.prefix_cache = prefix_cache
        self.rows: list[DecodeRow] = []
        self._heads: list[Head | None] = []
        self._own = torch.zeros(0, dtype=torch.long)  # (B,) tokens in each row's slot
        self._start = torch.zeros(0, dtype=torch.long)  # (B,) each row's head length
        self._next = torch.zeros(0, dtype=torch.long)  # (B,) the last sampled ids, not yet fed
        m = packed
        self._k = torch.zeros(m.n_layers, 0, m.n_kv_heads, 0, m.head_dim)  # (L, S, KV, T, D)
        self._v = torch.zeros_like(self._k)
        self.steps = 0
        self.prefilled_tokens = 0
        self.max_slot_tokens = max_slot_tokens

    def __len__(self) -> int:
        return len(self.rows)

    @classmethod
    def live(cls) -> list[FastDecodeBatch]:
        """The batches not yet garbage-collected, in no particular order."""
        return list(cls._live)

    @property
    def slots(self) -> tuple[int, int]:
        """The slot buffers' shape: (row slots, token slots each)."""
        return int(self._k.shape[1]), int(self._k.shape[3])

    @property
    def own_tokens(self) -> list[int]:
        """Each running row's own tokens in its slot (its head not counted)."""
        return [int(n) for n in self._own[: len(self.rows)].tolist()]

    @property
    def kv_bytes(self) -> int:
        """Bytes of the slot buffers (keys and values)."""
        return _storage_bytes([self._k, self._v])

    # ------------------------------------------------------------------ capacity

    def room(self, rows: Sequence[DecodeRow]) -> int:
        """How many of ``rows``, taken in order, can join now within ``max_slot_tokens`` (all of
        them when it is 0); an empty batch always takes the first. A row's own tokens are its
        prompt after the head the cache would share (:meth:`HeadCache.head_length`) plus its
        ``max_tokens``, rounded up as the buffers are."""
        if self.max_slot_tokens <= 0:
            return len(rows)
        longest = max((self._need(b) for b in range(len(self.rows))), default=0)
        for k, r in enumerate(rows):
            prompt = r.prompt_ids
            head = self.prefix_cache.head_length(prompt[:-1]) if self.prefix_cache is not None else 0
            longest = max(longest, _chunks(len(prompt) - head + r.max_tokens))
            if len(self.rows) + k > 0 and (len(self.rows) + k + 1) * longest > self.max_slot_tokens:
                return k
        return len(rows)

    def _need(self, b: int) -> int:
        """Own-token slots row ``b`` may still use: its own tokens and what it may still sample."""
        r = self.rows[b]
        return _chunks(int(self._own[b]) + r.max_tokens - len(r.completion_ids) + 1)

    def _reserve(self, slots: int, tokens: int) -> None:
        """Make the slot buffers hold at least ``slots`` rows of ``tokens`` own tokens."""
        L, S, KV, T, D = self._k.shape
        if slots <= S and tokens <= T:
            return
        T2 = max(T, _chunks(tokens))
        S2 = max(S, slots, 2 * S if slots > S else 0)  # doubling: fewer copies as rows join
        if self.max_slot_tokens > 0:  # but not past the bound where the rows fit in it
            S2 = max(slots, min(S2, self.max_slot_tokens // T2))
        for name in ("_k", "_v"):
            old = getattr(self, name)
            new = old.new_zeros((L, S2, KV, T2, D))  # zeros: masked positions must not hold NaN
            B = len(self.rows)
            if B:
                used = int(self._own.max())
                new[:, :B, :, :used] = old[:, :B, :, :used]
            setattr(self, name, new)

    # ------------------------------------------------------------------ joining

    @torch.inference_mode()
    def add(self, rows: Sequence[DecodeRow]) -> list[DecodeRow]:
        """Prefill ``rows``, sample their first token and merge them into the batch; returns the
        rows that already ended. A prompt too long for the context raises
        :class:`~.errors.ContextLengthError` before anything runs."""
        engine = self.engine
        prepare_rows(rows, engine, self.grammar)
        if not rows:
            return []
        prompts = [r.prompt_ids for r in rows]
        with engine._lock:
            shared = self._shared_head(prompts) if len(rows) > 1 else None
            plans = [self._plan(p, shared) for p in prompts]
            B0 = len(self.rows)
            # a row's slot holds every token after its head (reused own tokens included) + its completion
            need = max(
                len(p) - (len(head) if head is not None else 0) + r.max_tokens
                for p, r, (head, _, _, _) in zip(prompts, rows, plans, strict=True)
            )
            self._reserve(B0 + len(rows), max(need, int(self._own.max()) + 1 if B0 else 0))
            logits = []
            for j, (p, (head, own_k, own_v, n)) in enumerate(zip(prompts, plans, strict=True)):
                slot = B0 + j
                reused_own = 0
                if own_k is not None:
                    reused_own = own_k.shape[2]
                    self._k[:, slot, :, :reused_own] = own_k
                    self._v[:, slot, :, :reused_own] = own_v
                logits.append(self._prefill(slot, head, reused_own, p[n:]))
                self.rows.append(rows[j])
                self._heads.append(head)
                start = len(head) if head is not None else 0
                self._start = torch.cat([self._start, torch.tensor([start])])
                self._own = torch.cat([self._own, torch.tensor([len(p) - start])])
        drawn = sample_tokens(torch.cat(logits), list(rows), self.grammar)
        for i, r in enumerate(rows):
            r._take(drawn, i, engine.stop_token_ids)
        self._next = torch.cat([self._next, drawn.tokens])
        ended = [r for r in rows if r.done]
        if ended:
            self._drop()
        return ended

    def _plan(self, prompt: list[int], shared: Head | None) -> tuple[Head | None, Any, Any, int]:
        """What ``prompt``'s prefill starts from (see :meth:`HeadCache.lookup`); at least its last
        token is always computed (its logits are needed)."""
        limit = len(prompt) - 1
        head, own_k, own_v, n = (None, None, None, 0)
        if self.prefix_cache is not None:
            head, own_k, own_v, n = self.prefix_cache.lookup(prompt[:limit])
        if shared is not None and len(shared) >= n:  # the batch's own head reaches as far
            return shared, None, None, len(shared)
        return head, own_k, own_v, n

    def _shared_head(self, prompts: list[list[int]]) -> Head | None:
        """The head the rows prefilled together share (from the cache or computed once)."""
        P = shared_head_length(prompts, min(len(p) for p in prompts) - 1)
        if not P:
            return None
        tokens = prompts[0][:P]
        head, own_k, own_v, n = self.prefix_cache.lookup(tokens) if self.prefix_cache is not None else (None, None, None, 0)
        if n == P and own_k is None and head is not None:
            return head
        m = self.model
        start = len(head) if head is not None else 0
        keys = torch.zeros(m.n_layers, m.n_kv_heads, P - start, m.head_dim)  # (L, KV, P - start, D)
        values = torch.zeros_like(keys)
        reused_own = 0
        if own_k is not None:
            reused_own = own_k.shape[2]
            keys[:, :, :reused_own] = own_k
            values[:, :, :reused_own] = own_v
        if start + reused_own < P:  # a snapshot may already hold all of it
            self._run(tokens[start + reused_own :], start + reused_own, head, keys, values, reused_own, logits=False)
        if head is not None:
            keys = torch.cat([head.keys, keys], dim=2)
            values = torch.cat([head.values, values], dim=2)
        shared = Head(tuple(tokens), keys, values)
        if self.prefix_cache is not None:
            self.prefix_cache.add_head(shared)
        return shared

    def _prefill(self, slot: int, head: Head | None, reused_own: int, new: list[int]) -> torch.Tensor:
        """Compute ``new`` tokens of the row in ``slot`` (after its head and ``reused_own`` own
        tokens); returns the last token's logits (1, V)."""
        start = (len(head) if head is not None else 0) + reused_own
        out = self._run(new, start, head, self._k[:, slot], self._v[:, slot], reused_own, logits=True)
        assert out is not None
        return out

    def _run(
        self,
        ids: list[int],
        position: int,
        head: Head | None,
        keys: torch.Tensor,
        values: torch.Tensor,
        offset: int,
        *,
        logits: bool,
    ) -> torch.Tensor | None:
        """Forward ``ids`` (S tokens at positions ``position``..) of one sequence whose context
        is ``head`` then ``keys``/``values`` (L, KV, T, D) up to ``offset``; their KV is written
        there at ``offset``.. . Causal within ``ids``. Returns the last token's logits (1, V)."""
        m = self.model
        S = len(ids)
        self.prefilled_tokens += S
        P = len(head) if head is not None else 0
        x = m.embed(torch.tensor(ids))  # (S, E)
        positions = torch.arange(position, position + S)
        T = P + offset + S  # keys visible to the last token
        # query s sees every key up to its own position: key j < P + offset + s + 1
        visible = torch.arange(T)[None, :] <= torch.arange(P + offset, T)[:, None]  # (S, T)
        rotary = m.rotary(positions)
        for i in range(m.n_layers):
            q, k, v = m.qkv(i, x, rotary)  # (S, H, D), (S, KV, D), (S, KV, D)
            keys[i, :, offset : offset + S] = k.transpose(0, 1)
            values[i, :, offset : offset + S] = v.transpose(0, 1)
            K, V = keys[i, :, : offset + S], values[i, :, : offset + S]  # (KV, ., D)
            if head is not None:
                K, V = torch.cat([head.keys[i], K], dim=1), torch.cat([head.values[i], V], dim=1)
            attended = F.scaled_dot_product_attention(
                q.transpose(0, 1)[None], K[None], V[None], attn_mask=visible, scale=m.scale, enable_gqa=True
            )  # (1, H, S, D)
            x = m.finish_layer(i, x, attended[0].transpose(0, 1).reshape(S, -1))
        return m.logits(x[-1:]) if logits else None

    # ------------------------------------------------------------------ decoding

    @torch.inference_mode()
    def step(self) -> list[DecodeRow]:
        """One token for every row; returns (and removes) the rows that ended."""
        if not self.rows:
            return []
        ended = take_cancelled(self.rows)
        if ended:
            self._drop()
            if not self.rows:
                return ended
        m, engine = self.model, self.engine
        B = len(self.rows)
        own = self._own
        T = int(own.max()) + 1
        self._reserve(B, T)
        positions = self._start + own  # (B,)
        rows_index = torch.arange(B)
        visible = torch.arange(T)[None, :] <= own[:, None]  # (B, T): the slot's tokens and the new one
        bias = torch.zeros(B, 1, 1, T).masked_fill_(~visible[:, None, None, :], float("-inf"))
        groups = self._groups()
        with engine._lock:
            x = m.embed(self._next)  # (B, E)
            rotary = m.rotary(positions)
            for i in range(m.n_layers):
                q, k, v = m.qkv(i, x, rotary)
                self._k[i, rows_index, :, own] = k
                self._v[i, rows_index, :, own] = v
                x = m.finish_layer(i, x, self._attend(i, q, B, T, bias, groups))
            logits = m.logits(x)
        self.steps += 1
        self._own = own + 1
        drawn = sample_tokens(logits, self.rows, self.grammar)
        for i, r in enumerate(self.rows):
            r._take(drawn, i, engine.stop_token_ids)
        self._next = drawn.tokens
        finished = [r for r in self.rows if r.done]
        if finished:
            self._drop()
        return ended + finished

    def _groups(self) -> list[tuple[Head | None, torch.Tensor | None]]:
        """Rows by head: ``(head, their indices)``; indices ``None`` when every row shares it."""
        by_head: dict[int, tuple[Head | None, list[int]]] = {}
        for b, head in enumerate(self._heads):
            by_head.setdefault(id(head), (head, []))[1].append(b)
        if len(by_head) == 1:
            [(head, _)] = by_head.values()
            return [(head, None)]
        return [(head, torch.tensor(idx)) for head, idx in by_head.values()]

    def _attend(
        self, i: int, q: torch.Tensor, B: int, T: int, bias: torch.Tensor, groups: list[tuple[Head | None, torch.Tensor | None]]
    ) -> torch.Tensor:
        """Layer ``i``'s attention of one new token per row: queries (B, H, D) -> (B, H*D)."""
        m = self.model
        KV, D = m.n_kv_heads, m.head_dim
        G = m.n_heads // KV
        qg = q.view(B, KV, G, D)
        own_k, own_v = self._k[i, :B, :, :T], self._v[i, :B, :, :T]  # (B, KV, T, D)
        own_scores = torch.matmul(qg, own_k.transpose(-1, -2)).mul_(m.scale).add_(bias)  # (B, KV, G, T)
        if len(groups) == 1 and groups[0][0] is None:
            return torch.matmul(torch.softmax(own_scores, dim=-1), own_v).reshape(B, -1)
        out = torch.empty(B, KV, G, D)
        for head, idx in groups:
            qs, scores, ov = (qg, own_scores, own_v) if idx is None else (qg[idx], own_scores[idx], own_v[idx])
            n = qs.shape[0]
            if head is None:
                o = torch.matmul(torch.softmax(scores, dim=-1), ov)
            else:
                P = len(head)
                # every row's queries against the head's keys in one product: (KV, n G, D) x (KV, D, P)
                qh = qs.permute(1, 0, 2, 3).reshape(KV, n * G, D)
                head_scores = torch.bmm(qh, head.keys[i].transpose(1, 2)).mul_(m.scale)  # (KV, n G, P)
                head_scores = head_scores.view(KV, n, G, P).permute(1, 0, 2, 3)  # (n, KV, G, P)
                p = torch.softmax(torch.cat([head_scores, scores], dim=-1), dim=-1)  # (n, KV, G, P + T)
                ph = p[..., :P].permute(1, 0, 2, 3).reshape(KV, n * G, P)
                o = torch.bmm(ph, head.values[i]).view(KV, n, G, D).permute(1, 0, 2, 3)
                o = o + torch.matmul(p[..., P:], ov)
            if idx is None:
                return o.reshape(B, -1)
            out[idx] = o
        return out.reshape(B, -1)

    def _drop(self) -> None:
        """Remove the rows that are done (their context snapshotted into the head cache) and
        move the others' slots down so that rows 0..B-1 use slots 0..B-1."""
        keep = [b for b, r in enumerate(self.rows) if not r.done]
        for b, r in enumerate(self.rows):
            if r.done:
                self._snapshot(b)
        for j, b in enumerate(keep):
            if j != b:
                n = int(self._own[b])
                self._k[:, j, :, :n] = self._k[:, b, :, :n]
                self._v[:, j, :, :n] = self._v[:, b, :, :n]
        index = torch.tensor(keep, dtype=torch.long)
        self.rows = [self.rows[b] for b in keep]
        self._heads = [self._heads[b] for b in keep]
        self._own, self._start, self._next = self._own[index], self._start[index], self._next[index]
        self._shrink()

    def _shrink(self) -> None:
        """Give back slot memory the rows left behind: the buffers grow to the most rows and the
        longest row ever held (46 KB a token-slot for SmolLM2: 64 slots of 2,048 tokens are 6 GB),
        so once the rows need less than half of either, they are cut to what the rows still need
        (their own tokens and the tokens they may still sample, in chunks of 256)."""
        L, S, KV, T, D = self._k.shape
        B = len(self.rows)
        need_t = max((self._need(b) for b in range(B)), default=0)
        if B and S <= 2 * B and T <= max(2 * need_t, _CHUNK):
            return  # (no rows left: back to the empty buffers a new batch starts with)
        used = int(self._own.max()) if B else 0
        for name in ("_k", "_v"):
            old = getattr(self, name)
            new = old.new_zeros((L, B, KV, need_t, D))
            if B:
                new[:, :, :, :used] = old[:, :B, :, :used]
            setattr(self, name, new)

    def _snapshot(self, b: int) -> None:
        """Keep row ``b``'s context (prompt and the completion tokens fed so far) for reuse."""
        if self.prefix_cache is None or self.prefix_cache.max_tokens <= 0:
            return
        row, head = self.rows[b], self._heads[b]
        n = int(self._own[b])
        fed = (row.prompt_ids + row.completion_ids)[: (len(head) if head is not None else 0) + n]
        if n < 1 or len(fed) > self.prefix_cache.max_tokens:
            return
        self.prefix_cache.add_snapshot(fed, head, self._k[:, b, :, :n].clone(), self._v[:, b, :, :n].clone())
