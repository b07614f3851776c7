"""The commands the docs quote with their output, run: every ```console block of the
README and docs/*.md is a transcript, `$ COMMAND` (continued by a trailing backslash) and
the output it prints, as a terminal shows it (stdout and stderr together, in order).

A transcript whose program runs without a cluster (OFFLINE) is run from the repository's
root with this venv's scripts first on PATH, and its output must be the quoted one. The
only thing not compared: a line that is `...` alone stands for any lines the doc leaves
out. Nothing else is normalized, since none of these outputs varies between runs (the
simulator is seeded, the rest reads the repository). A program that needs a cluster or a
running pod (NEEDS_CLUSTER) is not run; a transcript of any other program fails, so a new
kind of command is a decision, not a silent skip.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# What the transcripts run: this checkout's `specfleet` and `specfleet-runtime`.
OFFLINE = {"specfleet", "specfleet-runtime"}
# Quoted, not run here, each with what it needs.
NEEDS_CLUSTER = {
    "curl": "a running pod's hot-schedule endpoint (docs/runtime.md)",
    "kubectl": "the chart's admission policy (e2e/test_admission_policy.py checks the words)",
}
ELISION = "..."
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")


@dataclass(frozen=True)
class Transcript:
    doc: Path
    line: int  # of the `$ COMMAND` line, 1-based
    command: str
    output: tuple[str, ...]

    @property
    def program(self) -> str:
        return shlex.split(self.command)[0]

    def __str__(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"


def transcripts(doc: Path, text: str | None = None) -> list[Transcript]:
    """The transcripts of a markdown file's ```console blocks, in order."""
    lines = (doc.read_text() if text is None else text).splitlines()
    found: list[Transcript] = []
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        index += 1
        if fence is None:
            continue
        indent, language = fence.groups()
        body: list[tuple[int, str]] = []
        while index < len(lines) and lines[index].strip() != "```":
            body.append((index + 1, lines[index].removeprefix(indent)))
            index += 1
        index += 1  # the closing fence
        if language == "console":
            found += _block(doc, body)
    return found


def _block(doc: Path, body: list[tuple[int, str]]) -> list[Transcript]:
    found: list[Transcript] = []
    at = 0
    while at < len(body):
        number, line = body[at]
        if not line.startswith("$ "):
            raise ValueError(f"{doc}:{number}: a console block's line before any `$ COMMAND`")
        command = [line[2:]]
        at += 1
        while command[-1].endswith("\\") and at < len(body):
            command.append(body[at][1])
            at += 1
        output = []
        while at < len(body) and not body[at][1].startswith("$ "):
            output.append(body[at][1])
            at += 1
        found.append(Transcript(doc, number, "\n".join(command), tuple(output)))
    return found


def matches(quoted: tuple[str, ...], printed: str) -> bool:
    """The printed output is the quoted one, a line `...` standing for any lines."""
    pattern = "".join(
        r"(?:.*\n)*" if line == ELISION else re.escape(line) + "\n" for line in quoted
    )
    return re.fullmatch(pattern, printed) is not None


def run(command: str) -> str:
    """What a terminal shows for the command, run from the repository's root."""
    scripts = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["PYTHONUNBUFFERED"] = "1"  # stdout and stderr in the order a terminal shows them
    result = subprocess.run(
        ["bash", "-c", command],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        check=False,
    )
    printed = result.stdout
    return printed if printed.endswith("\n") or not printed else printed + "\n"


ALL = [transcript for doc in DOCS for transcript in transcripts(doc)]
RUN = [transcript for transcript in ALL if transcript.program in OFFLINE]


def test_every_quoted_command_is_run_here_or_needs_a_cluster() -> None:
    assert RUN, "no transcript found: the extractor is broken"
    unknown = [f"{t}: {t.program}" for t in ALL if t.program not in OFFLINE | NEEDS_CLUSTER.keys()]
    assert unknown == [], "add the program to OFFLINE or NEEDS_CLUSTER"


@pytest.mark.parametrize("transcript", RUN, ids=str)
def test_the_docs_quote_what_the_command_prints(transcript: Transcript) -> None:
    printed = run(transcript.command)
    assert matches(transcript.output, printed), (
        f"{transcript} quotes another output than `{transcript.command}` prints:\n{printed}"
    )


def test_the_extractor_reads_continuations_elisions_and_indented_blocks() -> None:
    text = "\n".join(
        [
            "- a list item:",
            "  ```console",
            "  $ echo one \\",
            "      two",
            "  one two",
            "  $ printf 'a\\nb\\nc\\n'",
            "  a",
            "  ...",
            "  ```",
            "```sh",
            "$ not a transcript",
            "```",
        ]
    )
    first, second = transcripts(REPO / "x.md", text)
    assert (first.line, first.command, first.output) == (3, "echo one \\\n    two", ("one two",))
    assert run(first.command) == "one two\n"
    assert matches(second.output, run(second.command))
    assert not matches(("a", "c"), run(second.command))  # only `...` leaves lines out
    assert not matches(("a", "b"), run(second.command))  # nor a line at the end
