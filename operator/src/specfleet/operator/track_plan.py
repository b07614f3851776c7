"""What each track's pods run, worked out in one place from the spec and status: the
config (the spec's; while a new one is on trial or was rejected, the last good one on the
stable pods and the new one on the canary), the method, K and schedule, whether the
stable pods take K hot, how many pods, and the runtime container they run with the hash
that names it. `render` renders the pods from it, `pod_reading` finds the pods that run
it by that hash and reads their windows at its K, the tuner learns the stable pods'
speed for their drafting style, and the simulator runs its pods by it. Pure: a function
of (spec, status)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from specfleet.operator import hot_schedules, runtime_container
from specfleet.operator.api import (
    DraftMethod,
    ScheduledBand,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
)
from specfleet.operator.children import Track
from specfleet.operator.configs import track_specs


@dataclass(frozen=True)
class TrackPlan:
    """What one track's pods run."""

    # The spec as they run it: a config other than the spec's is rendered whole from
    # what it last ran with (target, draft, runtime, pod settings), not from the spec's
    # other fields of the new commit; K bounds and replicas stay the spec's.
    spec: SpeculativeModelSpec
    method: DraftMethod  # NONE: plain decoding
    tokens: int  # the K they run (0: plain decoding); under `hot`, not the template's
    schedule: list[ScheduledBand] | None  # K by batch size; tokens is then its largest
    hot: bool  # the engine takes K hot: its template holds the ceiling, no schedule
    replicas: int

    @property
    def template_tokens(self) -> int:
        """K in the pods' template. Pods that take K hot start at their ceiling for every
        batch (the runtime's default) until the schedule is handed to them as they turn
        Ready: nothing the tuner or a spec edit of speculation.tokens changes is in it."""
        return self.spec.speculation.max_tokens if self.hot else self.tokens

    @cached_property
    def container(self) -> dict[str, Any]:
        """The runtime container the pods run, rendered once a plan (not to be changed:
        the hash below is of it)."""
        schedule = None if self.hot else self.schedule
        return runtime_container.container(
            self.spec, self.method, self.template_tokens, schedule, self.hot
        )

    @cached_property
    def config_hash(self) -> str:
        """The hash that names the pods' config (render.CONFIG_HASH_ANNOTATION): a pod
        with another runs another config, being rolled out or rolled away."""
        return runtime_container.config_hash(self.container)


@dataclass(frozen=True)
class TrackPlans:
    stable: TrackPlan
    canary: TrackPlan

    def __getitem__(self, track: Track) -> TrackPlan:
        return self.stable if track == "stable" else self.canary


def plan(spec: SpeculativeModelSpec, status: SpeculativeModelStatus) -> TrackPlans:
    """Both tracks' plans; the canary without a candidate (0 pods) at the stable K."""
    sp, canary = status.speculation, status.canary_run
    stable_spec, canary_spec = track_specs(spec, status.config)
    stable_method = DraftMethod.NONE if sp.decoding_plainly else stable_spec.draft.method
    stable_tokens = sp.tokens or spec.speculation.tokens
    plain = stable_method is DraftMethod.NONE
    stable = TrackPlan(
        spec=stable_spec,
        method=stable_method,
        tokens=0 if plain else stable_tokens,
        schedule=None if plain else sp.schedule,
        hot=hot_schedules.in_effect(stable_spec, status),
        replicas=spec.replicas,
    )
    if canary is None:
        method, tokens, bands = canary_spec.draft.method, stable_tokens, sp.schedule
    else:
        # A canary trying K=0 measures plain decoding (plain.py).
        method = DraftMethod.NONE if canary[0] == 0 else canary_spec.draft.method
        tokens, bands = canary
    plain = method is DraftMethod.NONE
    return TrackPlans(
        stable=stable,
        canary=TrackPlan(
            spec=canary_spec,
            method=method,
            tokens=0 if plain else tokens,
            schedule=None if plain else bands,
            hot=False,
            replicas=0 if canary is None else 1,
        ),
    )
