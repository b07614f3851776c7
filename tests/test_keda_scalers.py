"""The KEDA the tests run keeps only some scalers (e2e/build-keda.sh): every trigger type a
shipped ScaledObject uses must be one of them, or the e2e test of that example would
meet KEDA's "no scaler found for type"."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
BUILDER = REPO / "e2e" / "keda" / "scalers_builder.go.in"


def built_triggers() -> set[str]:
    return set(re.findall(r'^\tcase "([a-z-]+)":$', BUILDER.read_text(), flags=re.M))


def shipped_triggers() -> set[str]:
    found = set()
    for path in sorted((REPO / "examples").rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") == "ScaledObject":
                found |= {trigger["type"] for trigger in document["spec"]["triggers"]}
    return found


def test_the_built_keda_keeps_every_trigger_type_the_examples_use() -> None:
    used = shipped_triggers()
    assert "prometheus" in used  # the examples were read
    assert used <= built_triggers(), f"not built: {sorted(used - built_triggers())}"


def test_the_built_keda_keeps_a_scaler_file_for_each_trigger_type() -> None:
    script = (REPO / "e2e" / "build-keda.sh").read_text()
    kept = set(re.findall(r"! -name (\w+)_scaler\.go", script))
    files = {"cpu": "cpu_memory", "memory": "cpu_memory", "prometheus": "prometheus"}
    assert {files[t] for t in built_triggers()} == kept
