from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet.operator.cli import app
from specfleet.operator.simulate import load_scenario, phases, simulate

SCENARIOS = Path(__file__).parent.parent / "scenarios"


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_scenarios_load(path: Path) -> None:
    scenario = load_scenario(path)
    assert phases(scenario)[0].start == 0


def test_simulate_json_reports_oracles_and_rollbacks(tmp_path: Path) -> None:
    plot = tmp_path / "drift.png"
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            "--scenario",
            str(SCENARIOS / "drift.yaml"),
            "--seed",
            "3",
            "--json",
            "--plot",
            str(plot),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    goodput = report["steady_state_goodput"]
    assert set(goodput) == {"achieved", "oracle", "unconstrained", "k3", "k5", "none"}
    assert goodput["unconstrained"] >= goodput["oracle"] >= goodput["none"]
    assert report["rollbacks"] >= 1 and report["false_rollbacks"] == 0
    assert report["windows_from_drift_to_rollback"] == [2]
    assert plot.stat().st_size > 0


def test_simulate_is_deterministic_per_seed() -> None:
    scenario = load_scenario(SCENARIOS / "load-surge.yaml")
    assert simulate(scenario, 7).to_json() == simulate(scenario, 7).to_json()


def test_bad_scenario_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nduration: 1h\nengine: {acceptance: [1.5]}\n")
    result = CliRunner().invoke(app, ["simulate", "--scenario", str(bad)])
    assert result.exit_code == 2
