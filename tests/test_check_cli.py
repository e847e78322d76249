"""`agentrl-envs check` end to end: real controller and worker processes, real reference replays."""

from __future__ import annotations

import json
import os

import pytest

from agentrl_envs.cli import main

MYSQL_URL = os.environ.get("AGENTRL_TEST_MYSQL_URL")


def check(capsys, *args: str) -> tuple[int, dict]:
    code = main(["check", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_check_echo_solves_everything_and_min_rate_gates_the_exit_code(capsys):
    code, report = check(capsys, "echo")
    assert code == 0 and report["solved"] == report["total"] == 8


def test_check_db_dev_on_sqlite_solves_60_of_60(capsys):
    code, report = check(capsys, "db", "--split", "dev")
    assert code == 0 and (report["solved"], report["total"]) == (60, 60)


@pytest.mark.mariadb
@pytest.mark.skipif(not MYSQL_URL, reason="set AGENTRL_TEST_MYSQL_URL (.ci/mariadb.sh)")
def test_check_db_dev_on_mariadb_solves_60_of_60(capsys):
    code, report = check(capsys, "db", "--split", "dev", "--option", "backend=mysql", "--option", f"mysql_url={MYSQL_URL}")
    assert code == 0 and (report["solved"], report["total"]) == (60, 60)


def test_check_exits_nonzero_below_min_rate(capsys, tmp_path):
    # A mutation sample whose answer_md5 is corrupted: the true reference replay must score 0.
    path = os.path.join(os.path.dirname(__file__), "..", "envs", "db", "agentrl_env_db", "data", "dev.jsonl")
    rows = [json.loads(line) for line in open(path)]
    good = next(r for r in rows if r["type"][0] == "INSERT")
    bad = dict(good, answer_md5="0" * 32)
    data = tmp_path / "two.jsonl"
    data.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    code, report = check(capsys, "db", "--data", str(data))
    assert code == 1 and (report["solved"], report["total"]) == (1, 2)
    assert [s["solved"] for s in report["samples"]] == [True, False]
    code, report = check(capsys, "db", "--data", str(data), "--min-rate", "0.5")
    assert code == 0


def test_unknown_task_and_option_are_clear_errors(capsys):
    assert main(["check", "nope"]) == 2
    assert "unknown task 'nope'" in capsys.readouterr().err
    assert main(["check", "db", "--option", "colour=red"]) == 2
    assert "has no option 'colour'" in capsys.readouterr().err


def test_samples_without_a_reference_are_reported_apart(capsys, monkeypatch):
    from agentrl_envs.tasks.echo import EchoTask

    original = EchoTask.reference_policy.__func__
    monkeypatch.setattr(
        EchoTask, "reference_policy", classmethod(lambda cls, s: None if s["word"] == "river" else original(cls, s))
    )
    code, report = check(capsys, "echo")
    # The worker is another process (unpatched); this process decides what is replayed.
    assert code == 0 and (report["solved"], report["total"], report["without_reference"]) == (7, 7, [1])
