"""Tool schemas, prompts, config and data loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentrl_env_db import DBTask
from agentrl_env_db.prompts import SYSTEM_PROMPT, user_prompt

from agentrl_envs import TaskRuntime, get_task
from agentrl_envs.errors import DataError

# AgentBench's tool definitions (configs/tasks/dbbench.yaml), as data.
AGENTBENCH_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "execute_sql",
            "description": "Executes a given SQL statement on the database and returns the result.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "The SQL query to be executed."}},
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "commit_final_answer",
            "description": "Commits the final answer after all operations are completed.",
            "parameters": {
                "type": "object",
                "properties": {
                    "answers": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "The list of final answers to commit.",
                    }
                },
                "required": ["answers"],
                "additionalProperties": False,
            },
        },
    },
]


def test_registered_and_tools_equal_agentbench() -> None:
    assert get_task("db") is DBTask
    assert DBTask.tool_definitions() == AGENTBENCH_TOOLS
    assert DBTask.max_turns == 15


def test_user_prompt_construction() -> None:
    sample = {"description": "Q?", "add_description": "Table T.", "evidence": "E."}
    assert (
        user_prompt(sample)
        == "Evidence about the question: E.\nAdditional table information about the question: Table T.\nQuestion: Q?\n"
    )
    assert user_prompt({"description": "Q?", "add_description": ""}) == "Question: Q?\n"
    assert SYSTEM_PROMPT.startswith("I will ask you a question") and SYSTEM_PROMPT.endswith("deal with it by yourself.")


def test_dev_split_shape() -> None:
    samples = DBTask.load_samples("dev")
    kinds = [s["type"][0] for s in samples]
    assert len(samples) == 60 and kinds.count("INSERT") == 20 and kinds.count("UPDATE") == 20


def test_reference_policy_shapes() -> None:
    samples = DBTask.load_samples("dev")
    insert = DBTask.reference_policy(samples[20])
    assert insert[0] == {"name": "execute_sql", "arguments": {"query": samples[20]["label"][0]}}
    assert insert[1] == {"name": "commit_final_answer", "arguments": {"answers": []}}
    select = DBTask.reference_policy(samples[0])
    assert select[0]["arguments"]["query"] == samples[0]["sql"]["query"]
    assert select[1]["arguments"]["answers"] == samples[0]["label"]


def _sample() -> dict:
    return {
        "description": "How many?",
        "type": ["counting"],
        "label": ["2"],
        "table": {"table_name": "t", "table_info": {"columns": [{"name": "a"}], "rows": [["x"], ["y"]]}},
    }


def test_load_jsonl_and_json_files(tmp_path: Path) -> None:
    (tmp_path / "s.jsonl").write_text(json.dumps(_sample()) + "\n\n" + json.dumps(_sample()) + "\n")
    (tmp_path / "s.json").write_text(json.dumps([_sample()]))
    assert len(DBTask.load_samples(data=tmp_path / "s.jsonl")) == 2
    assert len(DBTask.load_samples(data=str(tmp_path / "s.json"))) == 1


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.pop("description"), "description"),
        (lambda s: s.update(type=[]), "type"),
        (lambda s: s.pop("label"), "needs `label`"),
        (lambda s: s["table"]["table_info"]["rows"].append(["a", "b"]), "row 2 has 2 values"),
        (lambda s: s.update(type=["INSERT"], label=None), "needs `answer_md5`"),
    ],
)
def test_malformed_samples_raise_data_error(tmp_path: Path, mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    sample = _sample()
    mutate(sample)
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(sample) + "\n")
    with pytest.raises(DataError, match="bad.jsonl line 1") as e:
        DBTask.load_samples(data=path)
    assert message in str(e.value)


def test_broken_files_raise_data_error(tmp_path: Path) -> None:
    (tmp_path / "x.jsonl").write_text("{not json\n")
    (tmp_path / "y.json").write_text('{"a": 1}')
    with pytest.raises(DataError, match=r"x.jsonl:1: invalid JSON"):
        DBTask.load_samples(data=tmp_path / "x.jsonl")
    with pytest.raises(DataError, match="must hold a list"):
        DBTask.load_samples(data=tmp_path / "y.json")
    with pytest.raises(DataError, match="does not exist"):
        DBTask.load_samples(data=tmp_path / "missing.jsonl")
    with pytest.raises(DataError, match="no split"):
        DBTask.load_samples("test")


def test_config_validation() -> None:
    with pytest.raises(DataError, match="needs mysql_url"):
        TaskRuntime(DBTask, split="dev", config={"backend": "mysql"})
    with pytest.raises(DataError, match="backend"):
        TaskRuntime(DBTask, split="dev", config={"backend": "postgres"})
    assert TaskRuntime(DBTask, split="dev").config.max_output_chars == 800
