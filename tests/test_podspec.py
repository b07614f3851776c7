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

from specfleet.operator import podspec, render
from specfleet.operator.api import INJECTED_RUNTIME_PATH, MODEL_CACHE_PATH, SpeculativeModel
from specfleet.operator.errors import validation_errors
from specfleet.operator.status import ObservedChildren, startup_seconds, summarize
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

    assert cache_volume({}) == {"name": "model-cache", "emptyDir": {}}
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
    plain = _pod_spec(_with_runtime(peagle_manifest, injectRuntime=None))
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
    assert container["startupProbe"]["periodSeconds"] == render.STARTUP_PERIOD_SECONDS
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


def _pod(name: str, created: datetime, ready_after: float | None, restarts: int = 0) -> Any:
    conditions = []
    if ready_after is not None:
        ready_at = created + timedelta(seconds=ready_after)
        conditions.append(
            {"type": "Ready", "status": "True", "lastTransitionTime": ready_at.isoformat()}
        )
    return {
        "metadata": {"name": name, "creationTimestamp": created.isoformat()},
        "status": {
            "conditions": conditions,
            "containerStatuses": [{"name": "runtime", "restartCount": restarts}],
        },
    }


def test_startup_seconds_is_the_median_of_started_pods() -> None:
    start = NOW - timedelta(hours=1)
    pods = [
        _pod("a", start, 100),
        _pod("b", start, 40),
        _pod("c", start, 70),
        _pod("d", start, None),  # not Ready yet
        _pod("e", start, 3000, restarts=1),  # its Ready transition is not its start
    ]
    assert startup_seconds(pods) == 70
    assert startup_seconds([pods[3]]) is None


def test_status_keeps_the_last_startup_while_no_pod_has_started(
    peagle_manifest: dict[str, Any],
) -> None:
    model = model_from(peagle_manifest, startupSeconds=42.0)
    assert summarize(model, ObservedChildren(), NOW).startup_seconds == 42.0
    started = ObservedChildren(pods=[_pod("a", NOW - timedelta(minutes=5), 12.5)])
    assert summarize(model, started, NOW).startup_seconds == 12.5


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
