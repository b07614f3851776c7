"""Pod settings (spec.runtime.pod, modelCache, injectRuntime, rollingUpdate): what they
render into the Deployments, restricted Pod Security by default, the start-up time
measured into status, the runtime's model cache report and its injection."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from specfleet.operator import podspec, render, runtime_container
from specfleet.operator.api import INJECTED_RUNTIME_PATH, MODEL_CACHE_PATH, SpeculativeModel
from specfleet.operator.children import TRACKS
from specfleet.operator.errors import validation_errors
from specfleet.operator.fleet import FleetCache
from specfleet.operator.status import summarize
from specfleet.runtime import preflight
from specfleet.runtime.inject import inject
from tests.conftest import REPO
from tests.test_render import example, model_from

PRODUCTION = REPO / "examples" / "production-llama-70b.yaml"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _with_runtime(manifest: dict[str, Any], **runtime: Any) -> SpeculativeModel:
    manifest["spec"]["runtime"].update(runtime)
    return model_from(manifest)


def _pod_spec(model: SpeculativeModel, track: str = "stable") -> dict[str, Any]:
    deployment = render.deployment(model, "stable" if track == "stable" else "canary")
    return dict(deployment["spec"]["template"]["spec"])


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {var["name"]: var.get("value") for var in container["env"]}


def test_pods_are_restricted_by_default(peagle_manifest: dict[str, Any]) -> None:
    """What Pod Security 'restricted' checks (k8s.io/pod-security-admission), on every
    container of both tracks, with writable temp and cache directories on volumes."""
    model = model_from(peagle_manifest)
    for track in ("stable", "canary"):
        spec = _pod_spec(model, track)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in spec["containers"] + spec.get("initContainers", []):
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"]["drop"] == ["ALL"]
        allowed = {"emptyDir", "persistentVolumeClaim", "secret", "configMap", "projected"}
        assert all(allowed & volume.keys() for volume in spec["volumes"])
        container = spec["containers"][0]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts["/tmp"] == "tmp" and mounts[MODEL_CACHE_PATH] == "model-cache"
        env = _env(container)
        assert env["HF_HOME"] == MODEL_CACHE_PATH and env["HOME"] == "/tmp"


def test_a_users_security_context_wins_field_by_field(peagle_manifest: dict[str, Any]) -> None:
    model = _with_runtime(
        peagle_manifest,
        pod={
            "securityContext": {"runAsUser": 2000},
            "containerSecurityContext": {"readOnlyRootFilesystem": True},
        },
    )
    spec = _pod_spec(model)
    assert spec["securityContext"]["runAsUser"] == 2000
    assert spec["securityContext"]["runAsNonRoot"] is True
    security = spec["containers"][0]["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}


def test_model_cache_sources(peagle_manifest: dict[str, Any]) -> None:
    def cache_volume(model_cache: dict[str, Any]) -> dict[str, Any]:
        model = _with_runtime(dict(peagle_manifest), modelCache=model_cache)
        return next(v for v in _pod_spec(model)["volumes"] if v["name"] == "model-cache")

    assert cache_volume({}) == {"name": "model-cache", "emptyDir": {"sizeLimit": "100Gi"}}
    assert cache_volume({"sizeLimit": "40Gi"})["emptyDir"] == {"sizeLimit": "40Gi"}
    assert cache_volume({"claimName": "hub", "readOnly": True}) == {
        "name": "model-cache",
        "persistentVolumeClaim": {"claimName": "hub", "readOnly": True},
    }
    assert cache_volume({"hostPath": "/mnt/hub"})["hostPath"]["path"] == "/mnt/hub"


def test_injected_runtime_runs_with_the_images_python(peagle_manifest: dict[str, Any]) -> None:
    model = _with_runtime(
        peagle_manifest, image="vllm/vllm-openai:v0.33.0", injectRuntime={"image": "rt:1"}
    )
    spec = _pod_spec(model)
    (init,) = spec["initContainers"]
    assert init["image"] == "rt:1"
    assert init["command"] == ["specfleet-runtime", "inject", INJECTED_RUNTIME_PATH]
    container = spec["containers"][0]
    assert container["image"] == "vllm/vllm-openai:v0.33.0"
    assert container["command"] == podspec.INJECTED_COMMAND
    assert _env(container)["PYTHONPATH"] == INJECTED_RUNTIME_PATH
    assert {"name": "specfleet-runtime", "mountPath": INJECTED_RUNTIME_PATH, "readOnly": True} in (
        container["volumeMounts"]
    )
    # Without injection the image's own entrypoint runs, and no init container.
    plain = _pod_spec(_with_runtime(peagle_manifest, image="my/vllm:1", injectRuntime=None))
    assert "initContainers" not in plain
    assert plain["containers"][0]["command"] == ["specfleet-runtime", "serve"]


def test_pod_settings_pass_through(peagle_manifest: dict[str, Any]) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    model = _with_runtime(
        peagle_manifest,
        pod={
            "volumes": [{"name": "certs", "secret": {"secretName": "ca"}}],
            "volumeMounts": [{"name": "certs", "mountPath": "/etc/certs", "readOnly": True}],
            "imagePullSecrets": [{"name": "regcred"}],
            "serviceAccountName": "weights-reader",
            "affinity": affinity,
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}
            ],
            "priorityClassName": "high",
            "runtimeClassName": "nvidia",
            "schedulerName": "gpu-scheduler",
            "terminationGracePeriodSeconds": 120,
            "labels": {"team": "ml"},
            "annotations": {"example.com/owner": "ml"},
            "probes": {"startup": {"failureThreshold": 720}, "readiness": {"periodSeconds": 2}},
        },
        rollingUpdate={"maxSurge": 0, "maxUnavailable": "50%"},
    )
    deployment = render.deployment(model, "stable")
    template = deployment["spec"]["template"]
    spec = template["spec"]
    assert {"name": "certs", "secret": {"secretName": "ca"}} in spec["volumes"]
    container = spec["containers"][0]
    assert {"name": "certs", "mountPath": "/etc/certs", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["serviceAccountName"] == "weights-reader"
    assert spec["affinity"] == affinity
    (spread,) = spec["topologySpreadConstraints"]
    assert spread["labelSelector"] == {"matchLabels": {render.MODEL_LABEL: "llama-8b"}}
    assert (spec["priorityClassName"], spec["runtimeClassName"], spec["schedulerName"]) == (
        "high",
        "nvidia",
        "gpu-scheduler",
    )
    assert spec["terminationGracePeriodSeconds"] == 120
    assert template["metadata"]["labels"]["team"] == "ml"
    assert "team" not in deployment["spec"]["selector"]["matchLabels"]
    assert template["metadata"]["annotations"]["example.com/owner"] == "ml"
    assert container["startupProbe"]["failureThreshold"] == 720
    assert container["startupProbe"]["periodSeconds"] == runtime_container.STARTUP_PERIOD_SECONDS
    assert container["readinessProbe"]["periodSeconds"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {
        "maxSurge": 0,
        "maxUnavailable": "50%",
    }


def test_production_example_renders_what_it_asks() -> None:
    model = model_from(example(PRODUCTION))
    spec = _pod_spec(model)
    assert spec["serviceAccountName"] == "llama-70b-inference"
    assert spec["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
    cache = next(v for v in spec["volumes"] if v["name"] == "model-cache")
    assert cache["persistentVolumeClaim"]["claimName"] == "hf-model-cache"
    assert spec["initContainers"][0]["command"][1] == "inject"


def _pod(
    name: str,
    created: datetime,
    ready_at: datetime | None,
    started: datetime | None = None,
    restarts: int = 0,
) -> Any:
    """Pod `name` of model llama-8b created at `created`, its container started at `started`
    (a second after creation unless said; None with `ready_at` None: not started), Ready
    since `ready_at` (None: not Ready)."""
    conditions = []
    if ready_at is not None:
        conditions.append(
            {"type": "Ready", "status": "True", "lastTransitionTime": ready_at.isoformat()}
        )
    if started is None and ready_at is not None:
        started = created + timedelta(seconds=1)
    state = {"running": {"startedAt": started.isoformat()}} if started else {"waiting": {}}
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "namespace": "serving",
            "labels": {render.MODEL_LABEL: "llama-8b"},
            "creationTimestamp": created.isoformat(),
            "ownerReferences": [{"kind": "ReplicaSet", "uid": "uid-rs", "controller": True}],
        },
        "status": {
            "conditions": conditions,
            "containerStatuses": [{"name": "runtime", "restartCount": restarts, "state": state}],
        },
    }


def _startup(cache: FleetCache, model: SpeculativeModel) -> float | None:
    """The startup status says, from the pods `_pod` made: the model's own (through a
    ReplicaSet of its Deployment), as only those count."""
    key = ("serving", "llama-8b")
    if key not in cache.models:
        meta = {"name": "llama-8b", "namespace": "serving", "resourceVersion": "1"}
        cache.remember_model({"kind": "SpeculativeModel", "metadata": {**meta, "uid": "uid-m"}})
        for kind, name, uid, owner in (
            ("Deployment", "llama-8b", "uid-d", ("SpeculativeModel", "uid-m")),
            ("ReplicaSet", "llama-8b-1", "uid-rs", ("Deployment", "uid-d")),
        ):
            metadata = {
                **meta,
                "name": name,
                "uid": uid,
                "labels": {render.MODEL_LABEL: "llama-8b"},
                "ownerReferences": [{"kind": owner[0], "uid": owner[1], "controller": True}],
            }
            cache.remember_child({"kind": kind, "metadata": metadata, "status": {}})
    return summarize(model, cache.observed(key), NOW).startup_seconds


def test_a_readiness_flap_leaves_the_startup_measured_at_the_first_ready(
    peagle_manifest: dict[str, Any],
) -> None:
    """Two pods started in ~2 minutes two days ago; one failed its readiness probe an hour
    ago and came back: startup stays ~2 minutes (the last Ready transition said 84660 s)."""
    model = model_from(peagle_manifest)
    cache = FleetCache()
    created = NOW - timedelta(days=2)
    for name, ready in (("a", 118), ("b", 122)):
        cache.remember_child(_pod(name, created, None))  # Pending
        cache.remember_child(_pod(name, created, created + timedelta(seconds=ready)))
    assert _startup(cache, model) == 120
    flapped = _pod("b", created, None, started=created + timedelta(seconds=1))
    cache.remember_child(flapped)
    cache.remember_child(_pod("b", created, NOW - timedelta(hours=1)))
    assert _startup(cache, model) == 120


def test_startup_is_measured_per_container_start_and_only_from_before_its_first_ready(
    peagle_manifest: dict[str, Any],
) -> None:
    model = model_from(peagle_manifest, startupSeconds=42.0)
    cache = FleetCache()
    created = NOW - timedelta(hours=1)
    # First seen already Ready (an operator restart): its Ready may be a flap's, not
    # measured; the last measure stays.
    cache.remember_child(_pod("a", created, created + timedelta(seconds=3000)))
    assert _startup(cache, model) == 42.0
    # Its container restarts at +3500 s and is Ready 20 s later: that start is measured.
    restarted = created + timedelta(seconds=3500)
    cache.remember_child(_pod("a", created, None, started=restarted, restarts=1))
    ready = restarted + timedelta(seconds=20)
    cache.remember_child(_pod("a", created, ready, started=restarted, restarts=1))
    assert _startup(cache, model) == 20
    # A new pod, seen from its creation: created to Ready (scheduling and pull count).
    cache.remember_child(_pod("b", created, None))
    cache.remember_child(_pod("b", created, created + timedelta(seconds=100)))
    assert _startup(cache, model) == 60  # the median of 20 and 100
    cache.remember_child(_pod("b", created, None), deleted=True)
    assert _startup(cache, model) == 20
    assert cache.starts[("serving", "llama-8b")].keys() == {"uid-a"}


def _hub_snapshot(cache: Path, name: str, files: list[str]) -> Path:
    repo = cache / ("models--" + name.replace("/", "--"))
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for file in files:
        (snapshot / file).write_text("x")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    return snapshot


def test_preflight_says_whether_the_weights_are_in_the_cache(tmp_path: Path) -> None:
    env = {"HF_HOME": str(tmp_path)}
    snapshot = _hub_snapshot(tmp_path / "hub", "org/warm", ["config.json", "model.safetensors"])
    _hub_snapshot(tmp_path / "hub", "org/partial", ["config.json"])
    assert preflight.cache_report("org/warm", "target", env) == (
        f"preflight: target org/warm: weights found in the model cache ({snapshot})"
    )
    for cold in ("org/partial", "org/absent"):
        assert "not in the model cache" in preflight.cache_report(cold, "target", env)


def test_preflight_reports_a_cache_it_cannot_read_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As a non-root pod whose HOME is /root sees it (root itself reads anything, so the
    # refusal is raised here as the kernel would raise it).
    def refused(self: Path) -> bool:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "is_dir", refused)
    report = preflight.cache_report("org/any", "target", {"HF_HOME": str(tmp_path)})
    assert report == (
        f"preflight: target org/any: the model cache ({tmp_path / 'hub'}) cannot be read "
        "(Permission denied): set HF_HOME or spec.runtime.modelCache to a readable path"
    )


def test_injected_runtime_is_importable_with_its_plugin(tmp_path: Path) -> None:
    """The copy runs in another Python (here: isolated from this venv's site-packages,
    the copy on its path) and vLLM finds the runtime's plugin through its metadata."""
    inject(tmp_path)
    found = {d.metadata["Name"] for d in importlib.metadata.distributions(path=[str(tmp_path)])}
    assert found == {"specfleet-runtime"}
    (dist,) = importlib.metadata.distributions(path=[str(tmp_path)])
    assert {e.name for e in dist.entry_points if e.group == "vllm.general_plugins"}
    probe = "import specfleet.runtime.inject as m; print(m.__file__)"
    result = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        env={"PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip().startswith(str(tmp_path))


@pytest.mark.parametrize(
    ("field", "value"),
    [("command", ["sh"]), ("args", ["x"]), ("ports", [{"containerPort": 1}])],
)
def test_operator_owned_fields_cannot_be_set_in_pod(
    field: str, value: Any, peagle_manifest: dict[str, Any]
) -> None:
    peagle_manifest["spec"]["runtime"]["pod"] = {field: value}
    errors = validation_errors(peagle_manifest)
    assert errors and all(f"spec.runtime.pod.{field}" in e for e in errors), errors


EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return list(spec["containers"]) + list(spec.get("initContainers", []))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_renders_the_platform_defaults(path: Path) -> None:
    """What a platform team's linters ask of a pod (kube-score's container-resources,
    ephemeral-storage and pull policy checks), on both tracks of every example: no
    BestEffort container, every scratch volume bounded, service links and the API token
    off, the recommended labels."""
    model = model_from(example(path))
    for track in TRACKS:
        deployment = render.deployment(model, track)
        spec = deployment["spec"]["template"]["spec"]
        for container in _containers(spec):
            requests = container["resources"]["requests"]
            assert {"cpu", "memory", "ephemeral-storage"} <= requests.keys(), container["name"]
        for init in spec.get("initContainers", []):
            assert init["imagePullPolicy"] == "IfNotPresent"
            assert init["resources"]["limits"]["memory"] == "256Mi"
        for volume in spec["volumes"]:
            if "emptyDir" in volume:
                assert "sizeLimit" in volume["emptyDir"], volume["name"]
        assert spec["enableServiceLinks"] is False
        assert spec["automountServiceAccountToken"] is False
        for labels in (
            deployment["metadata"]["labels"],
            deployment["spec"]["template"]["metadata"]["labels"],
        ):
            assert labels["app.kubernetes.io/component"] == render.COMPONENT
            assert labels["app.kubernetes.io/version"] == render.image_version(
                model.spec.runtime.image
            )


def test_default_requests_follow_the_gpus_and_give_way_to_the_users(
    peagle_manifest: dict[str, Any],
) -> None:
    def resources(**runtime: Any) -> dict[str, Any]:
        manifest = {**peagle_manifest, "spec": {**peagle_manifest["spec"]}}
        manifest["spec"]["runtime"] = {**peagle_manifest["spec"]["runtime"], **runtime}
        return dict(_pod_spec(model_from(manifest))["containers"][0]["resources"])

    assert resources(gpus=4)["requests"] == {
        "cpu": "8",
        "memory": "32Gi",
        "ephemeral-storage": "10Gi",
        "nvidia.com/gpu": "4",
    }
    # No GPU: one GPU's worth, and no nvidia.com/gpu.
    assert resources(gpus=0) == {
        "requests": {"cpu": "2", "memory": "8Gi", "ephemeral-storage": "10Gi"}
    }
    # A resource the user names (a request or only a limit) takes none of the default: a
    # default request of 8Gi above a 4Gi limit would be refused by the API server.
    given = resources(gpus=0, resources={"requests": {"cpu": "500m"}, "limits": {"memory": "4Gi"}})
    assert given == {
        "requests": {"ephemeral-storage": "10Gi", "cpu": "500m"},
        "limits": {"memory": "4Gi"},
    }
    # The ephemeral-storage request is /tmp's bound.
    scratch = {"scratch": {"tmp": "30Gi", "sharedMemory": "16Gi"}}
    manifest = {**peagle_manifest, "spec": {**peagle_manifest["spec"]}}
    manifest["spec"]["runtime"] = {**peagle_manifest["spec"]["runtime"], "pod": scratch}
    spec = _pod_spec(model_from(manifest))
    assert spec["containers"][0]["resources"]["requests"]["ephemeral-storage"] == "30Gi"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["tmp"]["emptyDir"] == {"sizeLimit": "30Gi"}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}


