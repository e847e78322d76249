"""Tool-call grammar (xgrammar): what it accepts, and sampling under it with the real SmolLM2."""

from __future__ import annotations

import json

import pytest

from agentrl_envs.chat.engine import TransformersEngine
from agentrl_envs.chat.grammar import tool_call_schema
from agentrl_envs.chat.toolcalls import parse_completion
from agentrl_envs.protocol.openai import FunctionDefinition, Message, ToolDefinition

torch = pytest.importorskip("torch")
pytest.importorskip("xgrammar")

SQL = ToolDefinition(
    function=FunctionDefinition(
        name="execute_sql",
        description="Run one SQL query.",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
            "additionalProperties": False,
        },
    )
)
COMMIT = ToolDefinition(
    function=FunctionDefinition(
        name="commit_final_answer",
        description="Commit the answers.",
        parameters={
            "type": "object",
            "properties": {"answers": {"type": "array", "items": {"type": "string"}}},
            "required": ["answers"],
            "additionalProperties": False,
        },
    )
)
TOOLS = [SQL, COMMIT]


def _call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def test_schema_is_one_option_per_tool_with_name_first() -> None:
    schema = tool_call_schema(TOOLS)
    options = schema["anyOf"]
    assert [o["properties"]["name"] for o in options] == [{"const": "execute_sql"}, {"const": "commit_final_answer"}]
    assert list(options[0]["properties"]) == ["name", "arguments"]
    assert options[1]["properties"]["arguments"] == COMMIT.function.parameters
    assert tool_call_schema([SQL])["properties"]["name"] == {"const": "execute_sql"}  # one tool: no anyOf
    with pytest.raises(ValueError):
        tool_call_schema([])


@pytest.mark.model
def test_grammar_accepts_exactly_well_formed_calls_to_offered_tools(engine: TransformersEngine) -> None:
    grammar = engine.tool_call_grammar()
    im_end = engine.tokenizer.convert_tokens_to_ids("<|im_end|>")

    def accepts(text: str, then_stop: bool = True) -> bool:
        matcher = grammar.matcher(TOOLS)
        ids = engine.tokenizer(text, add_special_tokens=False)["input_ids"] + ([im_end] if then_stop else [])
        return all(matcher.accept_token(i) for i in ids) and (not then_stop or matcher.is_terminated())

    assert accepts(_call("execute_sql", {"query": "SELECT 1"}))
    assert accepts(_call("commit_final_answer", {"answers": ["a", "b"]}))
    assert accepts(_call("commit_final_answer", {"answers": []}))
    assert not accepts(_call("drop_table", {"query": "x"}))  # not an offered tool
    assert not accepts(_call("execute_sql", {"sql": "SELECT 1"}))  # wrong argument name
    assert not accepts(_call("execute_sql", {"query": 3}))  # wrong type
    assert not accepts(_call("execute_sql", {"query": "x", "extra": "y"}))  # no extra keys
    assert not accepts('<tool_call>\n{"arguments": {"query": "x"}, "name": "execute_sql"}\n</tool_call>')  # name first
    assert not accepts("Sure! " + _call("execute_sql", {"query": "x"}))  # nothing before the call
    assert not accepts(_call("execute_sql", {"query": "x"})[:-3], then_stop=True)  # no stop before the end
    assert grammar.compiled(TOOLS) is grammar.compiled(list(TOOLS))  # compiled once per tool set


