"""Fixtures for the restricted-root-store suite."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from rootstore_support import PKI, make_pki  # noqa: E402


@pytest.fixture(scope="session")
def pki() -> PKI:
    return make_pki()