def test_injected_runtime_container_is_bounded_and_overridable(
    peagle_manifest: dict[str, Any],
) -> None:
    inject = {
        "image": "rt:1",
        "imagePullPolicy": "Always",
        "resources": {"limits": {"memory": "1Gi"}},
    }
    model = _with_runtime(peagle_manifest, image="vllm/vllm-openai:v0.33.0", injectRuntime=inject)
    spec = _pod_spec(model)
    (init,) = spec["initContainers"]
    assert init["imagePullPolicy"] == "Always"
    assert init["resources"] == {
        "requests": {"cpu": "100m", "ephemeral-storage": "256Mi"},
        "limits": {"cpu": "1", "memory": "1Gi"},
    }
    volume = next(v for v in spec["volumes"] if v["name"] == "specfleet-runtime")
    assert volume["emptyDir"] == {"sizeLimit": podspec.INJECT_SIZE}


def test_service_links_and_the_api_token_only_when_asked(peagle_manifest: dict[str, Any]) -> None:
    model = _with_runtime(
        peagle_manifest, pod={"enableServiceLinks": True, "automountServiceAccountToken": True}
    )
    spec = _pod_spec(model)
    assert spec["enableServiceLinks"] is True
    assert spec["automountServiceAccountToken"] is True


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("ghcr.io/specfleet/runtime:0.1.0", "0.1.0"),
        ("vllm/vllm-openai:v0.33.0", "v0.33.0"),
        ("registry:5000/vllm", None),
        ("vllm/vllm-openai@sha256:" + "0" * 64, None),
        ("vllm/vllm-openai:v0.33.0@sha256:" + "0" * 64, "v0.33.0"),
        ("r/x:" + "a" * 62 + "-b", "a" * 62),
        ("r/x:_", None),
    ],
)
def test_the_version_label_is_the_image_tag(image: str, version: str | None) -> None:
    assert render.image_version(image) == version


