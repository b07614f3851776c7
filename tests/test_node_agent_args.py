"""The node agent's --label and --taint arguments: parsed, or refused naming the form."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from e2e.node_agent import image_bin, node_label, node_taint


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


def test_image_bin_maps_an_image_to_a_directory() -> None:
    assert image_bin("specfleet.local/runtime:1=/opt/venv/bin") == (
        "specfleet.local/runtime:1",
        Path("/opt/venv/bin"),
    )


@pytest.mark.parametrize("text", ["image", "=dir", "image="])
def test_a_malformed_image_bin_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="IMAGE=DIRECTORY"):
        image_bin(text)
