"""`specfleet`: the command line of the operator side (CRDs, validation, rendering)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from specfleet.operator import api, crd

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


@app.command("crds")
def crds_command(
    check: Annotated[
        bool, typer.Option("--check", help="Fail (exit 1) if a generated file is stale.")
    ] = False,
    root: Annotated[Path, typer.Option(help="Repository root.")] = Path("."),
) -> None:
    """Write the CRD, the chart's CRD and the API reference from the models."""
    if check:
        stale = crd.stale_files(root)
        for path in stale:
            typer.echo(f"stale: {path} (run `specfleet crds`)", err=True)
        raise typer.Exit(1 if stale else 0)
    for path in crd.write_files(root):
        typer.echo(f"wrote {path}")


@app.command("validate")
def validate_command(
    files: Annotated[list[Path], typer.Argument(help="Manifest files (YAML, multi-document).")],
) -> None:
    """Validate SpeculativeModel manifests offline; print each error with its field path."""
    invalid = 0
    for path in files:
        try:
            documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        except (OSError, yaml.YAMLError) as error:
            typer.echo(f"{path}: cannot read: {error}", err=True)
            invalid += 1
            continue
        for index, document in enumerate(documents):
            if isinstance(document, dict) and document.get("kind") not in (None, api.KIND):
                continue  # other kinds in the same file are not ours to judge
            name = (
                (document.get("metadata") or {}).get("name", f"document {index}")
                if isinstance(document, dict)
                else f"document {index}"
            )
            errors = api.validation_errors(document)
            for message in errors:
                typer.echo(f"{path} ({name}): {message}", err=True)
            if errors:
                invalid += 1
            else:
                typer.echo(f"{path} ({name}): valid")
    raise typer.Exit(1 if invalid else 0)


def main() -> None:
    app(prog_name="specfleet")


if __name__ == "__main__":
    main()
