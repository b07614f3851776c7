"""Run an image from a local OCI layout with runc, as a kubelet's container runtime would.

Shared by `make images` (smoke runs of the built images), the image tests and the node
agent (the chart's operator pod). The image is unpacked with umoci; its config.json (an
OCI runtime spec umoci derives from the image config) is then adjusted to what the pod
asks for: command and args with Kubernetes' rules against the image's entrypoint and
cmd, env, user, read-only root, capabilities, mounts, and the pod's network namespace
(the host's network when none is given: the smoke runs of `make images`).
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REF_ANNOTATION = "org.opencontainers.image.ref.name"


class ImageNotFound(LookupError):
    pass


@dataclass(frozen=True)
class Mount:
    source: Path
    destination: str
    readonly: bool = True


@dataclass
class ContainerSpec:
    """What a pod's container asks of its runtime, in Kubernetes' terms."""

    command: list[str] | None = None  # replaces the image's entrypoint
    args: list[str] | None = None  # replaces the image's cmd
    env: dict[str, str] = field(default_factory=dict)  # over the image's own
    user: tuple[int, int] | None = None  # None: the image's USER
    working_dir: str | None = None
    readonly_root: bool = False
    drop_all_capabilities: bool = False
    no_new_privileges: bool = True
    mounts: list[Mount] = field(default_factory=list)
    hostname: str = "container"
    network_namespace: Path | None = None  # joined, as a pod's containers join its sandbox's


def _blob(layout: Path, digest: str) -> dict[str, Any]:
    algorithm, _, value = digest.partition(":")
    return dict(json.loads((layout / "blobs" / algorithm / value).read_text()))


def manifest_digest(layout: Path, ref: str) -> str:
    """The digest of the manifest `ref` names in the layout's index."""
    try:
        index = json.loads((layout / "index.json").read_text())
    except FileNotFoundError:
        raise ImageNotFound(f"no OCI layout at {layout}") from None
    for entry in index.get("manifests", []):
        if entry.get("annotations", {}).get(REF_ANNOTATION) == ref:
            return str(entry["digest"])
    raise ImageNotFound(f"image {ref} is not in {layout}")


def manifest(layout: Path, ref: str) -> dict[str, Any]:
    return _blob(layout, manifest_digest(layout, ref))


def image_config(layout: Path, ref: str) -> dict[str, Any]:
    """The image's config (Entrypoint, Cmd, Env, User, ...)."""
    config = _blob(layout, manifest(layout, ref)["config"]["digest"])
    return dict(config.get("config") or {})


def compressed_size(layout: Path, ref: str) -> int:
    """Bytes a registry would store and a node would pull: config plus layers."""
    found = manifest(layout, ref)
    return int(found["config"]["size"]) + sum(int(layer["size"]) for layer in found["layers"])


@contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def unpacked(layout: Path, ref: str, cache: Path) -> Path:
    """The image unpacked once per manifest digest under `cache` (a umoci bundle whose
    rootfs containers with a read-only root share); returns the bundle directory."""
    digest = manifest_digest(layout, ref).replace(":", "-")
    bundle = cache / digest
    with locked(cache / f"{digest}.lock"):
        if not (bundle / "config.json").exists():
            shutil.rmtree(bundle, ignore_errors=True)
            unpack(layout, ref, bundle)
    return bundle


def unpack(layout: Path, ref: str, bundle: Path) -> None:
    result = subprocess.run(
        ["umoci", "unpack", "--image", f"{layout}:{ref}", str(bundle)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"umoci unpack {ref} failed: {result.stderr.strip()[-2000:]}")


def process_args(
    image: dict[str, Any], command: list[str] | None, args: list[str] | None
) -> list[str]:
    """Kubernetes' rule: command replaces ENTRYPOINT and drops CMD; args replace CMD."""
    entrypoint = command if command is not None else list(image.get("Entrypoint") or [])
    if args is not None:
        return entrypoint + args
    return entrypoint + ([] if command is not None else list(image.get("Cmd") or []))


def write_config(
    template: Path, bundle: Path, rootfs: Path, image: dict[str, Any], spec: ContainerSpec
) -> None:
    """Write bundle/config.json: umoci's spec at `template`, adjusted to `spec`."""
    config = json.loads(template.read_text())
    process = config["process"]
    process["terminal"] = False
    process["args"] = process_args(image, spec.command, spec.args)
    if not process["args"]:
        raise ValueError("the image has no entrypoint or cmd and the pod gives no command")
    env = dict(item.split("=", 1) for item in process.get("env", []))
    env.update(spec.env)
    process["env"] = [f"{k}={v}" for k, v in env.items()]
    if spec.user is not None:
        process["user"] = {"uid": spec.user[0], "gid": spec.user[1]}
    if spec.working_dir:
        process["cwd"] = spec.working_dir
    process["noNewPrivileges"] = spec.no_new_privileges
    if spec.drop_all_capabilities:
        process["capabilities"] = {key: [] for key in process.get("capabilities", {})}
    # A loaded host may hand out more files than umoci's default 1024; Python servers
    # want a few hundred sockets at most.
    process["rlimits"] = [{"type": "RLIMIT_NOFILE", "hard": 4096, "soft": 4096}]
    config["root"] = {"path": str(rootfs), "readonly": spec.readonly_root}
    config["hostname"] = spec.hostname
    config["linux"]["namespaces"] = [
        n for n in config["linux"]["namespaces"] if n["type"] != "network"
    ]
    if spec.network_namespace is not None:
        config["linux"]["namespaces"].append(
            {"type": "network", "path": str(spec.network_namespace)}
        )
    config["mounts"] += [
        {
            "destination": m.destination,
            "type": "bind",
            "source": str(m.source),
            "options": ["rbind", "ro" if m.readonly else "rw"],
        }
        for m in spec.mounts
    ]
    bundle.mkdir(parents=True, exist_ok=True)
    (bundle / "config.json").write_text(json.dumps(config, indent=1))


def prepare(layout: Path, ref: str, cache: Path, bundle: Path, spec: ContainerSpec) -> None:
    """A runc bundle for one container of `ref`: the shared unpacked rootfs when the root
    is read-only, a private copy of the image otherwise."""
    shared = unpacked(layout, ref, cache)
    if spec.readonly_root:
        rootfs = shared / "rootfs"
    else:
        private = bundle / "image"
        if not (private / "rootfs").exists():
            shutil.rmtree(private, ignore_errors=True)
            unpack(layout, ref, private)
        rootfs = private / "rootfs"
    write_config(shared / "config.json", bundle, rootfs, image_config(layout, ref), spec)


def run_argv(state: Path, bundle: Path, container_id: str) -> list[str]:
    """`runc run` in the foreground: it forwards signals to the container and exits with
    the container's status."""
    return ["runc", "--root", str(state), "run", "--bundle", str(bundle), container_id]


def delete(state: Path, container_id: str) -> None:
    """Remove what `runc run` leaves when it is killed itself (it cleans up otherwise)."""
    subprocess.run(
        ["runc", "--root", str(state), "delete", "--force", container_id],
        capture_output=True,
        check=False,
    )


def run(
    layout: Path,
    ref: str,
    cache: Path,
    bundle: Path,
    spec: ContainerSpec,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run one container to completion and return its output (for smoke runs and tests)."""
    prepare(layout, ref, cache, bundle, spec)
    state = bundle / "runc"
    container_id = bundle.name
    try:
        return subprocess.run(
            run_argv(state, bundle, container_id),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    finally:
        delete(state, container_id)
