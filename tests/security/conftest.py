"""The security tests' shared stack (helpers: security_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from security_helpers import SecureStack, start_secure_stack


@pytest.fixture(scope="module")
def secure_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    stack = start_secure_stack(tmp_path_factory.mktemp("tokens"))
    yield stack
    stack.close()
