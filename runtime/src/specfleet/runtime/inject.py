"""`specfleet-runtime inject DIR`: copy this runtime into DIR, for an image without it.

An init container of the specfleet-runtime image runs it into a volume the serving
container (e.g. the official vllm/vllm-openai image) shares; that container runs
`python3 -m specfleet.runtime.cli serve` with DIR on PYTHONPATH. The distribution's
metadata goes along, so vLLM still finds the runtime's plugin (its entry point) there.
The runtime's own dependencies (pydantic, PyYAML, aiohttp, prometheus-client) are
vLLM's too, so only the package is copied.
"""

from __future__ import annotations

import importlib.metadata
import shutil
from pathlib import Path

DISTRIBUTION = "specfleet-runtime"
PACKAGE = Path(__file__).resolve().parent  # .../specfleet/runtime


def inject(target: Path) -> list[Path]:
    """Copy the package and its distribution metadata under `target`; the paths written."""
    package = target / "specfleet" / "runtime"
    if package.exists():
        shutil.rmtree(package)
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    written = [package]
    metadata = _metadata_directory()
    if metadata is not None:
        copied = target / metadata.name
        if copied.exists():
            shutil.rmtree(copied)
        # Only the metadata: RECORD and direct_url.json describe the installation copied from.
        shutil.copytree(
            metadata, copied, ignore=shutil.ignore_patterns("RECORD", "direct_url.json")
        )
        written.append(copied)
    return written


def _metadata_directory() -> Path | None:
    """The installed distribution's .dist-info directory, if it is installed."""
    try:
        distribution = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in distribution.files or []:
        if file.parts[0].endswith(".dist-info"):
            return Path(str(distribution.locate_file(file.parts[0])))
    return None
