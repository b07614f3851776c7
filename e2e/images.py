"""`make images`: the operator and runtime images, built without a Docker daemon.

- a base: Debian bookworm with python3 from Debian's packages (mmdebstrap), imported
  into buildah's local storage once and passed to both Dockerfiles as `ARG BASE`;
- `buildah bud --layers --isolation chroot` of operator/Dockerfile and runtime/Dockerfile
  (the runtime on that small base, without vLLM: enough for the simulated engine; the
  release builds it on vLLM's image, docs/install.md). pip inside the build reaches PyPI
  through this machine's own CA, mounted read-only for the build and never a layer;
- `buildah push` into a cached OCI layout (~/.cache/specfleet/images/oci), each image
  under its full name, where the node agent and the tests find it;
- a smoke run of each entrypoint with runc (`--help`; the runtime also serves the
  simulated engine and answers /metrics), and the sizes;
- the base passed to the Dockerfiles by its digest, as a release passes its own, and
  recorded with each image's digest in images.json beside the layout (the images also
  carry it as the OCI annotation org.opencontainers.image.base.digest);
- a CycloneDX SBOM of each image from its unpacked contents (e2e/sbom.py), in sbom/
  beside the layout. Nothing is signed here: that needs a key and a registry
  (docs/security.md#supply-chain).

Unchanged inputs rebuild from buildah's layer cache in seconds. One build at a time per
cache (a flock), as for the control plane. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e import oci, sbom
from e2e.real_engine import free_port

REPO = Path(__file__).resolve().parent.parent
VERSION = importlib.metadata.version("specfleet-operator")
REGISTRY = "ghcr.io/specfleet"
CACHE = Path(os.environ.get("SPECFLEET_CACHE", Path.home() / ".cache" / "specfleet")) / "images"
LAYOUT = CACHE / "oci"
UNPACKED = CACHE / "unpacked"
SBOMS = CACHE / "sbom"
RECORD = CACHE / "images.json"
BASE_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
BASE_IMAGE = f"localhost/specfleet/base:{BASE_SUITE}"
BASE_KEY_LABEL = "io.specfleet.base-key"
# This machine's CA bundle (its HTTPS goes through its own CA): mounted for pip at build
# time only. The image test proves no layer holds it.
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
NON_ROOT = (65532, 65532)


@dataclass(frozen=True)
class Image:
    name: str
    build_args: dict[str, str] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        return f"{REGISTRY}/{self.name}:{VERSION}"

    @property
    def dockerfile(self) -> Path:
        return REPO / self.name / "Dockerfile"

    @property
    def sbom(self) -> Path:
        return SBOMS / f"{self.name}.cdx.json"


OPERATOR = Image("operator")
RUNTIME = Image("runtime", {"EXPECT_VLLM": "0"})
IMAGES = (OPERATOR, RUNTIME)


def log(message: str) -> None:
    print(f"[images] {message}", file=sys.stderr, flush=True)


def _run(*argv: str, timeout: float = 1800) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} ... failed:\n{result.stderr.strip()[-3000:]}")
    return result.stdout


def _image_id(ref: str) -> str | None:
    result = subprocess.run(
        ["buildah", "images", "--no-trunc", "--format", "{{.ID}}", ref],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip() or None if result.returncode == 0 else None


def _label(ref: str, name: str) -> str | None:
    template = f'{{{{index .OCIv1.Config.Labels "{name}"}}}}'
    result = subprocess.run(
        ["buildah", "inspect", "--type", "image", "--format", template, ref],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip() or None if result.returncode == 0 else None


def base_digest() -> str:
    """The digest of the base's manifest in buildah's storage (sha256:...)."""
    digest = _run(
        "buildah", "images", "--digests", "--no-trunc", "--format", "{{.Digest}}", BASE_IMAGE
    ).split()
    if len(digest) != 1 or not digest[0].startswith("sha256:"):
        raise RuntimeError(f"no single digest for {BASE_IMAGE}: {digest}")
    return digest[0]


def base_ref(digest: str) -> str:
    """The base by digest, as the Dockerfiles' BASE: what a release passes for its own."""
    return f"{BASE_IMAGE.rpartition(':')[0]}@{digest}"


def base() -> str:
    """The Debian base in buildah's storage, from a cached mmdebstrap root filesystem;
    returns its digest."""
    recipe = f"mmdebstrap --variant=apt {BASE_SUITE} {','.join(BASE_PACKAGES)}"
    key = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    tarball = CACHE / f"base-{BASE_SUITE}-{key}.tar"
    if not tarball.exists():
        log(f"base: {recipe} (Debian packages; about a minute, once)")
        started = time.monotonic()
        partial = tarball.with_suffix(".partial.tar")
        _run(
            "mmdebstrap",
            "--quiet",
            "--variant=apt",
            f"--include={','.join(BASE_PACKAGES)}",
            # Documentation and translations are dead weight in an image.
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            BASE_SUITE,
            str(partial),
        )
        partial.rename(tarball)
        log(f"base: root filesystem in {time.monotonic() - started:.0f} s")
    if _label(BASE_IMAGE, BASE_KEY_LABEL) == key:
        return base_digest()
    log(f"base: importing {tarball.name} as {BASE_IMAGE}")
    container = _run("buildah", "from", "scratch").strip()
    try:
        _run("buildah", "add", "--quiet", container, str(tarball), "/")
        _run("buildah", "config", "--label", f"{BASE_KEY_LABEL}={key}", container)
        _run("buildah", "commit", "--quiet", container, BASE_IMAGE)
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
    return base_digest()


