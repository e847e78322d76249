"""What a test needs from outside this repository: skipped where it is missing, failed under
``CI=true`` (``make test`` and CI install everything, so a missing piece there is a broken install)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def require(module: str, what: str = "agentrl-worker") -> ModuleType:
    """``module`` imported; if it cannot be, skip the calling test (or module, when called at its
    top) saying ``what`` is missing, or under ``CI=true`` fail the same way."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        why = f"{what} is not installed (make test installs it): {e}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why, pytrace=False)
        pytest.skip(why, allow_module_level=True)
