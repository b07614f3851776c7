"""The runtime's config: the contract between the operator and each pod.

The operator renders a `RuntimeConfig` into the container's args (`to_args`), and the
pod parses them back (`parse_serve_args`). Parsing follows vLLM's own CLI: the last
occurrence of a flag wins, so args appended after the rendered ones (`--port 9000`)
override them.
"""

from __future__ import annotations

import argparse
import ipaddress
import itertools
import os
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Annotated, NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

MAX_SPECULATIVE_TOKENS = 32  # P-EAGLE's limit, the largest any method allows
# The end of a band for every batch size (the operator's MAX_BATCH); vLLM clips it to its
# max_num_seqs.
ALL_BATCHES_END = 65536
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
ENV_ENGINE = "SPECFLEET_ENGINE"
ENV_TERMINATION_LOG = "SPECFLEET_TERMINATION_LOG"
ENV_SIM_PROFILE = "SPECFLEET_SIM_PROFILE"
ENV_SIM_SEED = "SPECFLEET_SIM_SEED"
# The pod's IP (the operator renders it from status.podIP): its family is the pod's.
ENV_POD_IP = "POD_IP"


class ConfigError(ValueError):
    """An invalid runtime config; its message is one line, fit for a termination log."""


class Drafting(StrEnum):
    """How a draft's cost grows with K: the shape of a step's time."""

    PARALLEL = "Parallel"  # all K tokens in one pass: nearly flat in K
    SEQUENTIAL = "Sequential"  # one draft pass per token
    LOOKUP = "Lookup"  # looked up (n-grams, suffix trees): next to nothing


class Method(StrEnum):
    """How a pod speculates: vLLM 0.33's methods, P-EAGLE named on its own."""

    PEAGLE = "peagle"  # an EAGLE-3 head drafting all K tokens in one pass
    EAGLE3 = "eagle3"
    EAGLE = "eagle"
    MTP = "mtp"  # the target's own multi-token-prediction layers
    DRAFT_MODEL = "draft_model"  # a small LM of the target's vocabulary
    DFLASH = "dflash"  # a block-diffusion draft: all K tokens in one pass
    DSPARK = "dspark"  # parallel drafting, confidence-scheduled verification
    NGRAM = "ngram"  # prompt lookup
    NGRAM_GPU = "ngram_gpu"  # prompt lookup on the GPU
    SUFFIX = "suffix"  # suffix-tree decoding: the draft length adapts per step
    NONE = "none"

    @property
    def vllm_name(self) -> str:
        # P-EAGLE is EAGLE-3 with parallel drafting; vLLM has no "peagle" method.
        return Method.EAGLE3.value if self is Method.PEAGLE else self.value

    @property
    def speculates(self) -> bool:
        return self is not Method.NONE

    @property
    def needs_draft_model(self) -> bool:
        """A draft checkpoint of its own is required."""
        return self in (
            Method.PEAGLE, Method.EAGLE3, Method.EAGLE, Method.DRAFT_MODEL, Method.DFLASH
        )  # fmt: skip

    @property
    def takes_draft_model(self) -> bool:
        """A draft checkpoint may be given: MTP heads and DSpark drafts may ship inside the
        target (then none is), or separately (a Gemma-4 assistant, a Qwen3 DSpark draft)."""
        return self.needs_draft_model or self in (Method.MTP, Method.DSPARK)

    @property
    def learned_draft(self) -> bool:
        """A network drafts, with a distribution to sample from (not a lookup)."""
        return self.takes_draft_model

    @property
    def parallel_drafting(self) -> bool:
        """All K draft tokens in one forward pass: a draft's cost hardly grows with K."""
        return self in (Method.PEAGLE, Method.DFLASH, Method.DSPARK)

    @property
    def drafting(self) -> Drafting:
        if self.parallel_drafting:
            return Drafting.PARALLEL
        return Drafting.SEQUENTIAL if self.learned_draft else Drafting.LOOKUP

    @property
    def prompt_lookup(self) -> bool:
        return self in (Method.NGRAM, Method.NGRAM_GPU)

    @property
    def tuned(self) -> bool:
        """K means the same every step, so the operator tunes it. Suffix decoding picks
        its draft length per step up to K (its cap), so K stays where the spec puts it."""
        return self.speculates and self is not Method.SUFFIX


