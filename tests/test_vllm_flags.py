"""`spec.runtime.args` against vLLM 0.33's own parser, without vLLM: the table of its
flags (runtime/vllm_flags.json) that `specfleet validate` reads, and, where vLLM 0.33 is
at hand (SPECFLEET_VLLM_PYTHON, as the contract test), that the table is what vLLM's
parser has and that the check refuses exactly the argvs vLLM's parser refuses."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from specfleet.operator.cli import app
from specfleet.runtime import vllm_flags
from tests.conftest import REPO
from tests.test_runtime_vllm_contract import vllm_python

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))

# Accepted by vLLM 0.33's parser (each checked against it below where vLLM is at hand).
ACCEPTED = [
    ["--max-model-len", "8192"],
    ["--max_model_len=8192"],
    ["--max-model", "8192"],
    ["--enforce-eager", "--gpu-memory-utilization", "0.9"],
    ["--scheduling-policy", "priority"],
    ["--compilation-config.mode", "3"],
    ["-O3"],
    ["--cudagraph-capture-sizes", "1", "2", "4", "--enforce-eager"],
    ["--enable-prefix-caching"],
    ["--disable-prefix-caching"],
    ["--no-enable-prefix-caching"],
    ["--kv-cache-dtype", "fp8"],
    ["--max-num-seqs=64", "--max-num-batched-tokens", "8192"],
]
# Refused by it: the index of the first arg the check names, and a word of why.
REFUSED: list[tuple[list[str], int, str]] = [
    (["--max-model-lenn", "8192"], 0, "not an option"),
    (["--max-model-len", "8192", "--enable-prefix-cache"], 2, "not an option"),
    (["--no-prefix-caching"], 0, "not an option"),
    (["--max", "1"], 0, "ambiguous"),
    (["--scheduling-policy", "lifo"], 1, "takes one of fcfs, priority"),
    (["--max-model-len"], 0, "takes a value"),
    (["--enforce-eager", "yes"], 1, "a value no flag"),
    (["--gpu-memory-utilisation", "0.9"], 0, "not an option"),
]

# Taken by vLLM's parser, but a flag sets what an earlier one set: the index the check
# names, and the args less the earlier one, which vLLM 0.33 parses to the same values.
WHOLE = '{"cudagraph_capture_sizes": [1, 2]}'
DUPLICATES: list[tuple[list[str], int, list[str]]] = [
    (["--max-model-len", "8192", "--max-model-len", "4096"], 2, ["--max-model-len", "4096"]),
    (["--max_model_len=8192", "--max-model", "4096"], 1, ["--max-model", "4096"]),
    (["--enable-prefix-caching", "--no-enable-prefix-caching"], 1, ["--no-enable-prefix-caching"]),
    (["--enable-prefix-caching", "--disable-prefix-caching"], 1, ["--disable-prefix-caching"]),
    (["--enable-expert-parallel", "--dtype", "auto", "-ep"], 3, ["--dtype", "auto", "-ep"]),
    (["-O3", "--optimization-level", "2"], 1, ["--optimization-level", "2"]),
    (
        ["--compilation-config.mode", "3", "--compilation-config.mode", "2"],
        2,
        ["--compilation-config.mode", "2"],
    ),
    # Keys given apart replace the whole value, even before it.
    (
        ["--compilation-config.mode", "3", "--compilation-config", WHOLE],
        2,
        ["--compilation-config.mode", "3"],
    ),
    (["--api-key", "a", "b", "--api-key", "c"], 3, ["--api-key", "c"]),
]
# Repeats that are not duplicates: each value reaches vLLM (removing one changes what it
# parses).
REPEATS = [
    ["--middleware", "a.b", "--middleware", "c.d"],
    ["--compilation-config.mode", "3", "--compilation-config.cudagraph_capture_sizes", "[1]"],
]


def test_the_table_is_vllm_033s() -> None:
    table = vllm_flags.load()
    assert table["vllm"] == "0.33.0"
    assert {"--max-model-len", "--enforce-eager", "--speculative-config", "-tp"} <= set(
        table["flags"]
    )


@pytest.mark.parametrize("args", ACCEPTED, ids=" ".join)
def test_what_vllm_accepts_passes(args: list[str]) -> None:
    assert vllm_flags.Flags().refusals(args) == []


@pytest.mark.parametrize(("args", "index", "why"), REFUSED, ids=lambda v: str(v))
def test_what_vllm_refuses_is_named_with_its_index(args: list[str], index: int, why: str) -> None:
    refusals = vllm_flags.Flags().refusals(args)
    assert refusals and refusals[0][0] == index and why in refusals[0][1], refusals


@pytest.mark.parametrize(("args", "index", "alone"), DUPLICATES, ids=lambda v: str(v))
def test_a_flag_setting_what_an_earlier_one_set_is_named(
    args: list[str], index: int, alone: list[str]
) -> None:
    flags = vllm_flags.Flags()
    assert flags.refusals(args) == []
    [(named, why)] = flags.duplicates(args)
    assert named == index, why
    assert f"{args[index].partition('=')[0]!r} sets what " in why


@pytest.mark.parametrize("args", REPEATS, ids=" ".join)
def test_repeats_that_add_up_are_no_duplicates(args: list[str]) -> None:
    assert vllm_flags.Flags().duplicates(args) == []


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_examples_args_pass(path: Path) -> None:
    manifest: dict[str, Any] = yaml.safe_load(path.read_text())
    args = manifest["spec"].get("runtime", {}).get("args", [])
    assert vllm_flags.Flags().refusals(args) == []
    assert vllm_flags.Flags().duplicates(args) == []


@pytest.mark.parametrize("command", ["validate", "render"])
def test_validate_and_render_refuse_a_misspelt_flag_naming_field_and_index(
    command: str, peagle_manifest: dict[str, Any]
) -> None:
    peagle_manifest["spec"]["runtime"]["args"] = [
        "--max-model-len",
        "8192",
        "--gpu-memory-utilisation",
        "0.9",
    ]
    result = CliRunner().invoke(app, [command, "-"], input=yaml.safe_dump(peagle_manifest))
    assert result.exit_code == 1, result.output
    assert "spec.runtime.args[2]: '--gpu-memory-utilisation': not an option of vLLM 0.33.0" in (
        result.output
    )
    peagle_manifest["spec"]["runtime"]["args"] = ["--gpu-memory-utilization", "0.9"]
    result = CliRunner().invoke(app, [command, "-"], input=yaml.safe_dump(peagle_manifest))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("command", ["validate", "render"])
def test_validate_and_render_refuse_a_flag_given_twice_naming_field_and_flags(
    command: str, peagle_manifest: dict[str, Any]
) -> None:
    peagle_manifest["spec"]["runtime"]["args"] = [
        "--enable-prefix-caching",
        "--max-model-len",
        "8192",
        "--disable-prefix-caching",
    ]
    result = CliRunner().invoke(app, [command, "-"], input=yaml.safe_dump(peagle_manifest))
    assert result.exit_code == 1, result.output
    assert (
        "spec.runtime.args[3]: '--disable-prefix-caching' sets what '--enable-prefix-caching' "
        "(args[0]) set: vLLM keeps only the last; give it once"
    ) in result.output


# ------------------------------------------------------- against vLLM 0.33 itself

needs_vllm = pytest.mark.skipif(
    vllm_python() is None,
    reason="vLLM 0.33 is not at hand (SPECFLEET_VLLM_PYTHON, as the contract test)",
)

# Runs in vLLM's Python, once for the file (an import of vLLM costs about 10 s of CPU):
# the table as vllm_flags.DUMP prints it, for each argv of "parse" whether `vllm serve`'s
# parser refuses it (None, or why), and for each of "values" what it parses the argv to
# (JSON text: what reaches vLLM).
ASK = r"""
import argparse, contextlib, io, json, sys
asked = json.load(sys.stdin)
table = io.StringIO()
with contextlib.redirect_stdout(table):
    exec(asked["dump"], {"__name__": "__dump__"})  # also sets vLLM's platform: the CPU's
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser()
ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
values = [
    json.dumps(vars(parser.parse_args(["serve", "some/model", *args])), default=str,
               sort_keys=True)
    for args in asked["values"]
]

