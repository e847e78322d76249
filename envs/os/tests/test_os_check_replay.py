"""``agentrl-envs check os --split dev`` on bubblewrap: every sample with a reference scores 1."""

from __future__ import annotations

import json

from agentrl_env_os import OSTask
from agentrl_envs.cli import main


def test_check_dev_solves_every_sample_with_a_reference(rootfs, capsys):
    samples = OSTask.load_samples("dev")
    with_ref = {i for i, s in enumerate(samples) if OSTask.has_reference(s)}
    main(["check", "os", "--split", "dev", "--json"])
    report = json.loads(capsys.readouterr().out)
    solved = {s["index"] for s in report["samples"] if s["solved"]}
    print(f"\ncheck os --split dev: solved {len(solved)}/{len(samples)}, with a reference {len(with_ref)}")
    assert solved == with_ref and report["total"] == len(with_ref) and report["rate"] == 1.0
    assert sorted(report["without_reference"]) == sorted(set(range(len(samples))) - with_ref)
    assert len(with_ref) >= 24
