"""The node agent's arguments (parsed, or refused naming the form) and its container user."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from e2e.node_agent import image_path, node_label, node_taint, run_as


def test_labels_and_taints_parse() -> None:
    assert node_label("specfleet.io/bench-node=true") == ("specfleet.io/bench-node", "true")
    assert node_label("empty=") == ("empty", "")
    assert node_taint("specfleet.io/bench=true:NoSchedule") == {
        "key": "specfleet.io/bench",
        "value": "true",
        "effect": "NoSchedule",
    }


@pytest.mark.parametrize("text", ["novalue", "=x"])
def test_a_malformed_label_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="KEY=VALUE"):
        node_label(text)


@pytest.mark.parametrize("text", ["a=b", "a=b:Sometimes", "ab:NoSchedule"])
def test_a_malformed_taint_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="KEY=VALUE"):
        node_taint(text)


def test_image_path_maps_an_image_to_a_path() -> None:
    assert image_path("specfleet.local/runtime:1=/opt/venv/bin") == (
        "specfleet.local/runtime:1",
        Path("/opt/venv/bin"),
    )


@pytest.mark.parametrize("text", ["image", "=dir", "image="])
def test_a_malformed_image_path_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="IMAGE=PATH"):
        image_path(text)


def test_run_as_takes_the_security_context_over_the_image_user() -> None:
    assert run_as({}, "65532:65532") == (65532, 65532)
    assert run_as({}, "") == (0, 0)
    assert run_as({"runAsUser": 1000}, "65532:65532") == (1000, 65532)
    assert run_as({"runAsUser": 1000, "runAsGroup": 2000}, "") == (1000, 2000)


def test_run_as_refuses_a_user_name_it_cannot_check() -> None:
    with pytest.raises(ValueError, match="non-numeric user"):
        run_as({}, "nobody")
