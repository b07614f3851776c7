"""Contract with real vLLM 0.33: its own parser accepts every argv we render, and every
spelling of a flag the runtime owns is one that vLLM reads as that flag and we refuse.

vLLM (with torch) is several GB, so it is not a dev dependency. The check runs in a
Python that has it: this one if `vllm` is importable, else the interpreter named by
SPECFLEET_VLLM_PYTHON (e.g. a throwaway venv). Without either it skips.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specfleet.runtime.config import parse_serve_args
from specfleet.runtime.vllm_args import (
    OWNED_FLAGS,
    older_speculative_flag,
    owned_flag,
    vllm_argv,
)
from tests.test_runtime_vllm_args import CASES

# Runs inside the vLLM interpreter: reads {"argvs", "probes", "dests"} on stdin, prints
# a JSON report. It builds `vllm serve`'s parser the way vLLM's CLI main does.
CHECK = r"""
import argparse, dataclasses, json, sys
from vllm import platforms
from vllm.platforms.cpu import CpuPlatform
platforms.current_platform = CpuPlatform()  # no GPU here; parsing needs a platform
import vllm
from vllm.config import SpeculativeConfig
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

class ParseError(Exception):
    pass

def error(self, message):  # argparse prints usage and exits; keep the message instead
    raise ParseError(message)

argparse.ArgumentParser.error = error
request = json.load(sys.stdin)
parser = FlexibleArgumentParser()
command = ServeSubcommand()
serve_parser = command.subparser_init(parser.add_subparsers(dest="subparser"))
fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
report = {"version": vllm.__version__, "failures": [], "checked": 0, "actions": {},
          "options": [], "probes": []}
for action in serve_parser._actions:
    report["options"] += action.option_strings
    report["actions"][action.dest] = action.option_strings
for argv in request["argvs"]:
    try:
        args = parser.parse_args(argv[1:])
        command.validate(args)
        AsyncEngineArgs.from_cli_args(args)
        spec = args.speculative_config or {}
        unknown = sorted(set(spec) - fields)
        if unknown:
            raise ValueError(f"not SpeculativeConfig fields: {unknown}")
        if "num_speculative_tokens_per_batch_size" in spec:
            validate_and_normalize_dynamic_sd_schedule(spec["num_speculative_tokens_per_batch_size"])
        report["checked"] += 1
    except BaseException as error:
        report["failures"].append({"argv": argv, "error": repr(error)})
for probe in request["probes"]:
    # Where the probe's value lands: in one of the owner's destinations, or in an error
    # argparse raised about the owner's option (a value of the wrong type).
    dests = probe["extra_dests"] + [
        action.dest for action in serve_parser._actions
        if set(action.option_strings) & set(probe["spellings"])
    ]
    try:
        args = parser.parse_args(["serve", *probe["base"], *probe["args"]])
        seen = json.dumps([getattr(args, d, None) for d in dests])
        outcome = "reaches" if probe["marker"] in seen else "misses: " + seen
    except BaseException as error:
        message = str(error)
        named = message.startswith("argument ") and any(
            s in message.split(":")[0].split() or s in message.split(":")[0].split("/")
            for s in probe["spellings"])
        if named:
            outcome = "reaches"
        elif "ambiguous option" in message:
            outcome = "ambiguous"
        elif "unrecognized arguments" in message:
            outcome = "unrecognized"
        else:
            outcome = "error: " + message
    report["probes"].append({**probe, "outcome": outcome})
print("REPORT " + json.dumps(report))
"""

MARK = "4321"
# A value of each owned flag's type that carries MARK (`--spec-method` takes a choice),
# the parser destinations beyond the flag's own (`--model` moves into the positional
# model; a config file sets what it holds, here a port), and the args before the probe:
# a positional model, except for `--model`, which vLLM moves there itself.
VALUES: dict[str, str | None] = {
    "--model": "org/m4321",
    "--served-model-name": "s4321",
    "--tensor-parallel-size": MARK,
    "--pipeline-parallel-size": MARK,
    "--data-parallel-size": MARK,
    "--nnodes": MARK,
    "--node-rank": MARK,
    "--master-addr": "a4321",
    "--headless": None,  # a switch: it takes no value and reads as true
    "--host": "h4321",
    "--port": MARK,
    "--speculative-config": '{"m": 4321}',
    "--spec-method": "ngram",
    "--spec-model": "d/4321",
    "--spec-tokens": MARK,
}
# What each owner's probe leaves in its destination, where not MARK.
MARKERS = {"--spec-method": "ngram", "--headless": "true"}
EXTRA_DESTS = {"--model": ["model_tag"], "--config": ["port"]}
ORDINARY = ["--max-model-len", "--dtype", "--enforce-eager", "--model-impl"]


def vllm_python() -> str | None:
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    return os.environ.get("SPECFLEET_VLLM_PYTHON")


def spelling_classes(spelling: str, value: str | None) -> dict[str, list[str]]:
    """Every way vLLM's parser may read an arg as this option, by class (a switch, whose
    value is None, alone; given a value with `=`, argparse's error names it)."""
    head, name = ("--", spelling[2:]) if spelling.startswith("--") else ("-", spelling[1:])
    given = [] if value is None else [value]
    glued = value or MARK
    classes = {"exact": [spelling, *given], "equals": [f"{spelling}={glued}"]}
    if value is not None:
        # A switch's JSON key reads as the switch and then fails on the JSON left over.
        classes["key"] = [f"{spelling}.key", value]
    if "-" in name:
        classes["underscore"] = [head + name.replace("-", "_"), *given]
        classes["underscore prefix equals"] = [head + name[:-1].replace("-", "_") + "=" + glued]
    for cut in range(1, len(name)):
        classes[f"prefix {head + name[:cut]}"] = [head + name[:cut], *given]
    if head == "-":
        classes["glued"] = [spelling + glued]
    return classes


