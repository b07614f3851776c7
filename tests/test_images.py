"""The operator and runtime images, built here without a daemon (e2e/images.py) and run
with runc: what each holds, whom it runs as, and what must never be in a layer."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from packaging.utils import canonicalize_name

from e2e import images, locks, oci, sbom
from specfleet.operator.api import Runtime
from tests.conftest import REPO

# Pulled bytes (config and compressed layers); the Debian base is ~78 MB of each.
SIZE_BUDGET = {images.OPERATOR.name: 130e6, images.RUNTIME.name: 100e6}
PRIVATE_KEY = re.compile(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----")
SECRET_FILES = re.compile(
    r"(^|/)(\.netrc|\.pypirc|pip\.conf|\.git-credentials|id_rsa|id_ed25519|\.dockercfg"
    r"|\.docker/config\.json|[^/]*\.kubeconfig|token)$"
)
# This machine's own CAs (its HTTPS goes through them): in the build, never in an image.
HOST_CAS = sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt"))


@pytest.fixture(scope="module")
def layout() -> Path:
    return images.build_all()


def _layers(layout: Path, image: images.Image) -> Iterator[tarfile.TarFile]:
    for layer in oci.manifest(layout, image.ref)["layers"]:
        algorithm, _, digest = layer["digest"].partition(":")
        with (
            gzip.open(layout / "blobs" / algorithm / digest) as stream,
            tarfile.open(fileobj=stream, mode="r|") as archive,
        ):
            yield archive


def _pem_bodies(path: Path) -> list[bytes]:
    text = path.read_bytes()
    return [b for b in re.findall(rb"-----BEGIN CERTIFICATE-----\n(.+?)\n-----END", text, re.S)]


def test_operator_image_runs_specfleet_operator_as_65532(layout: Path) -> None:
    config = oci.image_config(layout, images.OPERATOR.ref)
    assert config["Entrypoint"] == ["specfleet", "operator"]
    assert config["User"] == "65532:65532"
    probe = (
        "import getpass, os; print(os.getuid(), os.getgid(), getpass.getuser()); open('/x', 'w')"
    )
    spec = oci.ContainerSpec(command=["python3", "-c", probe], readonly_root=True)
    with pytest.raises(RuntimeError, match="Read-only file system") as failed:
        images.run_once(images.OPERATOR, spec)
    assert "65532 65532 specfleet" in str(failed.value)


def test_operator_entrypoint_needs_no_shell_and_no_writable_root(layout: Path) -> None:
    spec = oci.ContainerSpec(args=["--help"], readonly_root=True, drop_all_capabilities=True)
    assert "--metrics-port" in images.run_once(images.OPERATOR, spec)


def test_runtime_image_serves_the_sim_and_holds_no_operator(layout: Path) -> None:
    config = oci.image_config(layout, images.RUNTIME.ref)
    assert config["Entrypoint"] == ["specfleet-runtime", "serve"]
    modules = ("specfleet.operator", "kopf", "kubernetes")
    probe = f"import importlib.util as u; print([u.find_spec(m) for m in {modules}])"
    spec = oci.ContainerSpec(command=["python3", "-c", probe], readonly_root=True)
    assert images.run_once(images.RUNTIME, spec).strip() == "[None, None, None]"
    assert "vllm:generation_tokens_total" in images.serve_sim_metrics()


def test_the_chart_and_the_api_name_the_images_built(layout: Path) -> None:
    chart = yaml.safe_load((REPO / "charts" / "specfleet" / "Chart.yaml").read_text())
    values = yaml.safe_load((REPO / "charts" / "specfleet" / "values.yaml").read_text())
    assert f"{values['image']['repository']}:{chart['appVersion']}" == images.OPERATOR.ref
    assert Runtime().image == images.RUNTIME.ref


@pytest.mark.parametrize("image", images.IMAGES, ids=lambda image: image.name)
def test_no_layer_holds_the_host_ca_or_a_secret(layout: Path, image: images.Image) -> None:
    host_cas = [body for path in HOST_CAS for body in _pem_bodies(path)]
    assert host_cas, "no host CA to look for: the check would prove nothing"
    found = []
    for archive in _layers(layout, image):
        for member in archive:
            if SECRET_FILES.search(member.name) and member.isfile():
                found.append(f"{member.name}: a credentials file")
            if not member.isfile() or member.size > 2_000_000:
                continue
            content = archive.extractfile(member)
            data = content.read() if content else b""
            if PRIVATE_KEY.search(data):
                found.append(f"{member.name}: a private key")
            if any(ca in data for ca in host_cas):
                found.append(f"{member.name}: this machine's CA")
    assert found == []
    env = " ".join(oci.image_config(layout, image.ref).get("Env", []))
    assert not re.search(r"TOKEN|SECRET|PASSWORD|CERT", env), env


@pytest.mark.parametrize("image", images.IMAGES, ids=lambda image: image.name)
def test_image_size_stays_in_budget(layout: Path, image: images.Image) -> None:
    size = oci.compressed_size(layout, image.ref)
    print(f"{image.ref}: {size / 1e6:.0f} MB compressed")
    assert size < SIZE_BUDGET[image.name], f"{image.ref} is {size / 1e6:.0f} MB"


def test_skopeo_copies_from_the_layout_as_docs_install_says(layout: Path, tmp_path: Path) -> None:
    # docs/install.md publishes with `skopeo copy oci:LAYOUT:NAME docker://...`; no registry
    # runs here, so the same source goes to a directory, and the manifest arrives intact.
    destination = tmp_path / "copy"
    subprocess.run(
        ["skopeo", "copy", "-q", f"oci:{layout}:{images.OPERATOR.ref}", f"dir:{destination}"],
        check=True,
        timeout=120,
    )
    copied = json.loads((destination / "manifest.json").read_text())
    assert copied["layers"] == oci.manifest(layout, images.OPERATOR.ref)["layers"]


def _venv_distributions(layout: Path, image: images.Image) -> dict[str, str]:
    rootfs = oci.unpacked(layout, image.ref, images.UNPACKED) / "rootfs"
    return {
        str(canonicalize_name(d.name)): d.version
        for d in sbom.python_distributions(rootfs)
        if d.location.startswith("/opt/specfleet/")
    }


@pytest.mark.parametrize("image", images.IMAGES, ids=lambda image: image.name)
def test_the_image_holds_what_its_lock_pins_and_nothing_else(
    layout: Path, image: images.Image
) -> None:
    """The venv holds each pin of the image's lock at its version (pip included, replacing
    the venv's own); beside them only the projects themselves, from source."""
    lock = {str(name): pin.version for name, pin in locks.read(_lock(image)).items()}
    installed = _venv_distributions(layout, image)
    assert {name: installed.get(name) for name in lock} == lock
    ours = {str(locks.distribution(project)) for project in _lock(image).projects}
    assert set(installed) - set(lock) == ours