def build(image: Image, base_digest: str) -> None:
    """Build `image` into buildah's storage and put it in the OCI layout if it changed."""
    started = time.monotonic()
    log(f"{image.name}: buildah bud -f {image.dockerfile.relative_to(REPO)} -> {image.ref}")
    argv = [
        "buildah",
        "bud",
        "--quiet",
        "--layers",
        "--isolation",
        "chroot",
        "--force-rm",
        "--pull=never",
        "--build-arg",
        f"BASE={base_ref(base_digest)}",
        "--annotation",
        f"org.opencontainers.image.base.name={BASE_IMAGE}",
        "--annotation",
        f"org.opencontainers.image.base.digest={base_digest}",
        "--volume",
        f"{HOST_CA}:{HOST_CA}:ro",
        "--file",
        str(image.dockerfile),
        "--tag",
        image.ref,
    ]
    for name, value in {**image.build_args, **_bound_source_keys(image)}.items():
        argv += ["--build-arg", f"{name}={value}"]
    _run(*argv, str(REPO))
    # The base's digest too: the annotations naming it are in the manifest, not the image.
    pushed = f"{_image_id(image.ref)} {base_digest}"
    stamp = CACHE / "pushed" / image.name
    if stamp.exists() and stamp.read_text() == pushed and _in_layout(image.ref):
        log(f"{image.name}: unchanged ({time.monotonic() - started:.1f} s)")
        return
    _run("buildah", "push", "--quiet", image.ref, f"oci:{LAYOUT}:{image.ref}")
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(pushed)
    log(f"{image.name}: built and stored in {time.monotonic() - started:.0f} s")


def _bound_source_keys(image: Image) -> dict[str, str]:
    """SOURCE_KEY for a Dockerfile that bind-mounts its image's directory into a RUN:
    buildah's layer cache does not look inside a bind mount, so without the hash of what
    it holds a changed source would reuse the layer built from the old one."""
    if "ARG SOURCE_KEY" not in image.dockerfile.read_text():
        return {}
    digest = hashlib.sha256()
    for path in sorted((REPO / image.name).rglob("*")):
        parts = set(path.relative_to(REPO).parts)
        if path.is_file() and not parts & {"__pycache__", "build"} and ".egg-info" not in str(path):
            digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return {"SOURCE_KEY": digest.hexdigest()[:16]}


def _in_layout(ref: str) -> bool:
    try:
        oci.manifest_digest(LAYOUT, ref)
    except oci.ImageNotFound:
        return False
    return True


@dataclass(frozen=True)
class BinaryImage:
    """An image of one static executable built here (alone, from scratch), for the pods
    the tests run but specfleet does not ship: Prometheus and prometheus-operator's
    config reloader."""

    ref: str
    executable: Path

    @property
    def entrypoint(self) -> str:
        return f"/bin/{self.executable.name}"


# Tagged under localhost/: images made here, not the upstream projects' own.
PROMETHEUS_REF = "localhost/specfleet-e2e/prometheus:v3.5.0"
CONFIG_RELOADER_REF = "localhost/specfleet-e2e/prometheus-config-reloader:v0.85.0"


def monitoring_images(built: Path) -> list[BinaryImage]:
    """Prometheus and the config reloader, from `cluster.build_monitoring()`'s bin/."""
    return [
        BinaryImage(PROMETHEUS_REF, built / "bin" / "prometheus"),
        BinaryImage(CONFIG_RELOADER_REF, built / "bin" / "prometheus-config-reloader"),
    ]


def build_binary_image(image: BinaryImage) -> None:
    """Copy the executable into its base as a non-root (nobody) entrypoint, once per
    executable content."""
    with oci.locked(CACHE / ".lock"):
        key = hashlib.sha256(image.executable.read_bytes()).hexdigest()[:12]
        stamp = CACHE / "pushed" / image.ref.replace("/", "_")
        if stamp.exists() and stamp.read_text() == key and _in_layout(image.ref):
            return
        log(f"{image.ref}: {image.executable}")
        container = _run("buildah", "from", "scratch").strip()
        try:
            _run("buildah", "copy", "--quiet", container, str(image.executable), image.entrypoint)
            _run(
                "buildah",
                "config",
                f'--entrypoint=["{image.entrypoint}"]',
                "--user=65534:65534",
                container,
            )
            _run("buildah", "commit", "--quiet", container, image.ref)
        finally:
            subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
        _run("buildah", "push", "--quiet", image.ref, f"oci:{LAYOUT}:{image.ref}")
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(key)


