from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def peagle_manifest() -> dict[str, Any]:
    """A fresh copy of the P-EAGLE example, for tests to modify."""
    return copy.deepcopy(yaml.safe_load((REPO / "examples" / "llama-peagle.yaml").read_text()))