class DraftSampleMethod(StrEnum):
    """How the draft picks its tokens (vLLM's `draft_sample_method`)."""

    GREEDY = "greedy"  # argmax; verification treats the draft as one-hot (vLLM's default)
    PROBABILISTIC = "probabilistic"  # samples; verification uses the draft's probabilities


class RejectionSampleMethod(StrEnum):
    """How vLLM verifies drafts (its `rejection_sample_method`; `synthetic` is a test mode
    and not offered)."""

    STANDARD = "standard"
    BLOCK = "block"  # accepts a block of drafts jointly (vLLM's model runner v2)
    FLY = "fly"  # FLy: defers rejection over a window; needs K >= 2, not on CPU


class Engine(StrEnum):
    VLLM = "vllm"
    SIM = "sim"


PositiveInt = Annotated[int, Field(ge=1)]


class BatchScheduleEntry(BaseModel):
    """Batch sizes start..end (inclusive) use k speculative tokens (vLLM's schedule)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start: PositiveInt
    end: PositiveInt
    k: Annotated[int, Field(ge=0, le=MAX_SPECULATIVE_TOKENS)]

    @model_validator(mode="after")
    def _ordered(self) -> BatchScheduleEntry:
        if self.start > self.end:
            raise ValueError(f"batch schedule {self}: start must be <= end")
        return self

    def __str__(self) -> str:
        return f"{self.start}:{self.end}:{self.k}"

    @classmethod
    def parse(cls, text: str) -> BatchScheduleEntry:
        parts = text.split(":")
        if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
            raise ValueError(f"--batch-schedule {text!r} is not START:END:K (e.g. 1:8:5)")
        start, end, k = (int(p) for p in parts)
        return cls(start=start, end=end, k=k)


class RuntimeConfig(BaseModel):
    """Everything a pod's runtime needs: what to serve, how to speculate, where to bind."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: Annotated[str, Field(min_length=1)]
    served_model_name: str | None = None
    method: Method = Method.NONE
    draft_model: str | None = None
    num_speculative_tokens: Annotated[int, Field(ge=1, le=MAX_SPECULATIVE_TOKENS)] | None = None
    draft_tensor_parallel_size: PositiveInt | None = None
    draft_sample_method: DraftSampleMethod | None = None
    rejection_sample_method: RejectionSampleMethod | None = None
    # vLLM's enable_adaptive_verification: the engine verifies per step at most K drafts.
    adaptive_verification: bool = False
    prompt_lookup_min: PositiveInt | None = None
    prompt_lookup_max: PositiveInt | None = None
    suffix_max_tree_depth: PositiveInt | None = None
    suffix_max_cached_requests: Annotated[int, Field(ge=0)] | None = None
    suffix_max_spec_factor: Annotated[float, Field(ge=0)] | None = None
    suffix_min_token_prob: Annotated[float, Field(ge=0, le=1)] | None = None
    batch_schedule: tuple[BatchScheduleEntry, ...] = ()
    # The engine takes new schedules between steps (GET/POST /specfleet/schedule): it
    # starts with --num-speculative-tokens as its ceiling and a schedule (the one given,
    # else that K for every batch size), and exports per-step statistics.
    hot_schedule: bool = False
    tensor_parallel_size: PositiveInt = 1
    pipeline_parallel_size: PositiveInt = 1
    data_parallel_size: PositiveInt = 1
    # A replica across nodes (vLLM's multi-node launch without Ray): nodes, this one's
    # rank, and the leader's address (rank 0, which runs the API server); the other
    # ranks run headless, their GPUs' workers joining the leader's.
    nnodes: PositiveInt = 1
    node_rank: Annotated[int, Field(ge=0)] = 0
    master_addr: str | None = None
    host: str | None = None
    port: Annotated[int, Field(ge=1, le=65535)] | None = None
    termination_log: str = DEFAULT_TERMINATION_LOG
    engine: Engine = Engine.VLLM
    sim_profile: str | None = None
    seed: int | None = None
    extra_args: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> RuntimeConfig:
        method = self.method
        if method.needs_draft_model and not self.draft_model:
            raise ValueError(f"method {method} needs --draft-model")
        if self.draft_model and method.speculates and not method.takes_draft_model:
            raise ValueError(f"method {method} takes no --draft-model")
        # Suffix decoding's K is optional: vLLM caps it at the tree depth.
        if method.tuned and self.num_speculative_tokens is None:
            raise ValueError(f"method {method} needs --num-speculative-tokens")
        if self.draft_sample_method is not None and method.speculates and not method.learned_draft:
            raise ValueError(
                f"--draft-sample-method needs a draft network (method {method} looks drafts up)"
            )
        if (
            self.rejection_sample_method is RejectionSampleMethod.FLY
            and (self.num_speculative_tokens or 0) < 2
        ):
            raise ValueError("--rejection-sample-method fly needs --num-speculative-tokens >= 2")
        if self.hot_schedule and not method.tuned:
            raise ValueError(f"--hot-schedule needs a method with a fixed K, not {method}")
        if self.adaptive_verification and method is not Method.DSPARK:
            raise ValueError(f"--adaptive-verification applies to method dspark only, not {method}")
        if not method.prompt_lookup and method.speculates and self.prompt_lookup_given:
            raise ValueError(
                "--prompt-lookup-min/--prompt-lookup-max apply to methods ngram and ngram_gpu only"
            )
        if method is not Method.SUFFIX and self.suffix_given:
            raise ValueError("--suffix-* options apply to method suffix only")
        if (
            self.prompt_lookup_min is not None
            and self.prompt_lookup_max is not None
            and self.prompt_lookup_min > self.prompt_lookup_max
        ):
            raise ValueError("--prompt-lookup-min must be <= --prompt-lookup-max")
        if self.draft_tensor_parallel_size not in (None, 1, self.tensor_parallel_size):
            raise ValueError(
                "--draft-tensor-parallel-size must be 1 or the --tensor-parallel-size "
                f"({self.tensor_parallel_size})"
            )
        # vLLM 0.33 drops per-batch schedules with data parallel > 1 (ranks could pick
        # different Ks and deadlock): refused, so no schedule is believed in force.
        if self.data_parallel_size > 1 and (self.batch_schedule or self.hot_schedule):
            raise ValueError(
                "--batch-schedule and --hot-schedule need --data-parallel-size 1: vLLM "
                "drops per-batch K schedules with data parallel ranks"
            )
        if self.nnodes > 1 and not self.master_addr:
            raise ValueError("--nnodes above 1 needs --master-addr, the leader's address")
        if self.node_rank >= self.nnodes:
            raise ValueError(f"--node-rank {self.node_rank} must be below --nnodes {self.nnodes}")
        if (self.tensor_parallel_size * self.pipeline_parallel_size) % self.nnodes:
            raise ValueError(
                f"--nnodes {self.nnodes} must divide tensor x pipeline parallel size "
                f"({self.tensor_parallel_size * self.pipeline_parallel_size}): vLLM splits "
                "its ranks evenly over the nodes"
            )
        if self.nnodes > 1 and self.data_parallel_size > 1:
            raise ValueError("--nnodes above 1 needs --data-parallel-size 1")
        if self.adaptive_verification and self.pipeline_parallel_size > 1:
            raise ValueError(
                "--adaptive-verification needs --pipeline-parallel-size 1 (vLLM refuses it "
                "with pipeline parallelism)"
            )
        self._check_schedule()
        return self

    @property
    def headless(self) -> bool:
        """A worker of a replica across nodes: no API server, its engine joins rank 0's."""
        return self.node_rank > 0

    @property
    def gpus_needed(self) -> int:
        """GPUs one engine uses on this node: a tensor x pipeline group per data parallel
        rank, split evenly over --nnodes."""
        return (
            self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size
        ) // self.nnodes

    def _check_schedule(self) -> None:
        if not self.batch_schedule or not self.method.speculates:
            return
        k_max = self.num_speculative_tokens or 0
        # The same rules vLLM enforces at start-up, so a bad schedule fails here with a
        # one-line reason instead of deep inside the engine.
        entries = sorted(self.batch_schedule, key=lambda e: e.start)
        if entries[0].start != 1:
            raise ValueError("--batch-schedule must start at batch size 1")
        for before, after in itertools.pairwise(entries):
            if after.start <= before.end:
                raise ValueError(f"--batch-schedule ranges {before} and {after} overlap")
        for entry in entries:
            if entry.k > k_max:
                raise ValueError(
                    f"--batch-schedule {entry}: K must be <= --num-speculative-tokens ({k_max})"
                )

    @property
    def prompt_lookup_given(self) -> bool:
        return self.prompt_lookup_min is not None or self.prompt_lookup_max is not None

    @property
    def suffix_given(self) -> bool:
        return any(
            value is not None
            for value in (
                self.suffix_max_tree_depth,
                self.suffix_max_cached_requests,
                self.suffix_max_spec_factor,
                self.suffix_min_token_prob,
            )
        )

    @property
    def name_served(self) -> str:
        """The name clients and metrics use: the served name, else the model."""
        return self.served_model_name or self.model

    @property
    def startup_schedule(self) -> tuple[BatchScheduleEntry, ...]:
        """The schedule vLLM starts with: the one given, else with --hot-schedule the
        ceiling for every batch size (without one, vLLM could never take another)."""
        if self.batch_schedule or not self.hot_schedule or self.num_speculative_tokens is None:
            return self.batch_schedule
        return (BatchScheduleEntry(start=1, end=ALL_BATCHES_END, k=self.num_speculative_tokens),)

    def k_for_batch(self, batch: int) -> int:
        """K in effect at a batch size: the schedule's entry (carried over gaps), else K."""
        k_max = self.num_speculative_tokens or 0
        if not self.method.speculates:
            return 0
        k = k_max
        for entry in sorted(self.batch_schedule, key=lambda e: e.start):
            if entry.start > batch:
                break
            k = entry.k  # a gap after an entry keeps that entry's K, as vLLM does
            if batch <= entry.end:
                break
        return min(k, k_max)

    def to_args(self) -> list[str]:
        """The `specfleet-runtime serve` args that parse back to this config."""
        args = ["--model", self.model]
        options: list[tuple[str, object]] = [
            ("--served-model-name", self.served_model_name),
            ("--method", self.method.value),
            ("--draft-model", self.draft_model),
            ("--num-speculative-tokens", self.num_speculative_tokens),
            ("--draft-tensor-parallel-size", self.draft_tensor_parallel_size),
            ("--draft-sample-method", self.draft_sample_method),
            ("--rejection-sample-method", self.rejection_sample_method),
            ("--prompt-lookup-min", self.prompt_lookup_min),
            ("--prompt-lookup-max", self.prompt_lookup_max),
            ("--suffix-max-tree-depth", self.suffix_max_tree_depth),
            ("--suffix-max-cached-requests", self.suffix_max_cached_requests),
            ("--suffix-max-spec-factor", self.suffix_max_spec_factor),
            ("--suffix-min-token-prob", self.suffix_min_token_prob),
            *(("--batch-schedule", entry) for entry in self.batch_schedule),
            ("--tensor-parallel-size", self.tensor_parallel_size),
            *_above_one("--pipeline-parallel-size", self.pipeline_parallel_size),
            *_above_one("--data-parallel-size", self.data_parallel_size),
            *_above_one("--nnodes", self.nnodes),
            ("--node-rank", self.node_rank or None),
            ("--master-addr", self.master_addr),
            ("--host", self.host),
            ("--port", self.port),
            ("--sim-profile", self.sim_profile),
            ("--seed", self.seed),
        ]
        for flag, value in options:
            if value is not None:
                args += [flag, str(value)]
        if self.adaptive_verification:
            args.append("--adaptive-verification")
        if self.hot_schedule:
            args.append("--hot-schedule")
        if self.termination_log != DEFAULT_TERMINATION_LOG:
            args += ["--termination-log", self.termination_log]
        if self.engine is not Engine.VLLM:
            args += ["--engine", self.engine.value]
        if self.extra_args:
            args += ["--", *self.extra_args]
        return args