def run_once(image: Image, spec: oci.ContainerSpec, timeout: float = 120) -> str:
    """Run `image` once with runc; its output, or an error with it."""
    with tempfile.TemporaryDirectory(prefix=f"specfleet-{image.name}-") as scratch:
        result = oci.run(LAYOUT, image.ref, UNPACKED, Path(scratch), spec, timeout)
    if result.returncode != 0:
        raise RuntimeError(
            f"{image.ref} exited {result.returncode}: {(result.stdout + result.stderr)[-2000:]}"
        )
    return result.stdout


def serve_sim_metrics(timeout: float = 60) -> str:
    """Start the runtime image's `serve --engine sim` with runc and return its /metrics."""
    port = free_port()
    spec = oci.ContainerSpec(
        args=["--model", "smoke", "--engine", "sim", "--host", "127.0.0.1", f"--port={port}"],
        user=NON_ROOT,
        readonly_root=True,
        drop_all_capabilities=True,
    )
    with tempfile.TemporaryDirectory(prefix="specfleet-runtime-serve-") as scratch:
        bundle = Path(scratch)
        oci.prepare(LAYOUT, RUNTIME.ref, UNPACKED, bundle, spec)
        state = bundle / "runc"
        process = subprocess.Popen(
            oci.run_argv(state, bundle, bundle.name),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    output = process.stdout.read().decode() if process.stdout else ""
                    raise RuntimeError(f"the runtime image exited {process.returncode}: {output}")
                try:
                    with urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/metrics", timeout=2
                    ) as reply:
                        return str(reply.read().decode())
                except OSError:
                    time.sleep(0.3)
            raise TimeoutError(f"the runtime image did not answer /metrics in {timeout:.0f} s")
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            oci.delete(state, bundle.name)


def smoke() -> None:
    """Each entrypoint runs as the image's own non-root user on a read-only root."""
    checks = oci.ContainerSpec(args=["--help"], readonly_root=True, drop_all_capabilities=True)
    for image in IMAGES:
        output = run_once(image, checks)
        if "Usage" not in output and "usage" not in output:
            raise RuntimeError(f"{image.ref} --help printed no usage: {output[-500:]}")
        log(f"{image.name}: --help ran")
    page = serve_sim_metrics()
    if "vllm:generation_tokens_total" not in page:
        raise RuntimeError(f"the runtime image's /metrics has no vLLM series: {page[:500]}")
    log("runtime: serve --engine sim answered /metrics")


def sizes() -> list[tuple[str, int, int]]:
    """(image, compressed bytes, unpacked bytes) for each image."""
    rows = []
    for image in IMAGES:
        rootfs = oci.unpacked(LAYOUT, image.ref, UNPACKED) / "rootfs"
        unpacked = int(_run("du", "-sb", str(rootfs)).split()[0])
        rows.append((image.ref, oci.compressed_size(LAYOUT, image.ref), unpacked))
    return rows


def record(base_digest: str) -> dict[str, Any]:
    """What `make images` made, by digest: the base and each image with its SBOM. Written
    to images.json beside the layout."""
    built = {
        "base": {"ref": BASE_IMAGE, "digest": base_digest, "packages": list(BASE_PACKAGES)},
        "images": {
            image.name: {
                "ref": image.ref,
                "digest": oci.manifest_digest(LAYOUT, image.ref),
                "sbom": str(image.sbom),
            }
            for image in IMAGES
        },
    }
    RECORD.write_text(json.dumps(built, indent=2) + "\n")
    return built


def write_sboms() -> None:
    """Each image's SBOM from its unpacked root filesystem (e2e/sbom.py)."""
    for image in IMAGES:
        rootfs = oci.unpacked(LAYOUT, image.ref, UNPACKED) / "rootfs"
        sbom.write(rootfs, image.ref, oci.manifest_digest(LAYOUT, image.ref), image.sbom)


def build_all() -> Path:
    """Both images, built (or found unchanged) and in the OCI layout, each with its SBOM,
    recorded by digest in images.json; returns the layout."""
    with oci.locked(CACHE / ".lock"):
        missing = [
            tool for tool in ("buildah", "mmdebstrap", "umoci", "runc") if not shutil.which(tool)
        ]
        if missing:
            subprocess.run([str(REPO / "e2e" / "install-debian-packages.sh")], check=True)
        digest = base()
        for image in IMAGES:
            build(image, digest)
        write_sboms()
        record(digest)
    return LAYOUT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-smoke", action="store_true", help="build only")
    args = parser.parse_args()
    started = time.monotonic()
    build_all()
    if not args.no_smoke:
        smoke()
    print(f"{'image':<40} {'compressed':>11} {'unpacked':>10}")
    for ref, compressed, unpacked in sizes():
        print(f"{ref:<40} {compressed / 1e6:>8.0f} MB {unpacked / 1e6:>7.0f} MB")
    built = json.loads(RECORD.read_text())
    print(f"{'base ' + BASE_IMAGE:<40} {built['base']['digest']}")
    for image in IMAGES:
        print(f"{image.ref:<40} {built['images'][image.name]['digest']}")
        print(f"{'':<40} SBOM: {image.sbom}")
    print(f"OCI layout: {LAYOUT}; record: {RECORD} ({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
