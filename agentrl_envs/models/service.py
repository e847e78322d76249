"""The chat service behind the model server: chat requests answered through the batching sampler.

:class:`ChatService` turns a conversation into a prompt (:mod:`agentrl_envs.chat`), samples
``n`` completions through a :class:`~agentrl_envs.chat.sampling.BatchSampler` (continuous
batching: concurrent requests decode together) and parses each into an assistant message. It
also streams: :meth:`ChatService.stream` yields text deltas as tokens are sampled and the tool
calls once they are complete.

Budget, the way vLLM caps it: a request's ``max_tokens`` (default ``default_max_tokens``) is cut
to the room the context window leaves after the prompt and to ``max_tokens_limit``, the
server-side cap an operator sets (``--max-tokens-limit``). Two more guards end a completion that
could otherwise hold a client past a controller's idle timeout: ``max_request_seconds`` (wall
time from arrival) and ``repetition_window`` (the last that many tokens repeat one short cycle,
e.g. one word over and over). Both end it as ``finish_reason="length"``, as running out of tokens
does; the stop reason is logged.

The prefix cache keeps the KV of up to ``prefix_cache_tokens`` prompt tokens (32,768: one full
conversation per row of a 16-row batch at SmolLM2's 2,048-token context, ~1.5 GB in fp32).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..chat.engine import ChatGeneration, PreparedChat, TransformersEngine
from ..chat.sampling import BatchSampler, Completion
from ..chat.toolcalls import TOOL_CALL_OPEN
from ..protocol.openai import Message, ToolCall, ToolDefinition, Usage

__all__ = ["ChatService", "StreamDelta"]

log = logging.getLogger(__name__)


@dataclass
class StreamDelta:
    """One event of :meth:`ChatService.stream`: ``content`` text, or the complete ``tool_calls``
    of choice ``index``, or its ``finish_reason`` (and, last, ``usage`` over every choice)."""

    index: int = 0
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    finish_reason: str | None = None
    usage: Usage | None = None


class ChatService:
    """Chat completions for the server (see the module docstring for the budget rules)."""

    def __init__(
        self,
        engine: TransformersEngine,
        *,
        max_batch: int = 16,
        batch_wait_s: float = 0.01,
        default_max_tokens: int = 512,
        max_tokens_limit: int | None = 1024,
        max_request_seconds: float | None = 150.0,
        repetition_window: int = 64,
        prefix_cache_tokens: int = 32768,
    ) -> None:
        self.engine = engine
        self.name = engine.name
        self.default_max_tokens = default_max_tokens
        self.max_tokens_limit = max_tokens_limit
        self.max_request_seconds = max_request_seconds
        self.repetition_window = repetition_window
        self.sampler = BatchSampler(
            engine, max_batch=max_batch, batch_wait_s=batch_wait_s, prefix_cache_tokens=prefix_cache_tokens, name="chat"
        )

    @property
    def max_context(self) -> int:
        return self.engine.max_context

    def budget(self, prompt_tokens: int, requested: int | None) -> int:
        """The completion tokens a request gets (see the module docstring)."""
        budget = requested if requested is not None else self.default_max_tokens
        if self.max_tokens_limit is not None:
            budget = min(budget, self.max_tokens_limit)
        return max(1, min(budget, self.max_context - prompt_tokens))

    async def prepare(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition] | None, tool_choice: Any
    ) -> PreparedChat:
        """Render the prompt and pick the grammar (the sampler refuses a prompt that leaves no
        room for an answer with :class:`~agentrl_envs.chat.errors.ContextLengthError`)."""
        return await asyncio.to_thread(self.engine.prepare_chat, messages, tools, tool_choice)

    async def _sample(
        self,
        prepared: PreparedChat,
        max_tokens: int | None,
        temperature: float,
        top_p: float,
        seed: int | None,
        on_token: Any = None,
    ) -> Completion:
        started = time.monotonic()
        done = await self.sampler.generate(
            prepared.prompt_ids,
            self.budget(len(prepared.prompt_ids), max_tokens),
            temperature,
            top_p,
            tools=prepared.grammar_tools,
            call_required=prepared.call_required,
            seed=seed,
            deadline=started + self.max_request_seconds if self.max_request_seconds else None,
            repetition_window=self.repetition_window,
            on_token=on_token,
        )
        if done.stop_reason in ("repetition", "deadline"):
            log.info(
                "completion ended by the %s guard after %d tokens, %.1f s",
                done.stop_reason,
                len(done.completion_ids),
                time.monotonic() - started,
            )
        return done

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition] | None = None,
        *,
        max_tokens: int | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        tool_choice: Any = None,
        n: int = 1,
    ) -> list[ChatGeneration]:
        """``n`` answers to one conversation (choice ``i`` seeded with ``seed + i``), sampled
        together; each with its own usage (the prompt counted in each)."""
        prepared = await self.prepare(messages, tools, tool_choice)
        done = await asyncio.gather(
            *(self._sample(prepared, max_tokens, temperature, top_p, None if seed is None else seed + i) for i in range(n))
        )
        return [await asyncio.to_thread(self.engine.finish_chat, prepared, d.completion_ids) for d in done]

    async def stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition] | None = None,
        *,
        max_tokens: int | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        tool_choice: Any = None,
        n: int = 1,
    ) -> AsyncIterator[StreamDelta]:
        """The same answers as :meth:`complete`, as deltas: content while it is sampled, each tool
        call once it is complete, a finish reason per choice, then the usage of all choices.

        Text that could still turn out to be a tool call (a ``<tool_call>`` tag or a JSON object
        when tools are offered) is held back until that is known, so the concatenated content
        deltas of a choice are its message's content."""
        prepared = await self.prepare(messages, tools, tool_choice)
        events: asyncio.Queue[tuple[int, int | Completion | BaseException]] = asyncio.Queue()

        async def one(i: int) -> None:
            try:
                done = await self._sample(
                    prepared,
                    max_tokens,
                    temperature,
                    top_p,
                    None if seed is None else seed + i,
                    on_token=lambda token: events.put_nowait((i, token)),
                )
                events.put_nowait((i, done))
            except BaseException as e:  # handed to the consumer, which re-raises it
                events.put_nowait((i, e))

        tasks = [asyncio.create_task(one(i)) for i in range(n)]
        texts = [_StreamText(self.engine, prepared.tool_names is not None) for _ in range(n)]
        usage = Usage()
        try:
            left = n
            while left:
                i, item = await events.get()
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, int):
                    delta = texts[i].push(item)
                    if delta:
                        yield StreamDelta(index=i, content=delta)
                    continue
                left -= 1
                generation = await asyncio.to_thread(self.engine.finish_chat, prepared, item.completion_ids)
                rest = texts[i].finish(generation.message.content)
                if rest:
                    yield StreamDelta(index=i, content=rest)
                if generation.message.tool_calls:
                    yield StreamDelta(index=i, tool_calls=generation.message.tool_calls)
                yield StreamDelta(index=i, finish_reason=generation.finish_reason)
                usage.prompt_tokens += generation.usage.prompt_tokens
                usage.completion_tokens += generation.usage.completion_tokens
            usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
            yield StreamDelta(usage=usage)
        finally:
            for task in tasks:  # a client that went away stops its rows at the next step
                task.cancel()

    def close(self) -> None:
        self.sampler.close()


