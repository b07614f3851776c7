"""The images' SBOM (e2e/sbom.py) from a tiny synthetic root filesystem: what a venv's
dist-info and dpkg's status hold, and nothing else, in CycloneDX 1.5."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e import sbom

DIGEST = "sha256:" + "ab" * 32
REF = "ghcr.io/specfleet/operator:0.1.0"

STATUS = """\
Package: python3.11-minimal
Status: install ok installed
Priority: important
Architecture: amd64
Version: 3.11.2-6+deb12u6
Description: Minimal subset of the Python language
 (version 3.11), a continuation line.

Package: libc6
Status: install ok installed
Architecture: amd64
Source: glibc
Version: 2.36-9+deb12u13

Package: removed-one
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: epoch-one
Status: install ok installed
Architecture: all
Version: 1:2.0-1
"""


def _dist(site: Path, name: str, version: str, *headers: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    body = ["Metadata-Version: 2.4", f"Name: {name}", f"Version: {version}", *headers]
    (info / "METADATA").write_text("\n".join(body) + "\n\nThe long description.\n")


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    root = tmp_path / "rootfs"
    site = root / "opt" / "specfleet" / "lib" / "python3.11" / "site-packages"
    _dist(site, "aiohttp", "3.14.5", "License-Expression: Apache-2.0 AND MIT")
    _dist(site, "PyYAML", "6.0.4", "License: MIT")
    _dist(
        site,
        "typing_extensions",
        "4.16.0",
        "License: " + "A very long license text. " * 10,
        "Classifier: License :: OSI Approved :: Python Software Foundation License",
    )
    _dist(site, "no-license", "1.0")
    # Not a distribution: a dist-info outside any site-packages, one without a version.
    _dist(root / "usr" / "share" / "elsewhere", "stray", "9.9")
    (site / "broken-1.0.dist-info").mkdir()
    (site / "broken-1.0.dist-info" / "METADATA").write_text("Name: broken\n")
    dpkg = root / "var" / "lib" / "dpkg"
    dpkg.mkdir(parents=True)
    (dpkg / "status").write_text(STATUS)
    (root / "etc").mkdir()
    (root / "etc" / "os-release").write_text('NAME="Debian GNU/Linux"\nVERSION_ID="12"\n')
    return root


def _by_name(document: dict[str, object]) -> dict[str, dict[str, object]]:
    components = document["components"]
    assert isinstance(components, list)
    return {str(c["name"]): c for c in components}


def test_python_distributions_come_from_site_packages_dist_info(rootfs: Path) -> None:
    found = _by_name(sbom.document(rootfs, REF, DIGEST))
    assert found["aiohttp"]["purl"] == "pkg:pypi/aiohttp@3.14.5"
    assert found["aiohttp"]["licenses"] == [{"expression": "Apache-2.0 AND MIT"}]
    assert found["PyYAML"]["purl"] == "pkg:pypi/pyyaml@6.0.4"
    assert found["PyYAML"]["licenses"] == [{"license": {"name": "MIT"}}]
    # A License field that is the text: the classifier names it instead.
    assert found["typing_extensions"]["licenses"] == [
        {"license": {"name": "Python Software Foundation License"}}
    ]
    assert "licenses" not in found["no-license"]
    assert found["aiohttp"]["properties"] == [
        {"name": "specfleet:location", "value": "/opt/specfleet/lib/python3.11/site-packages"}
    ]
    assert "stray" not in found and "broken" not in found


def test_debian_packages_come_from_dpkg_status_installed_only(rootfs: Path) -> None:
    found = _by_name(sbom.document(rootfs, REF, DIGEST))
    assert found["python3.11-minimal"]["version"] == "3.11.2-6+deb12u6"
    assert found["python3.11-minimal"]["purl"] == (
        "pkg:deb/debian/python3.11-minimal@3.11.2-6+deb12u6?arch=amd64&distro=debian-12"
    )
    assert (
        found["epoch-one"]["purl"] == "pkg:deb/debian/epoch-one@1%3A2.0-1?arch=all&distro=debian-12"
    )
    assert "libc6" in found
    assert "removed-one" not in found


def test_the_document_is_cyclonedx_for_the_image_and_the_same_each_time(
    rootfs: Path, tmp_path: Path
) -> None:
    document = sbom.document(rootfs, REF, DIGEST)
    assert document["bomFormat"] == "CycloneDX"
    assert document["specVersion"] == "1.5"
    metadata = document["metadata"]
    assert isinstance(metadata, dict)
    assert metadata["component"]["type"] == "container"
    assert metadata["component"]["version"] == DIGEST
    assert metadata["component"]["purl"] == (
        "pkg:oci/operator@sha256%3A"
        + "ab" * 32
        + "?repository_url=ghcr.io/specfleet/operator&tag=0.1.0"
    )
    names = [c["name"] for c in document["components"]]
    assert len(names) == 4 + 3
    refs = [c["bom-ref"] for c in document["components"]]
    assert refs == sorted(refs) and len(set(refs)) == len(refs)
    first = sbom.write(rootfs, REF, DIGEST, tmp_path / "a.cdx.json").read_bytes()
    second = sbom.write(rootfs, REF, DIGEST, tmp_path / "b.cdx.json").read_bytes()
    assert first == second
    assert json.loads(first)["serialNumber"].startswith("urn:uuid:")


def test_a_rootfs_without_dpkg_lists_only_python(rootfs: Path) -> None:
    (rootfs / "var" / "lib" / "dpkg" / "status").unlink()
    kinds = {c.kind for c in sbom.components(rootfs)}
    assert kinds == {"pypi"}
