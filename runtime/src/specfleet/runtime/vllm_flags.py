"""vLLM 0.33's `vllm serve` options as a table (vllm_flags.json), so that `specfleet
validate` can refuse a misspelt or unknown flag in `runtime.args` without importing vLLM
(the operator's image has none).

The table is generated from vLLM's own parser, in a Python that has vLLM 0.33:

    SPECFLEET_VLLM_PYTHON="$(e2e/install-vllm.sh)" .venv/bin/python -m specfleet.runtime.vllm_flags

and tests/test_vllm_flags.py regenerates it the same way and fails when the committed
one differs. How vLLM reads a flag, as its FlexibleArgumentParser does: `--name=value`,
`_` for `-` in a long name, `--name.key value` for a JSON option's key, `-O3`, and
argparse's unique prefixes (`--max-model` for `--max-model-len`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TABLE = Path(__file__).with_name("vllm_flags.json")

# Runs in vLLM's Python: prints the table (one entry per option string).
DUMP = r"""
import argparse, json, sys
from vllm import platforms
from vllm.platforms.cpu import CpuPlatform
platforms.current_platform = CpuPlatform()  # no GPU here; parsing needs a platform
import vllm
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser

serve = ServeSubcommand().subparser_init(FlexibleArgumentParser().add_subparsers(dest="s"))
flags = {}
# Every option string the parser matches (EnableDisableAction's --no- forms included),
# with the destination it sets (an alias and a --no- form share their option's) and
# whether a repeat adds to it (append, extend, count) instead of replacing it.
adds = (argparse._AppendAction, argparse._AppendConstAction, argparse._CountAction)
for option, action in serve._option_string_actions.items():
    if action.nargs == 0:
        value = "none"
    elif action.nargs in (None, 1):
        value = "one"
    elif action.nargs == "?":
        value = "optional"
    else:
        value = "many"
    # Choices are checked only where the parser compares the value as written.
    plain = action.type in (None, str)
    choices = sorted(map(str, action.choices)) if action.choices and plain else None
    flags[option] = {"value": value, "choices": choices, "dest": action.dest,
                     "repeats": isinstance(action, adds)}
json.dump({"vllm": vllm.__version__, "allow_abbrev": serve.allow_abbrev,
           "flags": dict(sorted(flags.items()))}, sys.stdout, indent=1, sort_keys=True)
