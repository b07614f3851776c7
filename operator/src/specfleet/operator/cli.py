"""`specfleet`: the command line of the operator side (CRDs, validation, rendering)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import TypeAdapter, ValidationError

from specfleet.operator import api, crd, logs, manifests, render
from specfleet.operator.accelerator_default import with_default
from specfleet.operator.capacity import capacity, in_words
from specfleet.operator.errors import describe, validation_errors
from specfleet.operator.pod_policy import PodPolicy
from specfleet.runtime import vllm_flags

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)

# The operator install's pod policy (the chart's podPolicy), taken by `validate` too.
AllowServiceAccount = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-service-account",
        help="A ServiceAccount models' pods may run as besides the namespace's default "
        "(repeatable).",
    ),
]
AllowSecretVolumes = Annotated[
    bool, typer.Option(help="Let models' pods mount Secret and projected volumes.")
]
AllowHostPathCache = Annotated[
    bool, typer.Option(help="Let models keep their cache in a node's directory.")
]


DefaultAccelerator = Annotated[
    str | None,
    typer.Option(
        "--default-accelerator",
        help="The install's default accelerator (the chart's defaultAccelerator): written "
        "into models that name no GPU source before they are validated, as admission does.",
    ),
]


def _pod_policy(accounts: list[str] | None, secret_volumes: bool, cache: bool) -> PodPolicy:
    return PodPolicy(frozenset(accounts or []), secret_volumes, cache)


@app.command("crds")
def crds_command(
    check: Annotated[
        bool, typer.Option("--check", help="Fail (exit 1) if a generated file is stale.")
    ] = False,
    root: Annotated[Path, typer.Option(help="Repository root.")] = Path("."),
) -> None:
    """Write every file generated from the models: the CRD and the chart's, the chart's
    admission policies and rollback metrics' PromQL, the API reference and its tables."""
    try:
        if check:
            stale = crd.stale_files(root)
            for path in stale:
                typer.echo(f"stale: {path} (run `specfleet crds`)", err=True)
            raise typer.Exit(1 if stale else 0)
        for path in crd.write_files(root):
            typer.echo(f"wrote {path}")
    except (OSError, ValueError) as error:
        # --root is not the repository (no README.md with the table's markers).
        typer.echo(f"{root}: not the specfleet repository: {error}", err=True)
        raise typer.Exit(1) from None


@app.command("validate")
def validate_command(
    files: Annotated[
        list[Path],
        typer.Argument(help="Manifest files (YAML, multi-document; - for standard input)."),
    ],
    allow_service_account: AllowServiceAccount = None,
    allow_secret_volumes: AllowSecretVolumes = False,
    allow_host_path_cache: AllowHostPathCache = False,
    default_accelerator: DefaultAccelerator = None,
) -> None:
    """Validate SpeculativeModel manifests offline; print each error with its field path.

    Exits 1 when any file is unreadable, holds no SpeculativeModel or a misspelt kind,
    or a model is invalid, asks for more than the pod policy allows (the operator's
    install: its --allow-* flags) or has runtime.args vLLM 0.33's parser would refuse or
    that set one of its options twice; models of all the files whose children would share
    a name are refused too. Prints the GPUs each valid model takes at peak."""
    policy = _pod_policy(allow_service_account, allow_secret_volumes, allow_host_path_cache)
    if default_accelerator is not None and not re.fullmatch(
        api.EXTENDED_RESOURCE, default_accelerator
    ):
        typer.echo(
            f"--default-accelerator {default_accelerator!r}: not an extended resource name "
            "with its domain, such as amd.com/gpu",
            err=True,
        )
        raise typer.Exit(1)
    invalid = 0
    valid: list[tuple[str, api.SpeculativeModel]] = []
    for path in files:
        try:
            found = manifests.sort_documents(manifests.read_documents(path))
        except manifests.ManifestError as error:
            typer.echo(f"{path}: {error}", err=True)
            invalid += 1
            continue
        for message in found.near_misses:
            typer.echo(f"{path}: {message}", err=True)
        invalid += len(found.near_misses)
        if not found.ours and not found.near_misses:
            typer.echo(f"{path}: {manifests.no_model_error(found.others)}", err=True)
            invalid += 1
        for index, document in found.ours:
            name = _name(document, index)
            if default_accelerator is not None:
                document = with_default(document, default_accelerator)
            errors = validation_errors(document)
            if not errors:
                spec = api.SpeculativeModel.model_validate(document).spec
                errors = policy.refusals(spec) + _vllm_refusals(spec.runtime.args)
            for message in errors:
                typer.echo(f"{path} ({name}): {message}", err=True)
            if errors:
                invalid += 1
            else:
                typer.echo(f"{path} ({name}): valid")
                typer.echo(f"{path} ({name}): {in_words(capacity(spec))}")
                for warning in spec.warnings():
                    typer.echo(f"{path} ({name}): warning: {warning}", err=True)
                valid.append((str(path), api.SpeculativeModel.model_validate(document)))
    for message in manifests.collisions(valid):
        typer.echo(message, err=True)
        invalid += 1
    raise typer.Exit(1 if invalid else 0)