@pytest.mark.model
def test_generate_batch_under_the_grammar_always_yields_a_valid_call(engine: TransformersEngine) -> None:
    grammar = engine.tool_call_grammar()
    names = [t.function.name for t in TOOLS]
    questions = ["How many rows does table t have?", "Delete the row of pets whose name is 'Rex'.", "Hello!", "2+2?"]
    prompts = [engine.encode_prompt([Message(role="user", content=q)], TOOLS) for q in questions]
    plain_prompt = engine.encode_prompt([Message(role="user", content="Tell me a story.")])
    # three hot samples of each prompt in one batch (row i is seeded seed + i); one unconstrained row
    rows = [*prompts * 3, plain_prompt]
    matchers = [grammar.matcher(TOOLS) for _ in rows[:-1]] + [None]
    out = engine.generate_batch(rows, 120, temperature=1.5, seed=1, matchers=matchers, grammar=grammar)
    stopped = 0
    for (ids, logprobs), prompt in zip(out[:-1], rows[:-1], strict=True):
        if ids[-1] not in engine.stop_token_ids:  # a long string ran into the token limit
            assert len(ids) == 120
            assert engine.tokenizer.decode(ids).startswith('<tool_call>\n{"name": "')
            continue
        stopped += 1
        parsed = parse_completion(engine.tokenizer.decode(ids[:-1]), names)
        assert parsed.content is None and len(parsed.tool_calls) == 1
        call = parsed.tool_calls[0]
        args = json.loads(call.function.arguments)  # valid JSON, the tool's own keys
        assert call.function.name in names
        assert set(args) == ({"query"} if call.function.name == "execute_sql" else {"answers"})
        # logprobs are the unconstrained policy's, at temperature 1.5: what a trainer recomputes
        full = torch.tensor([prompt + ids])
        with torch.inference_mode():
            logits = engine.model(input_ids=full).logits[0, len(prompt) - 1 : -1].float() / 1.5
        expected = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-3)
    plain_ids, _ = out[-1]
    assert len(plain_ids) > 0
    assert not engine.tokenizer.decode(plain_ids).startswith("<tool_call>")  # unconstrained row: free text
    assert stopped >= len(prompts)  # most calls end within the limit
    # an unconstrained model at this temperature rarely writes a valid call (the point of the grammar)
    free = engine.generate_batch(prompts, 120, temperature=1.5, seed=1)
    valid = sum(
        len(parse_completion(engine.tokenizer.decode(i), names).tool_calls) == 1 and i[-1] in engine.stop_token_ids
        for i, _ in free
    )
    assert valid < len(prompts)


@pytest.mark.model
def test_generate_batch_rejects_matchers_without_their_grammar(engine: TransformersEngine) -> None:
    grammar = engine.tool_call_grammar()
    prompt = engine.encode_prompt([Message(role="user", content="hi")], TOOLS)
    with pytest.raises(ValueError, match="matchers"):
        engine.generate_batch([prompt], 4, matchers=[grammar.matcher(TOOLS)])
    with pytest.raises(ValueError, match="matchers"):
        engine.generate_batch([prompt, prompt], 4, matchers=[None], grammar=grammar)


def test_the_auto_grammar_allows_text_and_makes_every_opened_call_well_formed(engine: TransformersEngine) -> None:
    grammar = engine.tool_call_grammar()
    im_end = engine.tokenizer.convert_tokens_to_ids("<|im_end|>")

    def accepts(text: str, then_stop: bool = True) -> bool:
        matcher = grammar.matcher(TOOLS, required=False)
        ids = engine.tokenizer(text, add_special_tokens=False)["input_ids"] + ([im_end] if then_stop else [])
        return all(matcher.accept_token(i) for i in ids) and (not then_stop or matcher.is_terminated())

    assert accepts("The answer is 4.")  # no call at all
    assert accepts("Let me look.\n" + _call("execute_sql", {"query": "SELECT 1"}))  # text, then a call
    assert accepts(_call("execute_sql", {"query": "SELECT 1"}) + "\n" + _call("commit_final_answer", {"answers": ["1"]}))
    assert not accepts("Let me look.\n" + _call("drop_table", {"query": "x"}))  # an opened call names an offered tool
    assert not accepts(_call("execute_sql", {"sql": "SELECT 1"}))  # with that tool's arguments
    assert not accepts('<tool_call>\n{"name": "execute_sql", "arguments": {"query": "x"}}')  # and is closed
    assert grammar.compiled(TOOLS, required=False) is not grammar.compiled(TOOLS)


