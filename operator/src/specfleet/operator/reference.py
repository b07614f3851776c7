"""Generate docs/reference.md: the status conditions and their reasons, the operator's own
metrics and the alerts, read from the code that sets, exports and ships them.

- Conditions: every call that sets one (`set_condition(.., ConditionType.X, status,
  reason, ..)` or `run.condition(ConditionType.X, status, reason, ..)`) in the operator's
  modules, its reason followed to the literals it can hold (constants, `a if c else b`,
  a local or a parameter assigned them, a dataclass field given them). Each reason's
  meaning is written below, once; a reason the code sets without one, or one described
  but no longer set, fails the generator (so `specfleet crds --check` and its test).
- Metrics: the collectors registered in `observability`.
- Alerts: the rules in deploy/prometheus/specfleet-alerts.yaml (the chart's rendering).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml
from prometheus_client.metrics import MetricWrapperBase

from specfleet.operator import api, observability

PACKAGE = Path(__file__).parent
ALERTS_FILE = Path("deploy") / "prometheus" / "specfleet-alerts.yaml"

# What each reason means, by condition. The code is the list; this is the words.
REASONS: dict[api.ConditionType, dict[str, str]] = {
    api.ConditionType.READY: {
        "Available": "Every stable pod is ready.",
        "RollingOut": "Fewer stable pods are ready than spec.replicas (starting, rolling "
        "out, or failing: see Degraded).",
    },
    api.ConditionType.PROGRESSING: {
        "RollingOut": "The stable or canary Deployment is rolling out the rendered pods.",
        "Unschedulable": "A pod cannot be scheduled (no node with the GPUs, selector or "
        "tolerations it asks for); the message quotes the scheduler.",
        "Settled": "The pods match the spec.",
    },
    api.ConditionType.DEGRADED: {
        "AsExpected": "No failure.",
        "RenderFailed": "The model's config does not render into pods (the message says "
        "which field).",
        "ChildrenRefused": "The API server refused a Deployment or Service the operator "
        "wrote (quota, admission policy, RBAC); the message is the server's.",
        "PodPolicyRefused": "The pods would hold what the operator's install does not allow "
        "(another ServiceAccount, Secret or projected volumes, a hostPath cache: the chart's "
        "podPolicy); no child is applied; the message names the field.",
        "RuntimeFailed": "An inference pod failed: its runtime's preflight or vLLM's start "
        "(the message is the pod's termination message, vLLM's own one-line reason).",
        "SpeculationDisabled": "The operator switched speculation off after rollbacks (not "
        "when plain decoding was chosen because it measured faster); it re-probes after "
        "spec.rollback.reprobeAfter.",
        "ChildNotOwned": "An object with a child's name (a Deployment or Service) exists and "
        "is not the operator's: it is left untouched; the message names it and its owner. "
        "Rename the model or remove the object.",
        "InvalidSpec": "The API server admitted a spec the operator's models refuse (an "
        "older CRD than the operator): the message lists the fields; nothing is rendered.",
    },
    api.ConditionType.SPECULATION_ACTIVE: {
        "Drafting": "The stable pods draft at the K in status.speculation.tokens.",
        "PlainDecoding": "spec.draft.method is none.",
        "Disabled": "Rolled back to plain decoding (status.speculation.off says why).",
        "NoKPays": "Plain decoding measured faster than every K at this load (not a "
        "failure; re-probed when the load changes).",
        "NotExported": "The pods export no speculative-decoding metrics although a draft "
        "is configured: the draft did not load.",
        "Reprobing": "Speculation is back on in place after its back-off, not yet proven "
        "(status.speculation.reprobing).",
        "Reprobed": "A re-probe succeeded: speculation is back on.",
        "PlainDecodingTrial": "An in-place trial runs plain decoding on the stable pods to "
        "measure it against the K before (status.speculation.trial, tokens 0).",
    },
    api.ConditionType.METRICS_AVAILABLE: {
        "Conclusive": "The last window had enough draft tokens to judge (a window of plain "
        "decoding on trial: traffic to time).",
        "Collecting": "The window is still growing towards spec.tuning.minDraftTokens.",
        "NotDrafting": "The pods serve without drafting (plain decoding), so there is "
        "nothing to judge.",
        "Perturbed": "The step time jumped far from the one measured at this K and batch "
        "(a slow minute, a noisy neighbour): held out of the fit and of every judgement "
        "(status.stepCost.perturbedWindows counts them).",
        "NoData": "No metrics from any stable pod (status.acceptance.podsLeftOut says why).",
        "NotANumber": "A counter was not a finite number.",
        "NoTraffic": "No tokens generated in the window.",
        "NoDrafts": "Tokens generated but no drafts: the draft is not running.",
        "TooFewDraftTokens": "The window reached spec.tuning.maxWindowAge with fewer draft "
        "tokens than spec.tuning.minDraftTokens.",
        "NoPerPositionData": "FirstPositionAcceptance needs vLLM's per-position counters, "
        "which the pods do not export.",
        "PrometheusUnavailable": "spec.metrics.source is Prometheus and the query failed.",
    },
    api.ConditionType.ACCEPTANCE_BELOW_FLOOR: {
        "NoKClearsFloor": "No K's rollback metric clears spec.rollback.minAcceptance, but "
        "speculation still measures faster than plain decoding, so the fastest K is kept "
        "(KeepFastest).",
        "AboveFloor": "The rollback metric clears the floor again.",
        "Disabled": "Speculation was switched off, so nothing is below the floor.",
        "SpecChanged": "spec.speculation.tokens changed: the new K starts unjudged.",
        "ConfigChanged": "The stable pods switched to a new config (promoted, forced or "
        "Immediate): its acceptance starts unjudged.",
    },
    api.ConditionType.CONFIG_REJECTED: {
        "Trying": "A new config (draft model, method, runtime image or args) is on trial "
        "against the running one (docs/rollouts.md).",
        "GoodputGain": "The new config was promoted: its goodput gain cleared "
        "spec.rollout.minGain and its acceptance the floor.",
        "Immediate": "The stable pods switched to the new config with no trial "
        "(spec.rollout.strategy Immediate, or plain decoding on either side).",
        "TargetChanged": "The spec changes the target model (model.name or servedName): a new "
        "config end to end, on every pod at once without a trial (the goodput of two target "
        "models is not compared); K and the step cost are learned anew.",
        "Forced": "The annotation specfleet.io/force-config named the spec's config: the "
        "stable pods run it without a trial.",
        "SpecReverted": "The spec names the running config again: the rejection is cleared.",
        "Cancelled": "The trial ended unjudged: the spec changed again, or the config was forced.",
        "CanaryNotRunning": "The trial waits for its canary pod: Pending with no node, or "
        "never created (the canary Deployment's ReplicaFailure, e.g. FailedCreate on a "
        "quota); the message says why. The trial starts when the canary runs, or goes on in "
        "place after spec.tuning.canaryPendingTimeout; it is never rejected for Timeout.",
        "BelowFloor": "Rejected: the new config's rollback metric fell below the floor. The "
        "stable pods stay on the last good config (status.config.running).",
        "NoGain": "Rejected: the new config's goodput gain did not clear "
        "spec.rollout.minGain (the message has the measured numbers and the hash).",
        "RuntimeFailed": "Rejected: a pod running the new config failed (its preflight "
        "refused it, or vLLM exited); the message is the pod's reason.",
        "Timeout": "Rejected: the trial had not gathered its windows within spec.rollout.timeout.",
    },
}


# ----------------------------------------------------------------------- conditions


@dataclass
class _Module:
    tree: ast.Module
    parents: dict[ast.AST, ast.AST]


def _modules() -> dict[str, _Module]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        modules[path.relative_to(PACKAGE).with_suffix("").as_posix()] = _Module(tree, parents)
    return modules


def _constants(modules: dict[str, _Module]) -> dict[str, str]:
    """Module-level `NAME = "literal"` of every module, and `Class.NAME` for a class's
    (an enum's members: reasons are enums such as WindowVerdict)."""
    found: dict[str, str] = {}

    def literals(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef) and not prefix:
                literals(node.body, f"{node.name}.")
            if not isinstance(node, ast.Assign):
                continue
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                literal: str | None = value.value
            else:  # `MEMBER = CONSTANT`, a literal named elsewhere
                literal = found.get(value.id) if isinstance(value, ast.Name) else None
            for target in node.targets:
                if isinstance(target, ast.Name) and literal is not None:
                    found[prefix + target.id] = literal

    for _ in range(2):  # the second pass resolves names defined in a later module
        for module in modules.values():
            literals(module.tree.body, "")
    return found


def _dataclass_fields(modules: dict[str, _Module]) -> dict[str, list[str]]:
    """Field names in order of every class with annotated fields, by class name."""
    return {
        node.name: [
            item.target.id
            for item in node.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
        ]
        for module in modules.values()
        for node in ast.walk(module.tree)
        if isinstance(node, ast.ClassDef)
    }


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class _Resolver:
    def __init__(self, modules: dict[str, _Module]) -> None:
        self.modules = modules
        self.constants = _constants(modules)
        self.fields = _dataclass_fields(modules)

    def _calls(self, name: str) -> Iterator[tuple[ast.Call, _Module]]:
        """Calls of a function, method or class by its name, with their module."""
        for module in self.modules.values():
            for node in ast.walk(module.tree):
                if isinstance(node, ast.Call):
                    func = node.func
                    called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                    if called == name:
                        yield node, module

    def _argument(self, call: ast.Call, index: int, name: str) -> ast.expr | None:
        if index < len(call.args):
            return call.args[index]
        return next((k.value for k in call.keywords if k.arg == name), None)

    def values(self, node: ast.expr, module: _Module) -> set[str]:
        """The string literals an expression can evaluate to."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, ast.IfExp):
            return self.values(node.body, module) | self.values(node.orelse, module)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            member = f"{node.value.id}.{node.attr}"
            if member in self.constants:
                return {self.constants[member]}
            return self._field_values(node.value.id, node.attr)
        if isinstance(node, ast.Name):
            if node.id in self.constants:
                return {self.constants[node.id]}
            return self._local_values(node, module)
        return set()

    def _field_values(self, variable: str, field: str) -> set[str]:
        """`judged.reason`: what calls of the class `Judged` give its `reason` field."""
        cls = next((c for c in self.fields if _snake(c) == variable), None)
        if cls is None or field not in self.fields[cls]:
            return set()
        index = self.fields[cls].index(field)
        found: set[str] = set()
        for call, module in self._calls(cls):
            argument = self._argument(call, index, field)
            if argument is not None:
                found |= self.values(argument, module)
        return found

    def _local_values(self, name: ast.Name, module: _Module) -> set[str]:
        function = name
        while function in module.parents and not isinstance(function, ast.FunctionDef):
            function = module.parents[function]  # type: ignore[assignment]
        if not isinstance(function, ast.FunctionDef):
            return set()
        found: set[str] = set()
        for node in ast.walk(function):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id == name.id:
                        found |= self.values(node.value, module)
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                        for each, value in zip(target.elts, node.value.elts, strict=False):
                            if isinstance(each, ast.Name) and each.id == name.id:
                                found |= self.values(value, module)
        parameters = [a.arg for a in function.args.args]
        if name.id in parameters:
            index = parameters.index(name.id)
            for call, caller in self._calls(function.name):
                argument = self._argument(call, index, name.id)
                if argument is not None:
                    found |= self.values(argument, caller)
        return found


def condition_reasons() -> dict[api.ConditionType, set[str]]:
    """Every reason the operator's code sets, by condition type."""
    modules = _modules()
    resolver = _Resolver(modules)
    found: dict[api.ConditionType, set[str]] = {kind: set() for kind in api.ConditionType}
    for module in modules.values():
        for call in (n for n in ast.walk(module.tree) if isinstance(n, ast.Call)):
            for index, argument in enumerate(call.args):
                if (
                    isinstance(argument, ast.Attribute)
                    and isinstance(argument.value, ast.Name)
                    and argument.value.id == "ConditionType"
                    and len(call.args) > index + 2
                ):
                    kind = api.ConditionType[argument.attr]
                    found[kind] |= resolver.values(call.args[index + 2], module)
    return found


def _conditions_section() -> list[str]:
    found = condition_reasons()
    problems = []
    for kind in api.ConditionType:
        described = set(REASONS.get(kind, {}))
        for reason in sorted(found[kind] - described):
            problems.append(f"{kind.value}: reason {reason} is set but not described")
        for reason in sorted(described - found[kind]):
            problems.append(f"{kind.value}: reason {reason} is described but never set")
    if problems:
        raise ValueError(
            "specfleet/operator/reference.py REASONS is out of date: " + "; ".join(problems)
        )
    lines = [
        "## Status conditions and their reasons",
        "",
        "`kubectl describe specmodel NAME` lists them; `kubectl wait --for=condition=Ready`",
        "waits on them. Each condition's `reason` is one of these:",
        "",
        "| condition | reason | meaning |",
        "| --- | --- | --- |",
    ]
    for kind in api.ConditionType:
        for reason, meaning in REASONS[kind].items():
            lines.append(f"| `{kind.value}` | `{reason}` | {meaning} |")
    return lines


# -------------------------------------------------------------------------- metrics


def _metrics_section() -> list[str]:
    lines = [
        "## The operator's own metrics",
        "",
        "Served on the operator pod's `/metrics` (port 8080; the chart's ServiceMonitor,",
        "`serviceMonitor.enabled=true`, scrapes it; its PodMonitor scrapes vLLM's metrics on",
        "the inference pods). Per-model series carry `namespace` and `model` and are",
        "dropped when the model is deleted.",
        "",
        "| metric | type | labels | meaning |",
        "| --- | --- | --- | --- |",
    ]
    suffix = {"counter": "_total", "gauge": "", "histogram": ""}
    for collector in vars(observability).values():
        if not isinstance(collector, MetricWrapperBase):
            continue
        for family in collector.describe():
            labels = ", ".join(f"`{label}`" for label in collector._labelnames)
            name = family.name + suffix[family.type]
            lines.append(f"| `{name}` | {family.type} | {labels} | {family.documentation} |")
    return lines


# --------------------------------------------------------------------------- alerts


def _alerts_section(root: Path) -> list[str]:
    groups = yaml.safe_load((root / ALERTS_FILE).read_text())["groups"]
    lines = [
        "## Alerts",
        "",
        "Shipped in the chart's PrometheusRule (`prometheusRule.enabled`) and as",
        f"`{ALERTS_FILE}`; runbooks in [alerts.md](alerts.md). Windows and pending",
        "periods are the chart's defaults (`alerts.*` values).",
        "",
        "| alert | severity | for | summary |",
        "| --- | --- | --- | --- |",
    ]
    for group in groups:
        for rule in group["rules"]:
            name = rule["alert"]
            summary = re.sub(
                r"\{\{ \$labels\.(\w+) \}\}", r"*\1*", rule["annotations"]["summary"]
            ).replace("|", "\\|")
            lines.append(
                f"| [`{name}`](alerts.md#{name.lower()}) | {rule['labels']['severity']} "
                f"| {rule.get('for', '-')} | {summary} |"
            )
    return lines


def markdown(root: Path) -> str:
    return "\n".join(
        [
            "<!-- Generated by `specfleet crds` from specfleet/operator/reference.py. "
            "Do not edit. -->",
            "# Operations reference",
            "",
            "Conditions, the operator's metrics and the alerts, read from the code that sets,",
            "exports and ships them (`make crds`; a test fails when this page is stale).",
            "",
            *_conditions_section(),
            "",
            *_metrics_section(),
            "",
            *_alerts_section(root),
            "",
        ]
    )