def _vllm_refusals(args: list[str]) -> list[str]:
    """What vLLM 0.33's parser would refuse in runtime.args (its flags' table: the
    operator's image has no vLLM), and flags that set what an earlier one set (of two
    values only one reaches vLLM), each naming the arg."""
    flags = vllm_flags.Flags()
    return [
        f"spec.runtime.args[{index}]: {why} (vLLM stops at start on it)"
        for index, why in flags.refusals(args)
    ] + [f"spec.runtime.args[{index}]: {why}" for index, why in flags.duplicates(args)]


def _name(document: Any, index: int) -> str:
    metadata = document.get("metadata") if isinstance(document, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return str(name) if name else f"document {index}"


def _namespace_name(value: str) -> str:
    try:
        return TypeAdapter(api.NamespaceName).validate_python(value)
    except ValidationError as error:
        reason = describe(error.errors()[0], None).removeprefix("(document)")
        raise typer.BadParameter(f"{value!r}{reason}") from None


@app.command("render")
def render_command(
    file: Annotated[
        Path, typer.Argument(help="A SpeculativeModel manifest file (- for standard input).")
    ],
    namespace: Annotated[
        str, typer.Option(help="Namespace if the manifest has none.", callback=_namespace_name)
    ] = "default",
) -> None:
    """Print the Deployments, Service and PodDisruptionBudget the operator would create,
    without a cluster.

    Refuses what `specfleet validate` refuses, but for the pod policy (that is the
    install's): an invalid model, runtime.args vLLM 0.33's parser would refuse or that
    set one of its options twice, models whose children would share a name."""
    try:
        found = manifests.sort_documents(manifests.read_documents(file))
    except manifests.ManifestError as error:
        typer.echo(f"{file}: {error}", err=True)
        raise typer.Exit(1) from None
    problems = list(found.near_misses)
    if not found.ours and not found.near_misses:
        problems.append(manifests.no_model_error(found.others))
    models = []
    for index, document in found.ours:
        errors = validation_errors(document)
        if not errors:
            model = api.SpeculativeModel.model_validate(document)
            errors = _vllm_refusals(model.spec.runtime.args)
        problems += [f"{_name(document, index)}: {message}" for message in errors]
        if not errors:
            models.append(model)
    for model in models:
        model.metadata.namespace = model.metadata.namespace or namespace
    for message in problems:
        typer.echo(f"{file}: {message}", err=True)
    # Models given twice or whose children would share a name: rendering them would
    # print two objects of one name, the second replacing the first when applied.
    clashes = manifests.collisions([(str(file), model) for model in models])
    for message in clashes:
        typer.echo(message, err=True)
    for model in [] if clashes else models:
        typer.echo(yaml.safe_dump_all(render.manifests(model), sort_keys=False), nl=False)
    raise typer.Exit(1 if problems or clashes else 0)


@app.command("operator")
def operator_command(
    namespace: Annotated[
        list[str] | None,
        typer.Option("--namespace", "-n", help="Namespace to watch (repeatable)."),
    ] = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", help="Watch every namespace (default).")
    ] = False,
    metrics_port: Annotated[int, typer.Option(help="Port of /metrics.")] = 8080,
    health_port: Annotated[int, typer.Option(help="Port of /healthz (liveness).")] = 8081,
    standalone: Annotated[
        bool,
        typer.Option(
            "--standalone/--peering",
            help="Without kopf's peering objects (the chart's replicas elect a leader on a "
            "Lease instead: --leader-elect); --peering: kopf's peering, one active replica.",
        ),
    ] = True,
    period: Annotated[
        float, typer.Option(help="Seconds between status refreshes of each model.")
    ] = 5.0,
    leader_elect: Annotated[
        bool,
        typer.Option(
            "--leader-elect/--no-leader-elect",
            help="Write only while holding a Lease, so that replicas can run side by side.",
        ),
    ] = False,
    lease_name: Annotated[str, typer.Option(help="The leader Lease's name.")] = (
        "specfleet-operator"
    ),
    lease_namespace: Annotated[
        str,
        typer.Option(envvar="POD_NAMESPACE", help="The leader Lease's namespace."),
    ] = "",
    lease_duration: Annotated[
        float, typer.Option(help="Seconds a standby waits on an unrenewed Lease.")
    ] = 15.0,
    renew_deadline: Annotated[
        float, typer.Option(help="Seconds a leader may write after its last renew.")
    ] = 10.0,
    retry_period: Annotated[float, typer.Option(help="Seconds between Lease tries.")] = 2.0,
    request_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds any API request may take; with --leader-elect, less than "
            "--lease-duration minus --renew-deadline."
        ),
    ] = 4.0,
    max_scrape_timeout: Annotated[
        float,
        typer.Option(
            min=0.1, help="Seconds a model's scrape or query may take, whatever its spec says."
        ),
    ] = api.MAX_SCRAPE_TIMEOUT_SECONDS,
    prometheus_url: Annotated[
        list[str] | None,
        typer.Option(
            "--prometheus-url",
            help="A Prometheus URL models may query (repeatable; it may be at a loopback "
            "address); none: any http(s) URL but at a loopback, link-local or metadata address.",
        ),
    ] = None,
    allow_service_account: AllowServiceAccount = None,
    allow_secret_volumes: AllowSecretVolumes = False,
    allow_host_path_cache: AllowHostPathCache = False,
    schedule_key_file: Annotated[
        Path | None,
        typer.Option(
            envvar="SPECFLEET_SCHEDULE_KEY_FILE",
            help="A file holding the key each model's hot-schedule credential is derived "
            "from (speculation.switching Hot or Auto); every replica needs the same one. "
            "Neither this nor --schedule-key-secret: K changes restart the pods.",
        ),
    ] = None,
    schedule_key_secret: Annotated[
        str | None,
        typer.Option(
            envvar="SPECFLEET_SCHEDULE_KEY_SECRET",
            help="[NAMESPACE/]NAME of a Secret that holds that key (its data key 'key'), "
            "created with a random key when absent; the namespace defaults to $POD_NAMESPACE.",
        ),
    ] = None,
    log_level: Annotated[
        logs.LogLevel, typer.Option(help="Least severe level logged.")
    ] = logs.LogLevel.INFO,
    log_format: Annotated[
        logs.LogFormat, typer.Option(help="text, or json: one JSON object a line.")
    ] = logs.LogFormat.TEXT,
) -> None:
    """Run the operator."""
    import asyncio
    import os
    import socket
    import uuid

    import kopf
    from prometheus_client import start_http_server

    from specfleet.operator import (
        allocator,
        handlers,
        kube,
        leadership,
        namespace_listings,
        observability,
    )
    from specfleet.operator.child_watches import ChildWatches
    from specfleet.operator.evaluation import Evaluator
    from specfleet.operator.fleet import (
        BURST_QUIET_SECONDS,
        CHILD_SELECTOR,
        STATUS_INTERVAL_SECONDS,
        Fleet,
    )
    from specfleet.operator.metrics import Outbound

    # The pod's name in a cluster (the chart sets POD_ID, kopf's own name for it).
    instance = os.environ.get("POD_ID") or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    election_config = leadership.ElectionConfig(
        lease_name,
        lease_namespace,
        instance,
        lease_duration,
        renew_deadline,
        retry_period,
        request_timeout,
    )
    problems = election_config.problems() if leader_elect else []
    for problem in problems:
        typer.echo(f"--leader-elect: {problem}", err=True)
    if problems:
        raise typer.Exit(2)
    if schedule_key_file is not None and schedule_key_secret is not None:
        typer.echo("--schedule-key-file and --schedule-key-secret: give one", err=True)
        raise typer.Exit(2)
    schedule_key = None
    if schedule_key_file is not None:
        try:
            schedule_key = schedule_key_file.read_bytes().strip() or None
        except OSError as error:
            typer.echo(f"--schedule-key-file: cannot read: {error.strerror or error}", err=True)
            raise typer.Exit(2) from None
        if schedule_key is None:
            typer.echo(f"--schedule-key-file: {schedule_key_file} is empty", err=True)
            raise typer.Exit(2)
    allocator.fewer_arenas()  # before any thread starts
    logs.configure(log_level, log_format)
    start_http_server(metrics_port)
    api = kube.api_client(instance)
    if schedule_key_secret is not None:
        schedule_key = _kept_schedule_key(api, schedule_key_secret, request_timeout)
    stop_flag = asyncio.Event()
    election = None
    if leader_elect:
        store = leadership.LeaseStore(api, lease_namespace, lease_name, request_timeout)
        election = leadership.Election(election_config, store, on_lost=stop_flag.set)
    else:
        observability.LEADER.set(1)  # alone, it always writes
    namespaces = namespace or []
    fleet_namespaces = None if all_namespaces or not namespaces else tuple(namespaces)
    credentials = kube.Credentials.of(api.configuration)
    fleet = Fleet(
        kube.Cluster(
            credentials, instance, election.may_write if election else kube.always, request_timeout
        ),
        Evaluator(Outbound(max_scrape_timeout, frozenset(prometheus_url or []))),
        period=period,
        schedule_key=schedule_key,
        pod_policy=_pod_policy(allow_service_account, allow_secret_volumes, allow_host_path_cache),
        status_interval=STATUS_INTERVAL_SECONDS,
        burst_quiet=BURST_QUIET_SECONDS,
    )
    running = handlers.Running(
        fleet,
        election,
        child_watches=ChildWatches(
            credentials,
            instance,
            CHILD_SELECTOR,
            fleet.cache.remember_child,
            fleet.relisted,
            request_timeout=request_timeout,
        ),
        namespaces=fleet_namespaces,
        request_timeout=request_timeout,
    )
    namespace_listings.take_listed_namespaces()
    asyncio.run(
        kopf.operator(
            clusterwide=fleet_namespaces is None,
            namespaces=namespaces,
            standalone=standalone,
            liveness_endpoint=f"http://0.0.0.0:{health_port}/healthz",
            stop_flag=stop_flag,
            memo=handlers.memo_for(running),
        )
    )
    if election is not None and election.lost:
        # A restart comes back as a standby, with nothing stale in memory.
        raise typer.Exit(1)