class ParseError(Exception):
    pass

def error(self, message):
    raise ParseError(message)

argparse.ArgumentParser.error = error
refused = []
for args in asked["parse"]:
    try:
        parser.parse_args(["serve", "some/model", *args])
        refused.append(None)
    except BaseException as error:
        refused.append(repr(error))
print(json.dumps({"table": table.getvalue(), "refused": refused, "values": values}))
"""

# The argvs each check asks vLLM's parser about.
PARSED = ACCEPTED + [args for args, _, _ in REFUSED]
PAIRS = [(args, alone) for args, _, alone in DUPLICATES] + [(args, args[:2]) for args in REPEATS]


@pytest.fixture(scope="module")
def vllms_parser() -> dict[str, Any]:
    """What vLLM 0.33's parser says of the table and of the argvs above."""
    python = vllm_python()
    assert python is not None
    asked = {
        "dump": vllm_flags.DUMP,
        "parse": PARSED,
        "values": [argv for pair in PAIRS for argv in pair],
    }
    result = subprocess.run(
        [python, "-c", ASK],
        input=json.dumps(asked),
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


@needs_vllm
def test_the_committed_table_is_what_vllms_parser_has(vllms_parser: dict[str, Any]) -> None:
    """Stale when vLLM's pin moves: regenerate with the command in vllm_flags.py."""
    assert vllms_parser["table"] == vllm_flags.TABLE.read_text(), (
        "runtime/src/specfleet/runtime/vllm_flags.json is stale: run "
        "SPECFLEET_VLLM_PYTHON=... .venv/bin/python -m specfleet.runtime.vllm_flags"
    )


@needs_vllm
def test_the_check_refuses_exactly_what_vllms_parser_refuses(
    vllms_parser: dict[str, Any],
) -> None:
    flags = vllm_flags.Flags()
    for args, refused in zip(PARSED, vllms_parser["refused"], strict=True):
        assert bool(flags.refusals(args)) == (refused is not None), (args, refused)


@needs_vllm
def test_of_each_duplicate_only_one_value_reaches_vllm(vllms_parser: dict[str, Any]) -> None:
    """vLLM's parser takes each case of DUPLICATES to the same values as the args less the
    earlier flag (it was dead text), and each of REPEATS to other values than its first
    half (both reach vLLM)."""
    values = vllms_parser["values"]
    same = [values[2 * i] == values[2 * i + 1] for i in range(len(PAIRS))]
    assert same == [True] * len(DUPLICATES) + [False] * len(REPEATS), list(
        zip(PAIRS, same, strict=True)
    )