def _lock(image: images.Image) -> locks.Lock:
    return {lock.image: lock for lock in locks.LOCKS}[image.name]


@pytest.mark.parametrize("image", images.IMAGES, ids=lambda image: image.name)
def test_the_sbom_lists_the_image_as_built(layout: Path, image: images.Image) -> None:
    """Its SBOM (beside the layout) is of this very image, by digest, and lists its
    Python distributions at the lock's versions and Debian's python3 with the rest of
    the base's packages."""
    document = json.loads(image.sbom.read_text())
    digest = oci.manifest_digest(layout, image.ref)
    assert document["bomFormat"] == "CycloneDX"
    assert document["metadata"]["component"]["version"] == digest
    listed = {(c["purl"].split("/")[0], c["name"]): c["version"] for c in document["components"]}
    pins = locks.read(_lock(image))
    assert listed[("pkg:pypi", "aiohttp")] == pins[canonicalize_name("aiohttp")].version
    python3 = listed[("pkg:deb", "python3")]
    assert python3.startswith("3.11."), python3
    assert ("pkg:deb", "libc6") in listed and ("pkg:deb", "ca-certificates") in listed
    assert ("pkg:pypi", "specfleet-runtime") in listed


def test_images_are_recorded_with_the_base_by_digest(layout: Path) -> None:
    """images.json names the base by the digest the builds used; each image carries it as
    the OCI annotation of its base, and is recorded by its own digest."""
    record = json.loads(images.RECORD.read_text())
    base = record["base"]["digest"]
    assert base == images.base_digest()
    for image in images.IMAGES:
        manifest = oci.manifest(layout, image.ref)
        annotations = manifest.get("annotations", {})
        assert annotations.get("org.opencontainers.image.base.digest") == base
        assert record["images"][image.name]["digest"] == oci.manifest_digest(layout, image.ref)