def _kept_schedule_key(api: Any, secret: str, timeout: float) -> bytes:
    """The key in the Secret --schedule-key-secret names, created when absent."""
    import os

    from specfleet.operator import schedule_key

    namespace, _, name = secret.rpartition("/")
    namespace = namespace or os.environ.get("POD_NAMESPACE", "")
    if not namespace or not name:
        typer.echo(
            f"--schedule-key-secret: {secret!r} names no namespace (NAMESPACE/NAME, or set "
            "POD_NAMESPACE)",
            err=True,
        )
        raise typer.Exit(2)
    try:
        return schedule_key.ensure(api, namespace, name, timeout)
    except schedule_key.ScheduleKeyError as error:
        typer.echo(f"--schedule-key-secret: {error}", err=True)
        raise typer.Exit(2) from None


@app.command("simulate")
def simulate_command(
    scenario: Annotated[Path, typer.Option("--scenario", help="Scenario file (YAML).")],
    variant: Annotated[
        str | None,
        typer.Option(help="The file's variant to run, e.g. chat/c8/published (see its name)."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed of the simulated engines.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a PNG of the run.")] = None,
) -> None:
    """Run the tuner against simulated engines over a scenario; compare with oracles."""
    from specfleet.operator import simulate

    try:
        loaded = simulate.load_scenario(scenario, variant)
        result = simulate.simulate(loaded, seed)
    except ValidationError as error:
        # The scenario's own fields, or its policy (a SpeculativeModel's spec).
        policy = error.title == api.SpeculativeModelSpec.__name__
        for e in error.errors():
            line = describe(e, api.SpeculativeModelSpec if policy else None)
            typer.echo(f"{scenario}: {'policy.' if policy else ''}{line}", err=True)
        raise typer.Exit(2) from None
    except UnicodeDecodeError as error:
        typer.echo(f"{scenario}: cannot read: not UTF-8 text ({error.reason})", err=True)
        raise typer.Exit(2) from None
    except OSError as error:
        typer.echo(f"{scenario}: cannot read: {error.strerror or error}", err=True)
        raise typer.Exit(2) from None
    except (ValueError, yaml.YAMLError) as error:
        typer.echo(f"{scenario}: {' '.join(str(error).split())}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(result.to_json(), indent=2) if as_json else simulate.report(result))
    if plot is not None:
        simulate.plot(result, plot)


def main() -> None:
    app(prog_name="specfleet")


if __name__ == "__main__":
    main()
