"""Contract with real vLLM 0.33: its own parser accepts every argv we render.

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

import pytest

from specfleet.runtime.config import parse_serve_args
from specfleet.runtime.vllm_args import OWNED_FLAGS, vllm_argv
from tests.test_runtime_vllm_args import CASES

# Runs inside the vLLM interpreter: reads {"argvs": [...], "owned": {...}} on stdin,
# prints a JSON report. It builds `vllm serve`'s parser the way vLLM's CLI main does.
CHECK = r"""
import dataclasses, json, sys
from vllm import platforms
from vllm.platforms.cpu import CpuPlatform
platforms.current_platform = CpuPlatform()  # no GPU here; parsing needs a platform
import vllm
from vllm.config import SpeculativeConfig
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

request = json.load(sys.stdin)
parser = FlexibleArgumentParser()
command = ServeSubcommand()
serve_parser = command.subparser_init(parser.add_subparsers(dest="subparser"))
fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
report = {"version": vllm.__version__, "failures": [], "checked": 0, "spellings": {}}
for action in serve_parser._actions:
    for owned in request["owned"]:
        if action.option_strings and owned in action.option_strings:
            report["spellings"][owned] = action.option_strings
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
    except BaseException as error:  # argparse exits with SystemExit
        report["failures"].append({"argv": argv, "error": repr(error)})
print("REPORT " + json.dumps(report))
"""


def vllm_python() -> str | None:
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    return os.environ.get("SPECFLEET_VLLM_PYTHON")


@pytest.mark.skipif(
    vllm_python() is None,
    reason="vllm is not importable and SPECFLEET_VLLM_PYTHON is not set "
    "(pip install 'vllm==0.33.*' into a separate venv and point SPECFLEET_VLLM_PYTHON at it)",
)
def test_vllm_accepts_every_rendered_argv() -> None:
    python = vllm_python()
    assert python is not None
    argvs = [vllm_argv(parse_serve_args(args, env={})[0]) for args, _ in CASES.values()]
    request = {"argvs": argvs, "owned": list(OWNED_FLAGS)}
    result = subprocess.run(
        [python, "-c", CHECK],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, result.stderr[-3000:]
    report = json.loads(lines[-1].removeprefix("REPORT "))
    assert report["version"].startswith("0.33."), report["version"]
    assert report["failures"] == []
    assert report["checked"] == len(argvs)
    # Every spelling vLLM accepts for a flag we own is one we refuse in extra args.
    for owned, spellings in report["spellings"].items():
        assert set(spellings) <= set(OWNED_FLAGS[owned]), (owned, spellings)
    assert set(report["spellings"]) == set(OWNED_FLAGS)
