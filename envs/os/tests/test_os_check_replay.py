"""Every shipped OS problem has a reference policy. Playing them is the conformance suite's
``reference_replay`` (``tests/test_conformance.py``: ``check os --split dev`` through a controller
and a worker, 26/26); the policy's decisions are unit-tested in ``test_os_reference_policy.py``."""

from __future__ import annotations

import pytest

from agentrl_env_os import OSTask


@pytest.mark.parametrize("split", OSTask.splits)
def test_every_shipped_problem_has_a_reference(split):
    samples = OSTask.load_samples(split)
    assert samples and [i for i, s in enumerate(samples) if OSTask.reference_policy(s) is None] == []
