"""Token-in/token-out trajectories of multi-turn episodes.

The engine never sees re-tokenized history. After an assistant turn, the next prompt is the
tokens already held (prompt, the model's *sampled* completion ids, earlier environment tokens)
plus the tokens of what the chat template writes after that turn: the end of the assistant
turn, the environment's messages and the next generation prompt. That tail is found by
rendering the conversation twice — through the last assistant message without a generation
prompt, and in full with one — and taking the difference of the two texts. So the tokens
trained on are exactly the tokens the engine conditioned on and produced.

Re-tokenization drift (the model's sampled ids differ from what tokenizing the rendered history
would give, e.g. ``{"a":1}`` re-rendered as ``{"a": 1}`` or a word split differently) is counted
per turn in :attr:`TokenTrajectory.drift_turns`, not silently absorbed. If a template re-renders
earlier history differently once more messages follow (so the full text does not extend the
shorter one), the episode *forks*: the held tokens close one training row and a new row starts
from the freshly rendered prompt; both rows carry the episode's advantage.

Masks: 1 on tokens an engine sampled (they carry that engine's logprobs), 0 on everything else:
prompt, environment output, template glue, forced prefix tokens. A sampled token the tool-call
grammar restricted also keeps the set of tokens it was drawn from (``Segment.allowed``), so the
trainer recomputes its logprob under the same restriction (docs/trainer.md, "Tool-call grammar").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl_envs.chat.toolcalls import render_prompt
from agentrl_envs.protocol.openai import Message, ToolDefinition

__all__ = ["Segment", "TokenTrajectory", "TurnRecord"]


@dataclass
class Segment:
    """One training row: token ids, loss mask and the rollout logprob of each token (0 off-mask).

    ``logprobs`` are the behaviour policy's (the distribution each token was drawn from);
    ``free_logprobs`` the engine's unconstrained ones (equal where the grammar restricted nothing);
    ``allowed`` maps a position to the packed set of tokens its token was drawn from, for the
    tokens the grammar restricted."""

    input_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    free_logprobs: list[float] = field(default_factory=list)
    allowed: dict[int, Any] = field(default_factory=dict)

    def extend(
        self,
        ids: Sequence[int],
        mask: int,
        logprobs: Sequence[float] | None = None,
        *,
        allowed: Sequence[Any] | None = None,
        free_logprobs: Sequence[float] | None = None,
    ) -> None:
        for name, values in (("logprobs", logprobs), ("allowed", allowed), ("free_logprobs", free_logprobs)):
            if values is not None and len(values) != len(ids):
                raise ValueError(f"{len(ids)} ids but {len(values)} {name}")
        if mask and logprobs is None:
            raise ValueError("trained tokens need the logprobs of the engine that sampled them")
        start = len(self.input_ids)
        for i, bits in enumerate(allowed or ()):
            if bits is not None:
                self.allowed[start + i] = bits
        self.input_ids.extend(ids)
        self.loss_mask.extend([mask] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))
        free = free_logprobs if free_logprobs is not None else logprobs
        self.free_logprobs.extend(free if free is not None else [0.0] * len(ids))


@dataclass(frozen=True)
class TurnRecord:
    """Who generated one assistant turn: the engine, its weights version, whether it lags."""

    engine: int
    version: int
    lagging: bool
    tokens: int
    stopped: bool


class TokenTrajectory:
    """Builds the training rows of one episode turn by turn.

    Use: ``ids = t.next_prompt(messages)`` → engine samples ``(completion, logprobs)`` from ids →
    ``t.add_completion(completion, logprobs, ...)`` → append the parsed assistant message and the
    environment's reply to ``messages`` → ``t.next_prompt(messages)`` again.

    ``assistant_prefix`` is text written at the start of every assistant turn before sampling
    (e.g. the opening of a tool call); its tokens are part of the prompt (mask 0).
    """

    def __init__(
        self,
        tokenizer: Any,
        tools: Sequence[ToolDefinition] | None,
        stop_token_ids: Sequence[int],
        assistant_prefix: str = "",
    ) -> None:
        self.tokenizer = tokenizer
        self.tools = list(tools) if tools else None
        self.stop_token_ids = list(stop_token_ids)
        self._stop_texts = {tokenizer.convert_ids_to_tokens(i): i for i in self.stop_token_ids}
        self.assistant_prefix = assistant_prefix
        self.prefix_ids = self._encode(assistant_prefix) if assistant_prefix else []
        self.segments: list[Segment] = []
        self.turns: list[TurnRecord] = []
        self.drift_turns = 0
        self.forks = 0
        self._through_assistant: int | None = None  # len(messages) right after the last assistant turn
        self._last_stopped = True
        self._checked: tuple[int, list[int]] = (0, [])  # at the last prompt: len(held ids), its canonical ids

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _render(self, messages: Sequence[Message], generation_prompt: bool) -> str:
        return render_prompt(self.tokenizer, messages, self.tools, add_generation_prompt=generation_prompt)

    def _fresh_segment(self, messages: Sequence[Message]) -> list[int]:
        seg = Segment()
        seg.extend(self._encode(self._render(messages, True) + self.assistant_prefix), 0)
        self.segments.append(seg)
        self._checked = (len(seg.input_ids), list(seg.input_ids))
        return list(seg.input_ids)

    def next_prompt(self, messages: Sequence[Message]) -> list[int]:
        """Token ids for the engine to continue: held tokens + the template's tail for ``messages``."""
        if not self.segments:
            return self._fresh_segment(messages)
        if self._through_assistant is None:
            raise RuntimeError("next_prompt called twice without add_completion/assistant message in between")
        seg = self.segments[-1]
        upto = self._render(messages[: self._through_assistant], False)
        full = self._render(messages, True)
        cut = max((upto.rfind(text), text) for text in self._stop_texts)
        if not full.startswith(upto) or cut[0] < 0:
            self.forks += 1
            self._through_assistant = None
            return self._fresh_segment(messages)
        pos, stop_text = cut
        glue = upto[pos + len(stop_text) :]  # what the template writes after the end-of-turn token
        tail = ([] if self._last_stopped else [self._stop_texts[stop_text]]) + self._encode(
            glue + full[len(upto) :] + self.assistant_prefix
        )
        seg.extend(tail, 0)
        # drift of this turn only: the ids added since the last prompt against their canonical
        # re-tokenization (an earlier turn's drift is not counted again)
        canonical = self._encode(full + self.assistant_prefix)
        held_from, canon_prev = self._checked
        if canonical[: len(canon_prev)] == canon_prev:
            drifted = canonical[len(canon_prev) :] != seg.input_ids[held_from:]
        else:
            drifted = canonical != seg.input_ids
        self.drift_turns += int(drifted)
        self._checked = (len(seg.input_ids), canonical)
        self._through_assistant = None
        return list(seg.input_ids)

    def add_completion(
        self,
        completion_ids: Sequence[int],
        logprobs: Sequence[float],
        *,
        n_messages: int,
        engine: int = 0,
        version: int = 0,
        lagging: bool = False,
        allowed: Sequence[Any] | None = None,
        free_logprobs: Sequence[float] | None = None,
    ) -> None:
        """Record the engine's sampled ids (mask 1, with its logprobs and, where the grammar
        restricted a token, the tokens it was drawn from: see :class:`Segment`).

        ``n_messages``: the length of the conversation once the parsed assistant message is
        appended to it (the point up to which the next render counts as history).
        """
        if not self.segments:
            raise RuntimeError("add_completion before next_prompt")
        self.segments[-1].extend(list(completion_ids), 1, list(logprobs), allowed=allowed, free_logprobs=free_logprobs)
        self._last_stopped = bool(completion_ids) and completion_ids[-1] in self.stop_token_ids
        self._through_assistant = n_messages
        self.turns.append(TurnRecord(engine, version, lagging, len(completion_ids), self._last_stopped))

    def completion_text(self, completion_ids: Sequence[int]) -> str:
        """The assistant's text for one turn (forced prefix included, stop tokens dropped)."""
        ids = [t for t in completion_ids if t not in self.stop_token_ids]
        return self.assistant_prefix + self.tokenizer.decode(ids, skip_special_tokens=True)

    @property
    def trained_tokens(self) -> int:
        return sum(sum(s.loss_mask) for s in self.segments)