def test_pod_labels_replace_the_recommended_ones(peagle_manifest: dict[str, Any]) -> None:
    model = _with_runtime(
        peagle_manifest,
        pod={
            "labels": {
                "app.kubernetes.io/version": "llama-3.1",
                "app.kubernetes.io/component": "chat",
            }
        },
    )
    labels = render.deployment(model, "stable")["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/version"] == "llama-3.1"
    assert labels["app.kubernetes.io/component"] == "chat"
    assert labels["app.kubernetes.io/name"] == "specfleet-runtime"


def test_a_prestop_hook_drains_in_flight_requests(peagle_manifest: dict[str, Any]) -> None:
    container = _pod_spec(model_from(peagle_manifest))["containers"][0]
    assert container["lifecycle"] == {
        "preStop": {
            "exec": {"command": ["specfleet-runtime", "drain", "--port", "8000", "--seconds", "50"]}
        }
    }
    # The injected runtime drains with the image's Python, within the grace period given.
    injected = _with_runtime(
        peagle_manifest,
        image="vllm/vllm-openai:v0.33.0",
        injectRuntime={},
        port=9000,
        pod={"terminationGracePeriodSeconds": 300},
    )
    spec = _pod_spec(injected)
    assert spec["terminationGracePeriodSeconds"] == 300
    assert spec["containers"][0]["lifecycle"]["preStop"]["exec"]["command"] == [
        *podspec.INJECTED_CLI,
        "drain",
        "--port",
        "9000",
        "--seconds",
        "290",
    ]
    # A grace period that leaves vLLM no time to drain: no hook.
    short = _with_runtime(peagle_manifest, pod={"terminationGracePeriodSeconds": 10})
    assert "lifecycle" not in _pod_spec(short)["containers"][0]


