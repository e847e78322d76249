"""Unit tests of agentrl_envs.chat.toolcalls: prompt rendering and completion parsing (fast)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from agentrl_envs.chat.toolcalls import (
    parse_completion,
    render_prompt,
    to_template_messages,
    tools_system_section,
)
from agentrl_envs.protocol.openai import FunctionCall, FunctionDefinition, Message, ToolCall, ToolDefinition

CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

QUERY_TOOL = ToolDefinition(
    function=FunctionDefinition(
        name="execute_sql",
        description="Run one SQL statement.",
        parameters={"type": "object", "properties": {"sql": {"type": "string"}}, "required": ["sql"]},
    )
)
COMMIT_TOOL = ToolDefinition(function=FunctionDefinition(name="commit_final_answer", description="Submit the answer."))


class JinjaTokenizer:
    """Just enough of a HF tokenizer: applies a Jinja chat template."""

    def __init__(self, template: str) -> None:
        self.chat_template = template

    def apply_chat_template(self, conversation: Any, *, tools: Any = None, tokenize: bool, add_generation_prompt: bool) -> str:
        import jinja2

        env = jinja2.Environment()
        env.filters["tojson"] = lambda v: json.dumps(v)
        return env.from_string(self.chat_template).render(
            messages=conversation, tools=tools, add_generation_prompt=add_generation_prompt
        )


def call(name: str, arguments: str) -> ToolCall:
    return ToolCall(id="call_1", function=FunctionCall(name=name, arguments=arguments))


def calls_of(text: str, tool_names: list[str] | None = None) -> list[tuple[str, Any]]:
    """(name, decoded-or-raw arguments) of every parsed call."""
    out = []
    for c in parse_completion(text, tool_names).tool_calls:
        try:
            args: Any = json.loads(c.function.arguments)
        except ValueError:
            args = c.function.arguments
        out.append((c.function.name, args))
    return out


# --------------------------------------------------------------------------- rendering


def test_tools_section_has_one_json_line_per_tool_and_the_instruction() -> None:
    section = tools_system_section([QUERY_TOOL, COMMIT_TOOL])
    inside = section.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(line)["function"]["name"] for line in inside] == ["execute_sql", "commit_final_answer"]
    assert section.startswith("# Tools")
    assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' in section


def test_tools_go_into_the_existing_system_message() -> None:
    out = to_template_messages([Message(role="system", content="Be brief."), Message(role="user", content="hi")], [QUERY_TOOL])
    assert [m["role"] for m in out] == ["system", "user"]
    assert out[0]["content"].startswith("Be brief.\n\n# Tools")


def test_a_system_message_is_created_for_tools_when_missing() -> None:
    out = to_template_messages([Message(role="user", content="hi")], [QUERY_TOOL])
    assert out[0]["role"] == "system" and "<tools>" in out[0]["content"]


def test_no_tools_means_no_tools_section() -> None:
    out = to_template_messages([Message(role="user", content="hi")], None)
    assert out == [{"role": "user", "content": "hi"}]


def test_assistant_tool_calls_and_tool_results_are_rendered_as_blocks() -> None:
    history = [
        Message(role="developer", content="sys"),
        Message(role="user", content=[{"type": "text", "text": "how many?"}]),
        Message(role="assistant", content="Let me look.", tool_calls=[call("execute_sql", '{"sql": "SELECT 1"}')]),
        Message(role="tool", tool_call_id="call_1", content="[[1]]"),
        Message(role="tool", tool_call_id="call_2", content="ok"),
        Message(role="assistant", content=None, tool_calls=[call("commit_final_answer", "{}")]),
    ]
    out = to_template_messages(history)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user", "assistant"]
    assert out[1]["content"] == "how many?"
    assert (
        out[2]["content"] == 'Let me look.\n<tool_call>\n{"name": "execute_sql", "arguments": {"sql": "SELECT 1"}}\n</tool_call>'
    )
    assert out[3]["content"] == "<tool_response>\n[[1]]\n</tool_response>\n<tool_response>\nok\n</tool_response>"
    assert out[4]["content"].startswith("<tool_call>")


@pytest.mark.parametrize("arguments", ['{"sql": "SELECT * FROM t WHERE a = \\"x\\""}', "{}", '{"n": [1, 2, {"k": null}]}'])
def test_rendered_tool_calls_parse_back_to_the_same_call(arguments: str) -> None:
    msg = Message(
        role="assistant", content="thinking", tool_calls=[call("execute_sql", arguments), call("commit_final_answer", "{}")]
    )
    rendered = to_template_messages([msg])[0]["content"]
    parsed = parse_completion(rendered)
    assert parsed.content == "thinking"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in parsed.tool_calls] == [
        ("execute_sql", json.loads(arguments)),
        ("commit_final_answer", {}),
    ]


def test_render_prompt_uses_the_chatml_template_and_ends_with_the_generation_prompt() -> None:
    text = render_prompt(JinjaTokenizer(CHATML), [Message(role="user", content="hi")], [QUERY_TOOL])
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.\n\n# Tools")
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert '"name": "execute_sql"' in text


def test_render_prompt_passes_tools_to_a_template_that_supports_them() -> None:
    template = (
        "{% for t in tools %}T:{{ t.function.name }};{% endfor %}{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"
    )
    history = [Message(role="user", content="hi"), Message(role="assistant", tool_calls=[call("execute_sql", '{"sql": "x"}')])]
    text = render_prompt(JinjaTokenizer(template), history, [QUERY_TOOL])
    assert text == "T:execute_sql;user:hi;assistant:;"


@pytest.mark.parametrize("arguments", ["{x: 1", '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}", '{"x": ' + "9" * 5000 + "}"])
def test_a_template_with_tools_gets_arguments_that_do_not_decode_as_the_model_wrote_them(arguments: str) -> None:
    # (the episode answered these as tool errors; the next prompt must still render)
    template = "{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.arguments|length }}{% endfor %}{% endfor %}"
    template += "{% if tools %}{% endif %}"  # a template that takes tools
    history = [Message(role="user", content="hi"), Message(role="assistant", tool_calls=[call("execute_sql", arguments)])]
    assert render_prompt(JinjaTokenizer(template), history, [QUERY_TOOL]) == str(len(arguments))


# --------------------------------------------------------------------------- parsing: tagged blocks


def test_plain_text_has_no_tool_calls() -> None:
    parsed = parse_completion("The answer is 42.")
    assert parsed.content == "The answer is 42." and parsed.tool_calls == []
    assert parsed.to_message().tool_calls is None


def test_one_block_with_surrounding_text() -> None:
    parsed = parse_completion(
        'I will query.\n<tool_call>\n{"name": "execute_sql", "arguments": {"sql": "SELECT 1"}}\n</tool_call>'
    )
    assert parsed.content == "I will query."
    assert len(parsed.tool_calls) == 1
    c = parsed.tool_calls[0]
    assert re.fullmatch(r"call_[0-9a-f]{24}", c.id)
    assert c.type == "function" and c.function.name == "execute_sql"
    assert isinstance(c.function.arguments, str) and json.loads(c.function.arguments) == {"sql": "SELECT 1"}


def test_only_a_block_gives_no_content() -> None:
    parsed = parse_completion('<tool_call>{"name": "f", "arguments": {}}</tool_call>')
    assert parsed.content is None and calls_of('<tool_call>{"name": "f", "arguments": {}}</tool_call>') == [("f", {})]
    assert parsed.to_message().role == "assistant"


def test_several_blocks_have_distinct_ids() -> None:
    text = (
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n<tool_call>{"name": "b", "arguments": {"y": 2}}</tool_call>'
    )
    parsed = parse_completion(text)
    assert calls_of(text) == [("a", {"x": 1}), ("b", {"y": 2})]
    assert len({c.id for c in parsed.tool_calls}) == 2


def test_unterminated_final_block_is_accepted() -> None:
    text = 'ok <tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>\n{"name": "b", "arguments": {"q": "z"}}\n'
    assert calls_of(text) == [("a", {}), ("b", {"q": "z"})]
    assert parse_completion(text).content == "ok"


def test_a_closing_tag_inside_a_string_of_the_call_does_not_end_the_block() -> None:
    """Hot sampling under the grammar wrote '"text": "apple}}</tool_call> ..."': the tag is part of
    the string, and the block ends at the tag after the call's JSON (found in CI: the call was cut
    at the first tag and its arguments salvaged as non-JSON)."""
    text = 'a <tool_call>\n{"name": "echo", "arguments": {"text": "apple}}</tool_call> x"}}\n</tool_call> b'
    assert calls_of(text) == [("echo", {"text": "apple}}</tool_call> x"})]
    assert parse_completion(text).content == "a  b"
    # a body that is not JSON still ends at the first tag
    broken = '<tool_call>{"name": "a", "arguments": {"x": "open</tool_call> after'
    parsed = parse_completion(broken)
    assert [c.function.name for c in parsed.tool_calls] == ["a"] and parsed.content == "after"


def test_parameters_key_is_accepted() -> None:
    assert calls_of('<tool_call>{"name": "a", "parameters": {"k": 1}}</tool_call>') == [("a", {"k": 1})]


def test_arguments_given_as_a_json_string_are_kept_verbatim() -> None:
    parsed = parse_completion('<tool_call>{"name": "a", "arguments": "{\\"k\\": 1}"}</tool_call>')
    assert parsed.tool_calls[0].function.arguments == '{"k": 1}'


def test_missing_arguments_become_an_empty_object() -> None:
    assert calls_of('<tool_call>{"name": "commit"}</tool_call>') == [("commit", {})]


def test_name_with_other_keys_reads_those_keys_as_arguments() -> None:
    assert calls_of('<tool_call>{"name": "execute_sql", "sql": "SELECT 2"}</tool_call>') == [("execute_sql", {"sql": "SELECT 2"})]


def test_openai_shaped_object_in_a_block() -> None:
    text = '<tool_call>{"type": "function", "function": {"name": "a", "arguments": "{}"}}</tool_call>'
    assert calls_of(text) == [("a", {})]


def test_code_fenced_json_inside_a_block() -> None:
    text = '<tool_call>\n```json\n{"name": "a", "arguments": {"v": true}}\n```\n</tool_call>'
    assert calls_of(text) == [("a", {"v": True})]


def test_a_list_and_several_objects_in_one_block() -> None:
    text = (
        '<tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]\n{"name": "c", "arguments": {}}</tool_call>'
    )
    assert [n for n, _ in calls_of(text)] == ["a", "b", "c"]


def test_unicode_survives() -> None:
    assert calls_of('<tool_call>{"name": "a", "arguments": {"city": "Zürich ✓"}}</tool_call>') == [("a", {"city": "Zürich ✓"})]


# --------------------------------------------------------------------------- parsing: invalid JSON


def test_invalid_arguments_json_keeps_the_call_with_raw_arguments() -> None:
    parsed = parse_completion('<tool_call>{"name": "execute_sql", "arguments": {"sql": "SELECT "x" FROM t"}}</tool_call>')
    (c,) = parsed.tool_calls
    assert c.function.name == "execute_sql"
    assert c.function.arguments == '{"sql": "SELECT "x" FROM t"}'
    with pytest.raises(ValueError):
        json.loads(c.function.arguments)


def test_truncated_json_keeps_the_call() -> None:
    (c,) = parse_completion('<tool_call>{"name": "execute_sql", "arguments": {"sql": "SELECT').tool_calls
    assert c.function.name == "execute_sql" and c.function.arguments == '{"sql": "SELECT'


@pytest.mark.parametrize(("raw", "name"), [("echo\tx", "echo\tx"), ("ec\\q", "ec\\q")])
def test_salvaged_name_with_a_control_character_or_bad_escape_does_not_raise(raw: str, name: str) -> None:
    # sampled completions can hold a raw control character or a bad escape in a truncated call
    (c,) = parse_completion('<tool_call>\n{"name": "' + raw + '", "arguments": {"text": "a').tool_calls
    assert c.function.name == name


def test_garbage_in_a_block_is_a_nameless_call_not_dropped() -> None:
    (c,) = parse_completion("<tool_call>call the database please</tool_call>").tool_calls
    assert c.function.name == "" and c.function.arguments == "call the database please"


def test_empty_block_is_a_nameless_call() -> None:
    (c,) = parse_completion("<tool_call></tool_call>").tool_calls
    assert c.function.name == ""


def test_single_quoted_pseudo_json_keeps_the_raw_text() -> None:
    (c,) = parse_completion("<tool_call>{'name': 'a', 'arguments': {'x': 1}}</tool_call>").tool_calls
    assert c.function.name == "" and "'x': 1" in c.function.arguments


# --------------------------------------------------------------------------- parsing: bare JSON


def test_bare_json_object_is_a_call() -> None:
    assert calls_of('{"name": "execute_sql", "arguments": {"sql": "SELECT 1"}}') == [("execute_sql", {"sql": "SELECT 1"})]


def test_bare_json_with_prose_around_it() -> None:
    parsed = parse_completion('Sure! {"name": "a", "parameters": {"x": 1}} Done.')
    assert [c.function.name for c in parsed.tool_calls] == ["a"]
    assert parsed.content == "Sure!  Done."


def test_code_fenced_bare_json_is_a_call() -> None:
    parsed = parse_completion('Here:\n```json\n{"name": "a", "arguments": {"x": 1}}\n```')
    assert calls_of('```json\n{"name": "a", "arguments": {"x": 1}}\n```') == [("a", {"x": 1})]
    assert parsed.content == "Here:"


def test_bare_json_without_arguments_key_is_content() -> None:
    parsed = parse_completion('{"name": "Alice", "age": 3}')
    assert parsed.tool_calls == [] and parsed.content == '{"name": "Alice", "age": 3}'


def test_bare_json_naming_an_unknown_tool_is_content_when_tools_are_known() -> None:
    text = '{"name": "print", "arguments": {"x": 1}}'
    assert calls_of(text, ["execute_sql"]) == []
    assert calls_of(text, ["print"]) == [("print", {"x": 1})]


def test_bare_json_with_a_known_tool_name_and_loose_keys() -> None:
    assert calls_of('{"name": "execute_sql", "sql": "SELECT 1"}', ["execute_sql"]) == [("execute_sql", {"sql": "SELECT 1"})]


def test_bare_truncated_json_keeps_the_call() -> None:
    (c,) = parse_completion('{"name": "execute_sql", "arguments": {"sql": "SELECT * FROM').tool_calls
    assert c.function.name == "execute_sql" and c.function.arguments == '{"sql": "SELECT * FROM'


def test_blocks_win_over_bare_json() -> None:
    text = 'Example: {"name": "x", "arguments": {}}\n<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    assert calls_of(text) == [("a", {})]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "}",
        "<tool_call>",
        "</tool_call>",
        "```",
        '{"name": ',
        "[[[",
        "<tool_call>{]}</tool_call>",
        "\x00\ufffd",
        "{" * 500,
    ],
)
def test_never_raises(text: str) -> None:
    parsed = parse_completion(text)
    for c in parsed.tool_calls:
        assert isinstance(c.function.arguments, str)


def test_a_call_followed_by_text_parses() -> None:
    text = '<tool_call>\n{"name": "execute_sql", "arguments": {"sql": "SELECT 1"}}\n</tool_call>\nDone.'
    assert calls_of(text) == [("execute_sql", {"sql": "SELECT 1"})]
    assert parse_completion(text).content == "Done."
