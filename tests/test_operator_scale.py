"""The scale benchmark's paired standby mode (benchmarks/operator_scale.py): the operator
alone and with a standby in each repeat, in alternating order, compared as a ratio."""

from __future__ import annotations

import argparse

from benchmarks.operator_scale import _standby_order, standby_ratios


def test_paired_runs_alternate_which_goes_first() -> None:
    paired = argparse.Namespace(paired_standby=True, standby=False)
    assert [_standby_order(paired, r) for r in range(3)] == [
        [False, True],
        [True, False],
        [False, True],
    ]
    single = argparse.Namespace(paired_standby=False, standby=True)
    assert _standby_order(single, 1) == [True]


def test_each_repeat_is_compared_with_its_own_run_alone() -> None:
    runs = [
        {"count": 1000, "operator": {"seconds": 50.0}, "operator_with_standby": {"seconds": 53.0}},
        {"count": 1000, "operator": {"seconds": 40.0}, "operator_with_standby": {"seconds": 44.0}},
        {"count": 1000, "operator": {"seconds": 45.0}},  # not paired: left out
        {"count": 100, "operator": {"seconds": 10.0}, "operator_with_standby": {"seconds": 9.0}},
    ]
    assert standby_ratios(runs) == {
        1000: {"each": [1.06, 1.1], "median": 1.08, "min": 1.06, "max": 1.1},
        100: {"each": [0.9], "median": 0.9, "min": 0.9, "max": 0.9},
    }