class _StreamText:
    """Incremental detokenization of one choice, holding back what may become a tool call."""

    def __init__(self, engine: TransformersEngine, tools_offered: bool) -> None:
        self.engine = engine
        self.tools_offered = tools_offered
        self.ids: list[int] = []
        self.sent = ""

    def push(self, token: int) -> str:
        if token in self.engine.stop_token_ids:
            return ""
        self.ids.append(token)
        text = self.engine.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):  # a multi-byte character not complete yet
            return ""
        safe = self._safe_prefix(text)
        if len(safe) <= len(self.sent) or not safe.startswith(self.sent):
            return ""
        delta, self.sent = safe[len(self.sent) :], safe
        return delta

    def _safe_prefix(self, text: str) -> str:
        """The part of ``text`` that is surely content (what :func:`parse_completion` keeps)."""
        text = text.lstrip()
        if self.tools_offered:
            if text[:1] in ("{", "`", "<") and not self.sent:  # may be a call, bare, fenced or tagged
                return ""
            cut = text.find(TOOL_CALL_OPEN)
            if cut >= 0:
                text = text[:cut]
            else:  # hold back a tag that may be starting at the end
                for k in range(min(len(TOOL_CALL_OPEN) - 1, len(text)), 0, -1):
                    if TOOL_CALL_OPEN.startswith(text[-k:]):
                        text = text[:-k]
                        break
        return text.rstrip()  # trailing whitespace may be stripped from the final content

    def finish(self, content: str | None) -> str:
        """What is left to send once the message is parsed (its content minus what was sent)."""
        content = content or ""
        if content.startswith(self.sent):
            return content[len(self.sent) :]
        log.debug("streamed content %r is not a prefix of the parsed content %r", self.sent, content)
        return ""
