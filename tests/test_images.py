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

from e2e import images, oci
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