def probes(config_file: Path) -> list[dict[str, Any]]:
    found = []
    for owner, spellings in OWNED_FLAGS.items():
        value = str(config_file) if owner == "--config" else VALUES[owner]
        for spelling in spellings:
            for kind, args in spelling_classes(spelling, value).items():
                found.append(
                    {
                        "owner": owner,
                        "class": kind,
                        "args": args,
                        "base": [] if owner == "--model" else ["org/target"],
                        "marker": MARKERS.get(owner, MARK),
                        "spellings": list(spellings),
                        "extra_dests": EXTRA_DESTS.get(owner, []),
                    }
                )
    return found


requires_vllm = pytest.mark.skipif(
    vllm_python() is None,
    reason="vllm is not importable and SPECFLEET_VLLM_PYTHON is not set "
    "(pip install 'vllm==0.33.*' into a separate venv and point SPECFLEET_VLLM_PYTHON at it)",
)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    python = vllm_python()
    assert python is not None
    config_file = tmp_path_factory.mktemp("vllm") / "serve-4321.yaml"
    config_file.write_text(f"port: {MARK}\n")
    argvs = [vllm_argv(parse_serve_args(args, env={})[0]) for args, _ in CASES.values()]
    request = {"argvs": argvs, "probes": probes(config_file)}
    result = subprocess.run(
        [python, "-c", CHECK],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        # A hang's limit: vLLM's imports run beside the other workers' tests and real vLLM.
        timeout=600,
        check=False,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, result.stderr[-3000:]
    found: dict[str, Any] = json.loads(lines[-1].removeprefix("REPORT "))
    assert found["version"].startswith("0.33."), found["version"]
    return found


@requires_vllm
def test_vllm_accepts_every_rendered_argv(report: dict[str, Any]) -> None:
    assert report["failures"] == []
    assert report["checked"] == len(CASES)


@requires_vllm
def test_the_owned_spellings_are_exactly_vllms_option_strings(report: dict[str, Any]) -> None:
    for owner, spellings in OWNED_FLAGS.items():
        [option_strings] = [o for o in report["actions"].values() if owner in o]
        assert set(option_strings) == set(spellings), owner


@requires_vllm
def test_every_refused_spelling_reaches_its_flag_in_vllm(report: dict[str, Any]) -> None:
    for probe in report["probes"]:
        arg, kind, outcome = probe["args"][0], probe["class"], probe["outcome"]
        where = (probe["owner"], kind, probe["args"], outcome)
        if kind == "glued":
            assert outcome in ("reaches", "unrecognized"), where
        elif kind.startswith("prefix") or kind == "underscore prefix equals":
            # A prefix of --data-parallel-size is also one of --data-parallel-size-local.
            assert outcome in ("reaches", "ambiguous"), where
        else:
            assert outcome == "reaches", where
        assert owned_flag(arg) == probe["owner"] if outcome == "reaches" else owned_flag(arg)


@requires_vllm
def test_no_other_vllm_option_is_refused(report: dict[str, Any]) -> None:
    refused = {option for option in report["options"] if owned_flag(option)}
    assert refused == {s for spellings in OWNED_FLAGS.values() for s in spellings}
    assert set(ORDINARY) <= set(report["options"])


@requires_vllm
def test_the_older_speculative_flags_refused_are_none_of_vllms(report: dict[str, Any]) -> None:
    # Refusing them never refuses an option vLLM 0.33 has.
    assert [o for o in report["options"] if older_speculative_flag(o)] == []
