"""Token-in/token-out trajectories with the real SmolLM2 tokenizer, over hand-built multi-turn episodes."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import pytest

# nothing may come from a hub: set before transformers is imported anywhere
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from agentrl_envs.chat.toolcalls import parse_completion, render_prompt  # noqa: E402
from agentrl_envs.protocol.openai import Message, ToolDefinition  # noqa: E402
from agentrl_trainer.trajectory import Segment, TokenTrajectory  # noqa: E402

pytestmark = pytest.mark.model

TOOLS = [
    ToolDefinition.model_validate(
        {
            "function": {
                "name": "query",
                "description": "Run one SQL statement.",
                "parameters": {"type": "object", "properties": {"sql": {"type": "string"}}, "required": ["sql"]},
            }
        }
    )
]
CALL_1 = '<tool_call>\n{"name": "query", "arguments": {"sql": "SELECT COUNT(*) FROM t"}}\n</tool_call>'
CALL_2 = '<tool_call>\n{"name": "query", "arguments": {"sql": "SELECT 1"}}\n</tool_call>'
ANSWER = "There are 42 rows."


@pytest.fixture(scope="module")
def tok() -> Any:
    transformers = pytest.importorskip("transformers")
    from agentrl_envs.chat.loading import model_directory

    return transformers.AutoTokenizer.from_pretrained(str(model_directory()), local_files_only=True)


@pytest.fixture(scope="module")
def end_id(tok: Any) -> int:
    i = tok.convert_tokens_to_ids("<|im_end|>")
    assert isinstance(i, int) and i != tok.unk_token_id
    return i


def first_messages() -> list[Message]:
    return [
        Message(role="system", content="You answer questions about a database."),
        Message(role="user", content="How many rows has t?"),
    ]


def encode(tok: Any, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


def fake_logprobs(n: int, start: int = 0) -> list[float]:
    return [-0.1 * (start + i) - 0.05 for i in range(n)]


class Episode:
    """Drives a TokenTrajectory the way rollout.run_episode does, with hand-written completions."""

    def __init__(self, tok: Any, end_id: int, prefix: str = "") -> None:
        self.tok, self.end_id = tok, end_id
        self.traj = TokenTrajectory(tok, TOOLS, [end_id], assistant_prefix=prefix)
        self.messages = first_messages()
        self.prompts: list[list[int]] = []
        self.prompt_messages: list[int] = []  # len(messages) when each prompt was made
        self.sampled: list[tuple[int, list[int], list[float]]] = []  # (start position, ids, logprobs)
        self._lp = 0

    def prompt(self) -> list[int]:
        ids = self.traj.next_prompt(self.messages)
        self.prompts.append(ids)
        self.prompt_messages.append(len(self.messages))
        return ids

    def complete(self, text: str, stop: bool = True) -> Message:
        """Sample ``text`` (+ <|im_end|> if ``stop``) after the last prompt; append the parsed message."""
        ids = encode(self.tok, text) + ([self.end_id] if stop else [])
        lps = fake_logprobs(len(ids), self._lp)
        self._lp += len(ids)
        self.sampled.append((len(self.prompts[-1]), ids, lps))
        msg = parse_completion(self.traj.completion_text(ids), ["query"]).to_message()
        self.messages.append(msg)
        self.traj.add_completion(ids, lps, n_messages=len(self.messages), engine=1, version=3)
        return msg

    def tool_reply(self, msg: Message, text: str) -> None:
        assert msg.tool_calls
        self.messages.append(Message(role="tool", content=text, tool_call_id=msg.tool_calls[0].id))

    @property
    def seg(self) -> Segment:
        assert len(self.traj.segments) == 1
        return self.traj.segments[0]


def three_turns(tok: Any, end_id: int, call_1: str = CALL_1, prefix: str = "") -> Episode:
    ep = Episode(tok, end_id, prefix)
    ep.prompt()
    ep.tool_reply(ep.complete(call_1.removeprefix(prefix)), "42")
    ep.prompt()
    ep.tool_reply(ep.complete(CALL_2.removeprefix(prefix)), "1")
    ep.prompt()
    ep.complete(ANSWER.removeprefix(prefix) if not prefix else "")
    return ep


def sampled_positions(ep: Episode) -> dict[int, float]:
    return {start + k: lp for start, ids, lps in ep.sampled for k, lp in enumerate(lps)}


def assert_sampled_ids_in_place(ep: Episode, seg: Segment) -> None:
    for start, ids, _ in ep.sampled:
        assert seg.input_ids[start : start + len(ids)] == ids


def test_first_prompt_is_the_rendered_conversation(tok: Any) -> None:
    traj = TokenTrajectory(tok, TOOLS, [tok.convert_tokens_to_ids("<|im_end|>")])
    ids = traj.next_prompt(first_messages())
    text = render_prompt(tok, first_messages(), TOOLS)
    assert text.endswith("<|im_start|>assistant\n") and '"name": "query"' in text
    assert ids == encode(tok, text)
    assert traj.segments[0].loss_mask == [0] * len(ids)
    assert traj.segments[0].logprobs == [0.0] * len(ids)


def test_held_tokens_are_a_prefix_of_every_later_prompt(tok: Any, end_id: int) -> None:
    ep = three_turns(tok, end_id)
    p1, p2, p3 = ep.prompts
    assert len(p1) < len(p2) < len(p3)
    assert p2[: len(p1)] == p1 and p3[: len(p2)] == p2
    # each later prompt holds the previous prompt, then exactly the ids that were sampled after it
    for prompt, nxt, (start, ids, _) in zip(ep.prompts, ep.prompts[1:], ep.sampled, strict=False):
        assert start == len(prompt)
        assert nxt[start : start + len(ids)] == ids
    assert ep.seg.input_ids[: len(p3)] == p3
    assert ep.traj.forks == 0


def test_mask_is_one_exactly_on_sampled_ids_with_their_logprobs(tok: Any, end_id: int) -> None:
    ep = three_turns(tok, end_id)
    seg = ep.seg
    expected = sampled_positions(ep)
    assert len(seg.input_ids) == len(seg.loss_mask) == len(seg.logprobs)
    assert [i for i, m in enumerate(seg.loss_mask) if m] == sorted(expected)
    for i, (m, lp) in enumerate(zip(seg.loss_mask, seg.logprobs, strict=True)):
        assert lp == (expected[i] if m else 0.0)
    assert_sampled_ids_in_place(ep, seg)
    assert ep.traj.trained_tokens == sum(len(ids) for _, ids, _ in ep.sampled)
    assert [(t.engine, t.version, t.lagging, t.stopped) for t in ep.traj.turns] == [(1, 3, False, True)] * 3
    assert [t.tokens for t in ep.traj.turns] == [len(ids) for _, ids, _ in ep.sampled]


def test_canonical_completions_decode_to_the_chat_template_rendering(tok: Any, end_id: int) -> None:
    ep = three_turns(tok, end_id)
    assert ep.traj.drift_turns == 0
    text = tok.decode(ep.seg.input_ids)
    # the episode ends on the sampled <|im_end|>; the template's history adds only its newline
    assert text + "\n" == render_prompt(tok, ep.messages, TOOLS, add_generation_prompt=False)
    assert ep.seg.input_ids == encode(tok, text)
    assert "<tool_response>\n42\n</tool_response>" in text and text.endswith(ANSWER + "<|im_end|>")
    # and every prompt the engine saw was exactly the rendered conversation so far
    for prompt, n in zip(ep.prompts, ep.prompt_messages, strict=True):
        assert prompt == encode(tok, render_prompt(tok, ep.messages[:n], TOOLS))


def test_non_canonical_tool_call_counts_drift_and_keeps_sampled_ids(tok: Any, end_id: int) -> None:
    compact = '<tool_call>\n{"name":"query","arguments":{"sql":"SELECT COUNT(*) FROM t"}}\n</tool_call>'
    ep = Episode(tok, end_id)
    ep.prompt()
    msg = ep.complete(compact)
    assert msg.tool_calls and msg.tool_calls[0].function.arguments == '{"sql": "SELECT COUNT(*) FROM t"}'
    ep.tool_reply(msg, "42")
    ep.prompt()
    assert ep.traj.drift_turns == 1
    assert ep.traj.forks == 0
    seg = ep.seg
    assert_sampled_ids_in_place(ep, seg)
    assert [i for i, m in enumerate(seg.loss_mask) if m] == sorted(sampled_positions(ep))
    text = tok.decode(seg.input_ids)
    assert compact in text  # what the model wrote, not the re-rendered form
    assert text != render_prompt(tok, ep.messages, TOOLS)
    assert text.replace(compact, CALL_1) == render_prompt(tok, ep.messages, TOOLS)


def test_truncated_completion_gets_an_untrained_end_of_turn(tok: Any, end_id: int) -> None:
    ep = Episode(tok, end_id)
    p1 = ep.prompt()
    ep.complete("Let me think", stop=False)  # ran out of max_tokens: no <|im_end|>
    assert ep.traj.turns[-1].stopped is False
    ep.messages.append(Message(role="user", content="Go on."))
    p2 = ep.prompt()
    start, ids, _ = ep.sampled[0]
    assert start == len(p1) and p2[start : start + len(ids)] == ids
    pos = start + len(ids)
    assert p2[pos] == end_id and ep.seg.loss_mask[pos] == 0 and ep.seg.logprobs[pos] == 0.0
    assert sum(ep.seg.loss_mask) == len(ids)
    assert ep.traj.drift_turns == 0
    assert tok.decode(p2) == render_prompt(tok, ep.messages, TOOLS)


def test_stopped_completion_gets_no_second_end_of_turn(tok: Any, end_id: int) -> None:
    ep = Episode(tok, end_id)
    p1 = ep.prompt()
    ep.complete(ANSWER)
    ep.messages.append(Message(role="user", content="Thanks."))
    p2 = ep.prompt()
    pos = len(p1) + len(ep.sampled[0][1])
    assert p2[pos - 1] == end_id and p2[pos] != end_id
    assert ep.seg.loss_mask[pos - 1] == 1  # the sampled stop token is trained


def test_assistant_prefix_tokens_precede_each_completion_untrained(tok: Any, end_id: int) -> None:
    prefix = "<tool_call>\n"
    ep = Episode(tok, end_id, prefix=prefix)
    prefix_ids = encode(tok, prefix)
    assert ep.traj.prefix_ids == prefix_ids
    ep.prompt()
    ep.tool_reply(ep.complete(CALL_1.removeprefix(prefix)), "42")
    ep.prompt()
    ep.tool_reply(ep.complete(CALL_2.removeprefix(prefix)), "1")
    ep.prompt()
    seg = ep.seg
    for prompt, (start, _ids, _) in zip(ep.prompts, ep.sampled, strict=False):
        assert start == len(prompt)
        assert prompt[-len(prefix_ids) :] == prefix_ids
        assert seg.loss_mask[start - len(prefix_ids) : start] == [0] * len(prefix_ids)
    assert ep.prompts[-1][-len(prefix_ids) :] == prefix_ids
    assert_sampled_ids_in_place(ep, seg)
    # the parsed call saw the forced prefix: the tool call is complete
    assert ep.messages[2].tool_calls and ep.messages[2].tool_calls[0].function.name == "query"
    assert ep.traj.drift_turns == 0
    assert tok.decode(seg.input_ids) == render_prompt(tok, ep.messages, TOOLS) + prefix


def test_template_that_rewrites_history_forks_a_new_row(tok: Any, end_id: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # a ChatML template whose first line counts the messages: history never renders the same twice
    template = (
        "{{ messages | length }} messages\n"
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    monkeypatch.setattr(tok, "chat_template", template)
    ep = Episode(tok, end_id)
    p1 = ep.prompt()
    ep.complete(ANSWER)
    ep.messages.append(Message(role="user", content="And in table u?"))
    p2 = ep.prompt()
    assert ep.traj.forks == 1
    assert len(ep.traj.segments) == 2
    first, second = ep.traj.segments
    assert first.input_ids == p1 + ep.sampled[0][1] and first.loss_mask == [0] * len(p1) + [1] * len(ep.sampled[0][1])
    assert second.input_ids == p2 == encode(tok, render_prompt(tok, ep.messages, TOOLS))
    assert tok.decode(p1).startswith("2 messages") and tok.decode(p2).startswith("4 messages")
    assert sum(second.loss_mask) == 0
    ep.complete("Also 42.")
    assert sum(second.loss_mask) == len(ep.sampled[1][1])
    assert ep.traj.trained_tokens == len(ep.sampled[0][1]) + len(ep.sampled[1][1])


def test_misuse_raises(tok: Any, end_id: int) -> None:
    traj = TokenTrajectory(tok, TOOLS, [end_id])
    with pytest.raises(RuntimeError, match="before next_prompt"):
        traj.add_completion([1], [-0.1], n_messages=3)
    traj.next_prompt(first_messages())
    with pytest.raises(RuntimeError, match="twice"):
        traj.next_prompt(first_messages())
    with pytest.raises(ValueError, match="logprobs"):
        traj.add_completion([1, 2], [-0.1], n_messages=3)


def test_segment_extend_rules() -> None:
    seg = Segment()
    seg.extend([5, 6], 0)
    seg.extend([7], 1, [-0.5])
    assert (seg.input_ids, seg.loss_mask, seg.logprobs) == ([5, 6, 7], [0, 0, 1], [0.0, 0.0, -0.5])
    with pytest.raises(ValueError, match="need the logprobs"):
        seg.extend([8], 1)
    with pytest.raises(ValueError, match="2 ids but 1 logprobs"):
        seg.extend([8, 9], 0, [-0.1])


def test_completion_text_drops_stop_tokens_and_adds_prefix(tok: Any, end_id: int) -> None:
    traj = TokenTrajectory(tok, TOOLS, [end_id], assistant_prefix="<tool_call>\n")
    ids: Sequence[int] = encode(tok, '{"name": "query"}') + [end_id]
    assert traj.completion_text(ids) == '<tool_call>\n{"name": "query"}'


COMPACT_1 = '<tool_call>\n{"name":"query","arguments":{"sql":"SELECT COUNT(*) FROM t"}}\n</tool_call>'
COMPACT_2 = '<tool_call>\n{"name":"query","arguments":{"sql":"SELECT 1"}}\n</tool_call>'


def test_drift_is_counted_once_per_drifting_turn(tok: Any, end_id: int) -> None:
    # turn 1 drifts, turns 2 and 3 are canonical: the drift of turn 1 is not counted again at prompt 3
    ep = three_turns(tok, end_id, call_1=COMPACT_1)
    assert ep.traj.drift_turns == 1
    assert ep.traj.forks == 0
    assert_sampled_ids_in_place(ep, ep.seg)
    assert [i for i, m in enumerate(ep.seg.loss_mask) if m] == sorted(sampled_positions(ep))


def test_two_drifting_turns_count_two(tok: Any, end_id: int) -> None:
    ep = Episode(tok, end_id)
    ep.prompt()
    ep.tool_reply(ep.complete(COMPACT_1), "42")
    ep.prompt()
    assert ep.traj.drift_turns == 1
    ep.tool_reply(ep.complete(COMPACT_2), "1")
    ep.prompt()
    assert ep.traj.drift_turns == 2
    text = tok.decode(ep.seg.input_ids)
    assert COMPACT_1 in text and COMPACT_2 in text
