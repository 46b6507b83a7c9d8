"""The sandbox pool the teacher tests share (one per module)."""

from __future__ import annotations

import pytest

from codedance.sandbox.pool import SandboxPool


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(max_running=2) as p:
        yield p