def _above_one(flag: str, size: int) -> list[tuple[str, object]]:
    """A parallel size's option, left out at 1 (the default) so older args stay as they were."""
    return [(flag, size)] if size > 1 else []


class _Parser(argparse.ArgumentParser):
    """argparse that raises ConfigError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


def _parser() -> _Parser:
    parser = _Parser(
        prog="specfleet-runtime serve",
        add_help=False,
        allow_abbrev=False,
        usage="%(prog)s --model NAME [options] [-- EXTRA_VLLM_ARGS...]",
        description="Validate the args, run the preflight checks, then run `vllm serve` (or "
        "the simulated engine). A failure exits 1 with a one-line reason on stderr and in "
        "the termination log.",
        epilog="Everything after `--` is passed to `vllm serve` as given, but for the flags "
        "this runtime sets (--model, --speculative-config, ...) and the speculative flags "
        "of vLLM before 0.8, which are refused. See docs/runtime.md.",
    )
    add = parser.add_argument
    add(
        "--model",
        required=True,
        metavar="NAME",
        help="target model: a hub name or a local directory",
    )
    add(
        "--served-model-name",
        metavar="NAME",
        help="the name clients and the metrics' model_name label use",
    )
    add(
        "--method",
        choices=[m.value for m in Method],
        default=Method.NONE.value,
        help="speculation method (default: none)",
    )
    add(
        "--draft-model",
        metavar="NAME",
        help="the draft's hub name or local directory (methods with a draft)",
    )
    add(
        "--num-speculative-tokens",
        type=int,
        metavar="K",
        help=f"K, 1..{MAX_SPECULATIVE_TOKENS}; required unless method is none or suffix",
    )
    add(
        "--draft-tensor-parallel-size",
        type=int,
        metavar="N",
        help="1 or the target's tensor parallel size",
    )
    add(
        "--draft-sample-method",
        choices=[m.value for m in DraftSampleMethod],
        help="how drafts are sampled (methods with a draft network only)",
    )
    add(
        "--rejection-sample-method",
        choices=[m.value for m in RejectionSampleMethod],
        help="how drafts are verified; fly needs K >= 2",
    )
    add(
        "--adaptive-verification",
        action="store_true",
        help="dspark: the engine verifies per step as many drafts as pay, at most K",
    )
    add("--prompt-lookup-min", type=int, metavar="N", help="ngram and ngram_gpu: shortest match")
    add("--prompt-lookup-max", type=int, metavar="N", help="ngram and ngram_gpu: longest match")
    add("--suffix-max-tree-depth", type=int, metavar="N", help="suffix: depth of the suffix trees")
    add(
        "--suffix-max-cached-requests",
        type=int,
        metavar="N",
        help="suffix: requests in the global tree",
    )
    add(
        "--suffix-max-spec-factor",
        type=float,
        metavar="X",
        help="suffix: draft tokens per matched token",
    )
    add(
        "--suffix-min-token-prob",
        type=float,
        metavar="X",
        help="suffix: least likelihood of a draft token",
    )
    add(
        "--batch-schedule",
        action="append",
        default=[],
        metavar="START:END:K",
        help="repeatable: K for batch sizes START..END (from 1, not overlapping)",
    )
    add(
        "--hot-schedule",
        action="store_true",
        help="the engine takes new schedules between steps (GET/POST /specfleet/schedule, "
        "the operator's credential only), K up to --num-speculative-tokens",
    )
    add("--tensor-parallel-size", type=int, metavar="N", default=1, help="the target's (default 1)")
    add(
        "--pipeline-parallel-size",
        type=int,
        metavar="N",
        default=1,
        help="the target's pipeline stages (default 1)",
    )
    add(
        "--data-parallel-size",
        type=int,
        metavar="N",
        default=1,
        help="engine replicas in the pod (default 1); no per-batch schedules above 1",
    )
    add("--nnodes", type=int, metavar="N", default=1, help="nodes one replica spans (default 1)")
    add(
        "--node-rank",
        type=int,
        metavar="N",
        default=0,
        help="this node's rank in its replica: 0 runs the API server, the others run headless",
    )
    add("--master-addr", metavar="HOST", help="with --nnodes above 1: rank 0's address")
    add(
        "--host",
        help=f"where to listen (default: every address of the pod: :: where {ENV_POD_IP} is "
        "an IPv6 address, else vLLM's default, every IPv4 address)",
    )
    add("--port", type=int, metavar="N", help="where to listen (vLLM's default: 8000)")
    add(
        "--termination-log",
        metavar="PATH",
        help=f"where a failure is written (env {ENV_TERMINATION_LOG}, else "
        f"{DEFAULT_TERMINATION_LOG})",
    )
    add(
        "--engine",
        choices=[e.value for e in Engine],
        help=f"vllm or the simulated engine (env {ENV_ENGINE}, else vllm)",
    )
    add(
        "--sim-profile",
        metavar="FILE_OR_YAML",
        help=f"the simulated engine's profile: a path or the YAML itself (env {ENV_SIM_PROFILE})",
    )
    add("--seed", type=int, metavar="N", help=f"the simulated engine's seed (env {ENV_SIM_SEED})")
    add(
        "--dry-run",
        action="store_true",
        help="check the args (and the sim profile), print the vLLM argv as a JSON list and "
        "exit: 0, or 1 with the reason on stderr only",
    )
    return parser


def serve_help() -> str:
    """`specfleet-runtime serve --help`: every flag, from the parser itself."""
    return _parser().format_help()


def split_extra(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """The runtime's own args and the extra `vllm serve` args after the first `--`."""
    if "--" in argv:
        cut = list(argv).index("--")
        return list(argv[:cut]), list(argv[cut + 1 :])
    return list(argv), []


