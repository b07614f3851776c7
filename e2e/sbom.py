"""A CycloneDX (1.5, JSON) SBOM of an image, from what its unpacked root filesystem holds.

- Python distributions: every `*.dist-info/METADATA` under a `site-packages` or
  `dist-packages` directory (the venv's and the system's): name, version, license (its
  License-Expression, a short License field, or its "License ::" classifiers), as
  `pkg:pypi` purls;
- Debian packages: `var/lib/dpkg/status`, those installed, as `pkg:deb/debian` purls with
  their architecture and the release of `etc/os-release`. Their licenses live in
  /usr/share/doc/*/copyright, which the images leave out, so none is given.

Read from the files, never by running anything in the image, and the same for the same
files: components sorted, the serial number derived from the image's digest, no clock.
`make images` (e2e/images.py) writes one beside the OCI layout for each image it builds.
"""

from __future__ import annotations

import argparse
import email.parser
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

SPEC_VERSION = "1.5"
# The namespace of the serial numbers (uuid5 of the image's digest in it).
SERIAL_NAMESPACE = uuid.UUID("6f1b0f4e-3c52-4a57-9a8e-5a9d0c2f7e11")
# A License field longer than this is the license's text, not its name.
MAX_LICENSE_NAME = 100


@dataclass(frozen=True, order=True)
class Component:
    purl: str
    name: str
    version: str
    kind: str  # "pypi" or "deb"
    # An SPDX expression (a distribution's License-Expression), else license names.
    license_expression: str = ""
    license_names: tuple[str, ...] = ()
    location: str = ""

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "type": "library",
            "bom-ref": self.purl,
            "name": self.name,
            "version": self.version,
            "purl": self.purl,
        }
        if self.license_expression:
            entry["licenses"] = [{"expression": self.license_expression}]
        elif self.license_names:
            entry["licenses"] = [{"license": {"name": name}} for name in self.license_names]
        if self.location:
            entry["properties"] = [{"name": "specfleet:location", "value": self.location}]
        return entry


def python_distributions(rootfs: Path) -> list[Component]:
    found = []
    parser = email.parser.Parser()
    for metadata in sorted(rootfs.glob("**/*-packages/*.dist-info/METADATA")):
        if metadata.is_symlink():
            continue
        headers = parser.parsestr(metadata.read_text(errors="replace"), headersonly=True)
        name, version = headers.get("Name"), headers.get("Version")
        if not name or not version:
            continue
        found.append(
            Component(
                purl=f"pkg:pypi/{canonicalize_name(name)}@{version}",
                name=name,
                version=version,
                kind="pypi",
                license_expression=(headers.get("License-Expression") or "").strip(),
                license_names=_license_names(headers),
                location="/" + str(metadata.parent.parent.relative_to(rootfs)),
            )
        )
    return found


def _license_names(headers: email.message.Message) -> tuple[str, ...]:
    """The License field when it names the license (not its text), else the "License ::"
    classifiers' names."""
    field = (headers.get("License") or "").strip()
    if (
        field
        and field.upper() != "UNKNOWN"
        and len(field) <= MAX_LICENSE_NAME
        and "\n" not in field
    ):
        return (field,)
    classifiers = headers.get_all("Classifier") or []
    return tuple(
        classifier.split("::")[-1].strip()
        for classifier in classifiers
        if classifier.startswith("License ::") and classifier.count("::") >= 2
    )


def _paragraphs(text: str) -> list[dict[str, str]]:
    paragraphs: list[dict[str, str]] = []
    current: dict[str, str] = {}
    key = ""
    for line in text.splitlines():
        if not line.strip():
            if current:
                paragraphs.append(current)
            current, key = {}, ""
        elif line[0] in " \t":
            if key:
                current[key] += "\n" + line.strip()
        else:
            key, _, value = line.partition(":")
            current[key] = value.strip()
    if current:
        paragraphs.append(current)
    return paragraphs


def os_release(rootfs: Path) -> dict[str, str]:
    for path in (rootfs / "etc" / "os-release", rootfs / "usr" / "lib" / "os-release"):
        if path.exists():
            pairs = (line.partition("=") for line in path.read_text().splitlines())
            return {key: value.strip().strip('"') for key, _, value in pairs if key}
    return {}


def debian_packages(rootfs: Path) -> list[Component]:
    status = rootfs / "var" / "lib" / "dpkg" / "status"
    if not status.exists():
        return []
    release = os_release(rootfs)
    distro = f"debian-{release['VERSION_ID']}" if release.get("VERSION_ID") else ""
    found = []
    for package in _paragraphs(status.read_text(errors="replace")):
        if package.get("Status", "").split()[-1:] != ["installed"]:
            continue
        name, version = package["Package"], package["Version"]
        qualifiers = [f"arch={package['Architecture']}"] if package.get("Architecture") else []
        if distro:
            qualifiers.append(f"distro={distro}")
        purl = f"pkg:deb/debian/{name}@{version.replace(':', '%3A')}"
        if qualifiers:
            purl += "?" + "&".join(qualifiers)
        found.append(Component(purl=purl, name=name, version=version, kind="deb"))
    return found


def components(rootfs: Path) -> list[Component]:
    return sorted(set(python_distributions(rootfs) + debian_packages(rootfs)))


def document(rootfs: Path, ref: str, digest: str) -> dict[str, Any]:
    """The SBOM of the image `ref` (manifest digest `digest`) unpacked at `rootfs`."""
    repository, _, tag = ref.rpartition(":")
    image_purl = f"pkg:oci/{repository.rpartition('/')[2]}@{digest.replace(':', '%3A')}"
    image_purl += f"?repository_url={repository}&tag={tag}"
    return {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": f"urn:uuid:{uuid.uuid5(SERIAL_NAMESPACE, digest)}",
        "version": 1,
        "metadata": {
            "tools": {"components": [{"type": "application", "name": "specfleet e2e/sbom.py"}]},
            "component": {
                "type": "container",
                "bom-ref": image_purl,
                "name": repository,
                "version": digest,
                "purl": image_purl,
            },
        },
        "components": [component.to_json() for component in components(rootfs)],
    }


def write(rootfs: Path, ref: str, digest: str, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(document(rootfs, ref, digest), indent=2) + "\n")
    partial.rename(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("rootfs", type=Path)
    parser.add_argument("--ref", required=True, help="the image's name and tag")
    parser.add_argument("--digest", required=True, help="its manifest digest, sha256:...")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    write(args.rootfs, args.ref, args.digest, args.output)


if __name__ == "__main__":
    main()