def test_the_pods_spread_across_nodes_unless_told_otherwise(
    peagle_manifest: dict[str, Any],
) -> None:
    model = model_from(peagle_manifest)
    for track in TRACKS:
        spec = render.deployment(model, track)["spec"]["template"]["spec"]
        # Both tracks' pods, as one set: a canary lands beside the stable pods' least.
        assert spec["topologySpreadConstraints"] == [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {render.MODEL_LABEL: "llama-8b"}},
            }
        ]
    # [] spreads nothing.
    none = _with_runtime(dict(peagle_manifest), pod={"topologySpreadConstraints": []})
    assert "topologySpreadConstraints" not in _pod_spec(none)


def test_install_md_quotes_the_defaults_render_uses() -> None:
    """docs/install.md's table of the inference pods' defaults says render's figures."""
    from specfleet.runtime.drain import PROPAGATION_SECONDS

    doc = (REPO / "docs" / "install.md").read_text()
    table = doc.split("### Defaults of the inference pods", 1)[1].split("\n### ", 1)[0]
    table = " ".join(table.split())
    init_requests, init_limits = podspec.INIT_REQUESTS, podspec.INIT_LIMITS
    spread = podspec.DEFAULT_SPREAD
    quoted = [
        f"`cpu` {podspec.CPU_PER_GPU} and `memory` {podspec.MEMORY_PER_GPU_GI}Gi per GPU",
        f"`ephemeral-storage` requested as `/tmp`'s bound ({podspec.TMP_SIZE})",
        f"a {podspec.CACHE_PER_GPU_GI}Gi-per-GPU request",
        f"`/dev/shm` (in memory) bounded at {podspec.SHM_PER_GPU_GI}Gi per GPU",
        f"caches) bounded at {podspec.TMP_SIZE}",
        f"model cache bounded at {podspec.CACHE_PER_GPU_GI}Gi per GPU",
        f"requests `cpu` {init_requests['cpu']}, `memory` {init_requests['memory']} and "
        f"`ephemeral-storage` {init_requests['ephemeral-storage']}, limited to `cpu` "
        f"{init_limits['cpu']} and `memory` {init_limits['memory']}",
        f"its volume bounded at {podspec.INJECT_SIZE}",
        f"it waits {PROPAGATION_SECONDS:g} s for the pod's removal",
        f"the grace period ({podspec.TERMINATION_GRACE_SECONDS} s) less {podspec.STOP_SECONDS} s",
        f"{podspec.STOP_SECONDS} or less: no hook",
        f"`maxSkew: {spread['maxSkew']}` by `{spread['topologyKey']}`, "
        f"`whenUnsatisfiable: {spread['whenUnsatisfiable']}`",
        f"`component` (`{render.COMPONENT}`)",
    ]
    missing = [text for text in quoted if text not in table]
    assert not missing, f"docs/install.md's defaults no longer say {missing}"