def termination_log_path(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """Where to write a failure, found even when the rest of the args do not parse."""
    own, _ = split_extra(argv)
    path = env.get(ENV_TERMINATION_LOG) or DEFAULT_TERMINATION_LOG
    for index, arg in enumerate(own):
        if arg == "--termination-log" and index + 1 < len(own):
            path = own[index + 1]
        elif arg.startswith("--termination-log="):
            path = arg.split("=", 1)[1]
    return path


def one_line(error: ValidationError) -> str:
    """A pydantic error as one line: each problem's message, joined."""
    messages = []
    for detail in error.errors():
        text = str(detail["msg"]).removeprefix("Value error, ")
        where = ".".join(str(part) for part in detail["loc"])
        messages.append(f"{where}: {text}" if where else text)
    return "; ".join(messages)


def ipv6_pod(env: Mapping[str, str]) -> bool:
    """The pod's IP (POD_IP) is an IPv6 address: an IPv6 or IPv6-first dual-stack pod."""
    try:
        return ipaddress.ip_address(env.get(ENV_POD_IP, "").split("%")[0]).version == 6
    except ValueError:
        return False


def listen_host(env: Mapping[str, str]) -> str | None:
    """Where the engine listens when --host is not given: every address of the pod, the
    loopback included, so that `kubectl port-forward` (which connects to localhost in the
    pod's network namespace) reaches it as the Service and the operator do. vLLM 0.33
    binds one socket of --host's family (launchers/launcher.py, create_server_socket):
    with none, every IPv4 address; with `::` every IPv6 address, and on Linux the IPv4
    ones too (it sets no IPV6_V6ONLY, and net.ipv6.bindv6only is 0 unless changed).
    `::` only on an IPv6 pod: a node may have IPv6 off, where `::` cannot be bound."""
    return "::" if ipv6_pod(env) else None


def loopback_url(env: Mapping[str, str], port: int, path: str) -> str:
    """A URL of the engine from inside its pod, on the loopback of the pod's family."""
    host = "[::1]" if ipv6_pod(env) else "127.0.0.1"
    return f"http://{host}:{port}{path}"


def parse_serve_args(
    argv: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[RuntimeConfig, bool]:
    """The config from `serve` args (and SPECFLEET_* env defaults), and whether --dry-run."""
    env = os.environ if env is None else env
    own, extra = split_extra(argv)
    namespace = _parser().parse_args(own)
    seed = namespace.seed
    if seed is None and env.get(ENV_SIM_SEED):
        try:
            seed = int(env[ENV_SIM_SEED])
        except ValueError:
            raise ConfigError(f"{ENV_SIM_SEED}={env[ENV_SIM_SEED]!r} is not an integer") from None
    try:
        schedule = tuple(BatchScheduleEntry.parse(text) for text in namespace.batch_schedule)
        config = RuntimeConfig(
            model=namespace.model,
            served_model_name=namespace.served_model_name,
            method=Method(namespace.method),
            draft_model=namespace.draft_model,
            num_speculative_tokens=namespace.num_speculative_tokens,
            draft_tensor_parallel_size=namespace.draft_tensor_parallel_size,
            draft_sample_method=namespace.draft_sample_method,
            rejection_sample_method=namespace.rejection_sample_method,
            adaptive_verification=namespace.adaptive_verification,
            prompt_lookup_min=namespace.prompt_lookup_min,
            prompt_lookup_max=namespace.prompt_lookup_max,
            suffix_max_tree_depth=namespace.suffix_max_tree_depth,
            suffix_max_cached_requests=namespace.suffix_max_cached_requests,
            suffix_max_spec_factor=namespace.suffix_max_spec_factor,
            suffix_min_token_prob=namespace.suffix_min_token_prob,
            batch_schedule=schedule,
            hot_schedule=namespace.hot_schedule,
            tensor_parallel_size=namespace.tensor_parallel_size,
            pipeline_parallel_size=namespace.pipeline_parallel_size,
            data_parallel_size=namespace.data_parallel_size,
            nnodes=namespace.nnodes,
            node_rank=namespace.node_rank,
            master_addr=namespace.master_addr,
            host=namespace.host if namespace.host is not None else listen_host(env),
            port=namespace.port,
            termination_log=termination_log_path(argv, env),
            engine=Engine(namespace.engine or env.get(ENV_ENGINE) or Engine.VLLM.value),
            sim_profile=namespace.sim_profile or env.get(ENV_SIM_PROFILE) or None,
            seed=seed,
            extra_args=tuple(extra),
        )
    except ValidationError as error:
        raise ConfigError(one_line(error)) from None
    except ValueError as error:  # an unknown SPECFLEET_ENGINE, a malformed schedule
        raise ConfigError(str(error)) from None
    return config, bool(namespace.dry_run)