@pytest.mark.model
def test_under_the_auto_grammar_a_call_the_model_opens_ends_well_formed(engine: TransformersEngine) -> None:
    """The model is put inside an opened ``<tool_call>`` (its tokens in the prompt and fed to the
    matcher) and sampled hot: every completion that stops closes one valid call."""
    grammar = engine.tool_call_grammar()
    names = [t.function.name for t in TOOLS]
    opening = engine.tokenizer("<tool_call>\n", add_special_tokens=False)["input_ids"]
    questions = ["How many rows does table t have?", "Delete the row of pets whose name is 'Rex'.", "Hello!"]
    # four hot samples of each prompt in one batch (row i is seeded seed + i)
    prompts = [engine.encode_prompt([Message(role="user", content=q)], TOOLS) + opening for q in questions] * 4
    matchers = [grammar.matcher(TOOLS, required=False) for _ in prompts]
    for m in matchers:
        assert all(m.accept_token(t) for t in opening)
    out = engine.generate_batch(prompts, 120, temperature=1.2, seed=1, matchers=matchers, grammar=grammar)
    stopped = 0
    for ids, _ in out:
        if ids[-1] not in engine.stop_token_ids:
            continue  # a long string ran into the token limit
        stopped += 1
        parsed = parse_completion("<tool_call>\n" + engine.tokenizer.decode(ids[:-1]), names)
        assert len(parsed.tool_calls) >= 1
        for call in parsed.tool_calls:
            args = json.loads(call.function.arguments)
            assert set(args) == ({"query"} if call.function.name == "execute_sql" else {"answers"})
    assert stopped >= 2


