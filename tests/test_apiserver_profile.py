"""benchmarks/apiserver_profile.py: profiles' samples summed by the work their stacks do."""

from __future__ import annotations

from benchmarks.apiserver_profile import summarize_traces

SEPARATOR = "-----------+-------------------------------------------------------"


def _traces(*samples: tuple[str, list[str]]) -> str:
    """What `go tool pprof -traces` prints: a header, then each sample's value and its
    stack (innermost frame first), between separators."""
    blocks = ["File: kube-apiserver\nType: cpu\nDuration: 10s, Total samples = 1s (10%)"]
    for value, frames in samples:
        lines = [f"{value:>10}   {frames[0]}", *(f"             {f}" for f in frames[1:])]
        blocks.append("\n".join(lines))
    return f"\n{SEPARATOR}\n".join(blocks) + f"\n{SEPARATOR}\n"


STATUS_WRITE_CEL = [
    "github.com/google/cel-go/cel.(*prog).ContextEval",
    "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel.(*Validator).Validate",
    "k8s.io/apiextensions-apiserver/pkg/registry/customresource.statusStrategy.ValidateUpdate",
    "k8s.io/apiserver/pkg/storage/etcd3.(*store).GuaranteedUpdate",
    "k8s.io/apiserver/pkg/endpoints/handlers.UpdateResource.func1.4",
]
POD_STATUS_UPDATE = [
    "encoding/json.(*encodeState).marshal",
    "k8s.io/apiserver/pkg/storage/etcd3.(*store).GuaranteedUpdate",
    "k8s.io/apiserver/pkg/endpoints/handlers.UpdateResource.func1.4",
]
APPLY = [
    "k8s.io/apimachinery/pkg/util/managedfields/internal.(*FieldManager).Apply",
    "k8s.io/apiserver/pkg/endpoints/handlers.(*patcher).patchResource.func2",
]
GC = ["runtime.scanobject", "runtime.gcDrain", "runtime.gcBgMarkWorker"]
AUTHENTICATION = ["crypto/x509.(*Certificate).Verify"]


def test_each_sample_counts_once_for_the_first_kind_its_stack_does() -> None:
    summary = summarize_traces(
        _traces(
            ("30ms", STATUS_WRITE_CEL),
            ("1.20s", POD_STATUS_UPDATE),
            ("250ms", APPLY),
            ("40ms", GC),
            ("500us", AUTHENTICATION),
        )
    )
    assert summary["cpu_seconds"] == round(0.03 + 1.2 + 0.25 + 0.04 + 0.0005, 2)
    kinds = summary["by_kind"]
    assert kinds["update of a custom resource (status writes)"] == 0.03
    assert kinds["update of a built-in object"] == 1.2
    assert kinds["apply or patch"] == 0.25
    assert kinds["garbage collection"] == 0.04
    assert kinds["other"] == 0.0  # 500us, rounded
    assert sum(kinds.values()) == summary["cpu_seconds"]


def test_cross_cutting_costs_are_counted_wherever_they_occur() -> None:
    across = summarize_traces(
        _traces(("30ms", STATUS_WRITE_CEL), ("1.20s", POD_STATUS_UPDATE), ("250ms", APPLY))
    )["across"]
    assert across == {"CEL rules": 0.03, "managed fields": 0.25, "JSON": 1.2}


def test_no_profile_sums_to_nothing() -> None:
    summary = summarize_traces("")
    assert summary["cpu_seconds"] == 0.0
    assert set(summary["by_kind"].values()) == {0.0}
