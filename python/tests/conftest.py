from __future__ import annotations

from collections.abc import Iterator

import pytest

from roundhouse.registry import Registry


@pytest.fixture
def functions() -> Iterator[Registry]:
    """A registry of the test's own (the process's default one is left alone)."""
    yield Registry()