sys.stdout.write("\n")
"""


@dataclass(frozen=True)
class Flag:
    value: str  # none, one, optional, many
    choices: tuple[str, ...] | None
    dest: str = ""  # the parser's destination: an alias and a --no- form share it
    repeats: bool = False  # a repeat adds to the value (append) instead of replacing it


def load() -> dict[str, Any]:
    return dict(json.loads(TABLE.read_text()))


def generate(python: str) -> str:
    """The table's text, from vLLM's parser in `python`."""
    result = subprocess.run(
        [python, "-c", DUMP], capture_output=True, text=True, check=False, timeout=600
    )
    if result.returncode != 0:
        raise RuntimeError(f"{python} could not dump vLLM's flags:\n{result.stderr[-2000:]}")
    return result.stdout


class Flags:
    """The options of `vllm serve`, and how an argv spells them."""

    def __init__(self, table: dict[str, Any] | None = None) -> None:
        table = table if table is not None else load()
        self.version = str(table["vllm"])
        self.abbreviations = bool(table.get("allow_abbrev", True))
        self.flags = {
            name: Flag(
                entry["value"],
                tuple(entry["choices"]) if entry["choices"] else None,
                entry["dest"],
                entry["repeats"],
            )
            for name, entry in table["flags"].items()
        }

    def find(self, spelt: str) -> tuple[str | None, str]:
        """The option a flag (without `=value`) names, or None and why not."""
        if spelt.startswith("--"):
            name = spelt.split(".", 1)[0]  # --name.key: a key of a JSON option
            name = "--" + name[2:].replace("_", "-")
        else:
            name = spelt
        if name in self.flags:
            return name, ""
        if spelt.startswith("-O") and spelt != "-O":
            return "--optimization-level", ""
        if not spelt.startswith("--"):
            # A short option with its value glued on (-tp8), or a prefix of one.
            short = [f for f in self.flags if not f.startswith("--") and name.startswith(f)]
            if short:
                return max(short, key=len), ""
        if self.abbreviations and len(name) > 2:
            matches = sorted(f for f in self.flags if f.startswith(name))
            if len(matches) == 1:
                return matches[0], ""
            if matches:
                shown = ", ".join(matches[:4]) + (", ..." if len(matches) > 4 else "")
                return None, f"ambiguous: vLLM {self.version} has {shown}"
        return None, f"not an option of vLLM {self.version}'s `vllm serve`"

    def refusals(self, args: list[str]) -> list[tuple[int, str]]:
        """(index, why) of each arg vLLM's parser would refuse: an unknown or ambiguous
        flag, a value not among a flag's choices, a flag's value missing, a value no flag
        takes."""
        return self._read(args)[0]

    def duplicates(self, args: list[str]) -> list[tuple[int, str]]:
        """(index, why) of each flag that sets what an earlier one set: the same option in
        any spelling (an alias, a prefix, `_` for `-`), its --no- or --disable- form, the
        same key of a JSON option twice, or a key beside the whole option (each as vLLM
        0.33's parser reads it: tests/test_vllm_flags.py checks the cases against it). vLLM 0.33's
        parser takes them (the last value wins; keys given apart replace the whole value,
        wherever it stands) and only one reaches vLLM. Options whose repeats add up
        (--middleware) are left alone."""
        found: list[tuple[int, str]] = []
        earlier: list[_Setting] = []
        for setting in self._read(args)[1]:
            if setting.repeats:
                continue
            for first in earlier:
                if first.dest != setting.dest or not _overlap(first.key, setting.key):
                    continue
                if (first.key is None) == (setting.key is None):
                    why = "vLLM keeps only the last"
                else:
                    why = "vLLM replaces the whole value with the keys given apart"
                found.append(
                    (
                        setting.index,
                        f"{setting.spelt!r} sets what {first.spelt!r} (args[{first.index}]) set: "
                        f"{why}; give it once",
                    )
                )
                break
            earlier.append(setting)
        return found

    def _read(self, args: list[str]) -> tuple[list[tuple[int, str]], list[_Setting]]:
        """The args as vLLM's parser reads them: what it would refuse, (index, why), and
        each flag it takes, in order."""
        found: list[tuple[int, str]] = []
        settings: list[_Setting] = []
        index = 0
        while index < len(args):
            arg = args[index]
            if not arg.startswith("-") or arg == "-" or _number(arg):
                found.append((index, f"{arg!r} is a value no flag before it takes"))
                index += 1
                continue
            spelt, equals, value = arg.partition("=")
            name, why = self.find(spelt)
            if name is None:
                found.append((index, f"{spelt!r}: {why}"))
                index += 1
                if not equals and index < len(args) and not args[index].startswith("--"):
                    index += 1  # its value, most likely: one error, not two
                continue
            flag = self.flags.get(name, Flag("one", None))
            dotted = spelt.startswith("--") and "." in spelt
            key = spelt.split(".", 1)[1] if dotted else None
            settings.append(_Setting(index, spelt, key, flag.dest or name, flag.repeats))
            index += 1
            if equals or flag.value == "none" or (not spelt.startswith("--") and spelt != name):
                pass  # the value is in the arg itself, or there is none
            elif flag.value == "one" or dotted:
                if index >= len(args):
                    found.append((index - 1, f"{arg!r} takes a value, and none follows"))
                    continue
                value = args[index]
                index += 1
            elif flag.value == "optional":
                if index < len(args) and not args[index].startswith("-"):
                    value = args[index]
                    index += 1
            else:  # many
                while index < len(args) and (
                    not args[index].startswith("-") or _number(args[index])
                ):
                    index += 1
            if flag.choices and value and not dotted and value not in flag.choices:
                shown = ", ".join(flag.choices[:12]) + (", ..." if len(flag.choices) > 12 else "")
                found.append((index - 1, f"{name} takes one of {shown}, not {value!r}"))
        return found, settings


@dataclass(frozen=True)
class _Setting:
    """A flag in the args: where, as spelt (without =value), the key of a JSON option it
    sets (--name.key), the parser's destination it sets, and whether a repeat adds to it."""

    index: int
    spelt: str
    key: str | None
    dest: str
    repeats: bool


def _overlap(first: str | None, second: str | None) -> bool:
    """Two settings of one option meet: the whole value (None) meets anything, a key the
    same key (vLLM merges the others into one dict, as written: no `_` for `-` there)."""
    return first is None or second is None or first == second


def _number(arg: str) -> bool:
    try:
        float(arg)
    except ValueError:
        return False
    return True


def main() -> int:
    python = os.environ.get("SPECFLEET_VLLM_PYTHON")
    if not python:
        print("set SPECFLEET_VLLM_PYTHON to a Python with vLLM 0.33", file=sys.stderr)
        return 2
    text = generate(python)
    TABLE.write_text(text)
    print(f"wrote {TABLE} (vLLM {json.loads(text)['vllm']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
