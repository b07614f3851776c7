"""The README, CHANGELOG and docs/ against what they describe: every relative link points at
a file (and heading) that exists, every field they name is the CRD's, and the claims a test
can check (scenario lists and counts, a quoted command's output, what scaling does to a
trial) are checked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specfleet.operator import api
from specfleet.operator.outcomes import TrialOutcome
from specfleet.operator.simulate import load_scenarios
from tests.conftest import REPO
from tests.test_alerts import crd_field, heading_anchors

PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]
KEDA_EXAMPLE = REPO / "examples" / "autoscaling" / "keda-scaledobject.yaml"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    for target in links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.name}: {target} does not exist"
        if anchor and resolved.suffix == ".md":
            assert anchor in heading_anchors(resolved.read_text()), f"{page.name}: {target}"


# Generated from the CRD (and listing the fields kept only to read an old status).
GENERATED = {"api-reference.md", "reference.md"}
FIELD = re.compile(r"`((?:spec|status)(?:\.[a-zA-Z][a-zA-Z0-9]*(?:\[\])?)+)")


@pytest.mark.parametrize(
    "page", [p for p in PAGES if p.name not in GENERATED], ids=lambda p: p.name
)
def test_fields_named_exist(page: Path) -> None:
    """A field a page names in code (`spec.x.y`, `status.x.y`) is one the CRD has."""
    missing = []
    for path in FIELD.findall(page.read_text()):
        try:
            crd_field(path)
        except KeyError:
            missing.append(path)
    assert not missing, f"{page.name} names fields the CRD does not have: {missing}"


def test_pages_say_a_trial_ends_unjudged_when_the_fleet_scales() -> None:
    """A scaled fleet ends a running trial unjudged (trials.restart_trial_if_scaled); it
    does not go on at the new size."""
    described = api.Trial.model_fields["stable_replicas"].description or ""
    for name, text in [
        ("README.md", (REPO / "README.md").read_text()),
        ("keda-scaledobject.yaml", KEDA_EXAMPLE.read_text()),
        ("docs/autoscaling.md", (REPO / "docs" / "autoscaling.md").read_text()),
        ("Trial.stableReplicas", described),
    ]:
        words = " ".join(text.replace("#", " ").split())
        assert "ends unjudged" in words and TrialOutcome.FLEET_SCALED.value in words, name
        assert "restarts at the new size" not in words, name


def expand_braces(pattern: str) -> list[str]:
    """`a@{b,c}/{d,e}` as the names it stands for, as a shell expands it."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    return [
        name
        for choice in match.group(1).split(",")
        for name in expand_braces(pattern[: match.start()] + choice + pattern[match.end() :])
    ]


def test_tuning_md_lists_every_shipped_scenario_and_benchmarks_md_counts_them() -> None:
    """docs/tuning.md's table names every variant of every top-level scenario file, and
    docs/benchmarks.md says how many there are."""
    shipped = {
        path.name: [s.name for s in load_scenarios(path)]
        for path in sorted((REPO / "scenarios").glob("*.yaml"))
    }
    listed: dict[str, list[str]] = {}
    for line in (REPO / "docs" / "tuning.md").read_text().splitlines():
        row = re.match(r"\| `([\w-]+\.yaml)` \| (.*?) \|", line)
        if row:
            cell = re.findall(r"`([^`]+)`", row.group(2))
            listed[row.group(1)] = [n for pattern in cell for n in expand_braces(pattern)]
    assert {name: sorted(names) for name, names in listed.items()} == {
        name: sorted(names) for name, names in shipped.items()
    }
    total = sum(len(names) for names in shipped.values())
    benchmarks = (REPO / "docs" / "benchmarks.md").read_text()
    assert f"({total} with new-draft-head's, below)" in benchmarks
    assert f"each variant ({total - len(shipped['new-draft-head.yaml'])}, listed" in benchmarks


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n[a](missing.md) [b](#title) [c](#nowhere)\n")
    assert links(page) == ["missing.md", "#title", "#nowhere"]
    assert "nowhere" not in heading_anchors(page.read_text())