BASH = ToolDefinition(
    function=FunctionDefinition(
        name="bash_action",
        description="Run a script.",
        parameters={
            "type": "object",
            "properties": {"script": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["script", "n"],
            "additionalProperties": False,
        },
    )
)


@pytest.mark.model
def test_closing_tokens_complete_whatever_the_call_has_open(engine: TransformersEngine) -> None:
    grammar = engine.tool_call_grammar()
    tok = engine.tokenizer

    def closing(tools: list[ToolDefinition], written: str) -> str | None:
        matcher = grammar.matcher(tools)
        assert matcher.accept_string(written)
        ids = grammar.closing_tokens(matcher)
        if ids is not None:  # the matcher is left as it was, and the completion ends the call
            assert matcher.accept_string("x" if written.endswith(("SELECT * FROM", '"b', "ls -l")) else "")
        return None if ids is None else tok.decode(ids)

    opened = '<tool_call>\n{"name": "execute_sql", "arguments": {"query": "SELECT * FROM'
    assert closing(TOOLS, opened) == '"}}\n</tool_call>'  # end the string, the arguments, the call
    assert (
        closing(TOOLS, '<tool_call>\n{"name": "commit_final_answer", "arguments": {"answers": ["a", "b') == '"]}}\n</tool_call>'
    )
    # a required key not written yet gets the shortest value of its type
    assert closing([BASH], '<tool_call>\n{"name": "bash_action", "arguments": {"script": "ls -l') == '", "n": 0}}\n</tool_call>'
    # from inside the name: the only tool it can be, and an empty string for its argument
    assert closing(TOOLS, '<tool_call>\n{"name": "exec') == 'ute_sql", "arguments": {"query": ""}}\n</tool_call>'
    assert closing(TOOLS, _call("execute_sql", {"query": "x"})) == ""  # complete: only the stop token is left
    assert closing(TOOLS, '<tool_call>\n{"name": "') is None  # no tool's name starts with '"' or '}': no completion
    # inside a character split across tokens ('日' is two): its last byte first, then the quote
    first_byte = tok("日", add_special_tokens=False)["input_ids"][0]
    matcher = grammar.matcher(TOOLS)
    assert matcher.accept_string(opened) and matcher.accept_token(first_byte)
    ids = grammar.closing_tokens(matcher)
    assert ids is not None and tok.decode([first_byte, *ids]).endswith('"}}\n</tool_call>')
    assert all(matcher.accept_token(t) for t in ids)


@pytest.mark.model
@pytest.mark.parametrize("close", [True, False])
def test_a_row_that_babbles_inside_a_string_ends_its_call_in_budget(engine: TransformersEngine, close: bool) -> None:
    """Logits that always prefer one word inside a string (a degenerate free-text argument):
    with ``close_in_budget`` the row completes the call with its last tokens and a stop token,
    else the call is cut at ``max_tokens`` and its arguments are not valid JSON."""
    from agentrl_envs.chat.decode import DecodeRow, sample_tokens

    grammar = engine.tool_call_grammar()
    babble = engine.tokenizer(" again", add_special_tokens=False)["input_ids"][0]
    logits = torch.randn(1, grammar.vocab_size, generator=torch.Generator().manual_seed(0))
    logits[0, babble] = 50.0  # allowed only inside a string, where it always wins
    row = DecodeRow([1, 2, 3], max_tokens=80, temperature=0.0, matcher=grammar.matcher(TOOLS), close_in_budget=close)
    while not row.done:
        row._take(sample_tokens(logits, [row], grammar), 0, engine.stop_token_ids)
    # the call's own text takes ~20 tokens and its end 8 + the stop token: the rest is babble
    assert len(row.completion_ids) == 80 and row.completion_ids.count(babble) >= 30
    names = [t.function.name for t in TOOLS]
    parsed = parse_completion(engine.tokenizer.decode(row.completion_ids[:-1] if close else row.completion_ids), names)
    if close:
        assert row.stop_reason == "stop" and row.completion_ids[-1] in engine.stop_token_ids
        assert len(parsed.tool_calls) == 1 and json.loads(parsed.tool_calls[0].function.arguments)  # valid JSON
    else:  # the cut call is salvaged by name, but its arguments are not JSON (the task answers an error)
        assert row.stop_reason == "length"
        with pytest.raises(json.JSONDecodeError):
            json.loads(parsed.tool_calls[0].function.arguments)


@pytest.mark.model
@pytest.mark.parametrize("favourites", [[" \\", "u"], ["日"]], ids=["unicode-escape", "multi-byte-character"])
def test_a_token_that_pushes_the_completion_further_is_not_taken_when_it_would_not_fit(
    engine: TransformersEngine, favourites: list[str]
) -> None:
    """Tokens after which a call needs several more tokens to end: ``\\u`` owes four hex digits,
    the first byte of '日' owes the next before any quote. Logits that always prefer them (most to
    least favourite, greedy): at every budget the row still ends with one call whose arguments are
    JSON and a stop token. (Checking only whether the completion fits before sampling let such a
    token in with one token to spare, and the call was cut: found by hot sampling in CI.)"""
    from agentrl_envs.chat.decode import DecodeRow, sample_tokens

    grammar = engine.tool_call_grammar()
    ids = [i for text in favourites for i in engine.tokenizer(text, add_special_tokens=False)["input_ids"]]
    logits = torch.randn(1, grammar.vocab_size, generator=torch.Generator().manual_seed(0))
    for rank, i in enumerate(ids):
        logits[0, i] = 50.0 - 5 * rank
    names = [t.function.name for t in TOOLS]
    for budget in range(72, 80):  # every offset of the favourites' cycle against the budget's end
        row = DecodeRow([1, 2, 3], max_tokens=budget, temperature=0.0, matcher=grammar.matcher(TOOLS), close_in_budget=True)
        while not row.done:
            row._take(sample_tokens(logits, [row], grammar), 0, engine.stop_token_ids)
        assert sum(row.completion_ids.count(i) for i in ids) >= 5  # the favourites were taken while they fit
        assert row.stop_reason == "stop" and row.completion_ids[-1] in engine.stop_token_ids, budget
        parsed = parse_completion(engine.tokenizer.decode(row.completion_ids[:-1]), names)
        assert len(parsed.tool_calls) == 1 and isinstance(json.loads(parsed.tool_calls[0].function.arguments), dict)
