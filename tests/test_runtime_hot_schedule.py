"""Hot schedules, the pure part: what a running engine may be given, the generation rule,
the operator's credential, and how the runtime starts vLLM for them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specfleet.runtime.cli import engine_env
from specfleet.runtime.config import ConfigError, parse_serve_args
from specfleet.runtime.hot_schedule import (
    ENDPOINT_PLUGIN,
    ENV_STEP_STATS,
    ENV_TOKEN,
    ENV_TOKEN_FILE,
    ScheduleRefused,
    ScheduleState,
    authorize,
    ks_in_force,
    parse_schedule,
    plugin_allowlist,
    requested_generation,
    requested_schedule,
)
from specfleet.runtime.vllm_args import vllm_argv

CEILING, MAX_NUM_SEQS = 4, 256


def test_a_single_k_is_one_band_over_every_batch_size() -> None:
    assert requested_schedule({"k": 2}, CEILING, MAX_NUM_SEQS) == ((1, MAX_NUM_SEQS, 2),)
    assert requested_schedule({"k": 0}, CEILING, MAX_NUM_SEQS) == ((1, MAX_NUM_SEQS, 0),)


def test_bands_are_sorted_and_may_leave_gaps_and_plain_decoding() -> None:
    bands = [[17, 256, 0], [1, 4, 4], [5, 8, 1]]
    assert parse_schedule(bands, CEILING) == ((1, 4, 4), (5, 8, 1), (17, 256, 0))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ([[1, 8, 5]], "K=5 is above this engine's ceiling"),
        ([[1, 8, -1]], "K must be >= 0"),
        ([[2, 8, 1]], "must start at batch size 1"),
        ([[1, 8, 1], [8, 16, 2]], "overlap"),
        ([[1, 0, 1]], "1 <= start <= end"),
        ([[1, 8]], "is not [start, end, K]"),
        ([[1, 8, True]], "is not an integer"),
        ([[1, 8, 1.5]], "is not an integer"),
        ([], "non-empty list"),
        ({"1": 2}, "non-empty list"),
    ],
)
def test_a_schedule_the_engine_cannot_take_is_refused_with_its_reason(
    value: object, reason: str
) -> None:
    with pytest.raises(ScheduleRefused, match=reason.replace("[", r"\[")) as refused:
        parse_schedule(value, CEILING)
    assert refused.value.status == 422


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"generation": 1}, "exactly one of"),
        ({"generation": 1, "k": 1, "schedule": [[1, 1, 1]]}, "exactly one of"),
    ],
)
def test_a_request_names_either_bands_or_one_k(body: dict[str, Any], reason: str) -> None:
    with pytest.raises(ScheduleRefused, match=reason):
        requested_schedule(body, CEILING, MAX_NUM_SEQS)


@pytest.mark.parametrize("generation", [None, 0, -3, "2", 1.0])
def test_a_generation_is_a_positive_integer(generation: object) -> None:
    with pytest.raises(ScheduleRefused):
        requested_generation({"generation": generation})
    assert requested_generation({"generation": 7}) == 7


def test_generations_only_move_forward_and_a_repeat_is_a_no_op() -> None:
    state = ScheduleState(((1, 256, 4),))
    k1, k2 = ((1, 256, 1),), ((1, 4, 4), (5, 256, 2))
    assert state.decide(1, k1) is True
    state.schedule, state.generation = k1, 1
    assert state.decide(1, k1) is False  # the same request again: done already
    with pytest.raises(ScheduleRefused, match="in force with another schedule") as reused:
        state.decide(1, k2)
    assert reused.value.status == 409
    assert state.decide(3, k2) is True  # a newer generation, whatever it skipped
    state.schedule, state.generation = k2, 3
    with pytest.raises(ScheduleRefused, match="generation 2 is older than 3") as older:
        state.decide(2, k1)
    assert older.value.status == 409


def test_the_ks_in_force_come_from_the_dense_lookup() -> None:
    assert ks_in_force([0, 4, 4, 1, 1, 0]) == [0, 1, 4]


def test_only_the_operator_s_credential_passes(tmp_path: Path) -> None:
    env = {ENV_TOKEN: "s3cret"}
    assert authorize("Bearer s3cret", env) is None
    assert authorize("bearer  s3cret ", env) is None
    assert authorize(None, env) == (401, "a bearer credential is required")
    assert authorize("Basic s3cret", env) == (401, "a bearer credential is required")
    assert authorize("Bearer ", env) == (401, "a bearer credential is required")
    assert authorize("Bearer s3cre", env) == (403, "wrong credential")
    assert authorize("Bearer s3cret", {})[0] == 403  # type: ignore[index]
    # From a mounted Secret, re-read on every request: a rotation takes effect at once,
    # and the file wins over the variable.
    token = tmp_path / "token"
    token.write_text("first\n")
    env = {ENV_TOKEN_FILE: str(token), ENV_TOKEN: "s3cret"}
    assert authorize("Bearer first", env) is None
    assert authorize("Bearer s3cret", env) == (403, "wrong credential")
    token.write_text("second")
    assert authorize("Bearer first", env) == (403, "wrong credential")
    assert authorize("Bearer second", env) is None
    token.write_text("")
    assert authorize("Bearer ", env)[0] == 403  # type: ignore[index]
    token.unlink()
    assert authorize("Bearer second", env)[0] == 403  # type: ignore[index]


def test_the_allowlist_keeps_every_installed_plugin_and_adds_the_endpoint() -> None:
    installed = ["specfleet_cpu_fix", "someone_else"]
    unset = plugin_allowlist(None, installed).split(",")
    assert unset[:2] == installed and ENDPOINT_PLUGIN in unset
    assert len(unset) == len(set(unset))
    chosen = plugin_allowlist("only_this", installed).split(",")
    assert chosen[0] == "only_this" and "someone_else" not in chosen
    assert {"specfleet_hot_schedule", "specfleet_step_stats", ENDPOINT_PLUGIN} <= set(chosen)


PEAGLE = ["--model", "t", "--method", "peagle", "--draft-model", "d", "--num-speculative-tokens"]


def _speculative(argv: list[str]) -> dict[str, Any]:
    return dict(json.loads(argv[argv.index("--speculative-config") + 1]))


def test_a_hot_pod_starts_with_its_ceiling_everywhere_and_per_step_details() -> None:
    config, _ = parse_serve_args([*PEAGLE, "4", "--hot-schedule"], env={})
    argv = vllm_argv(config)
    spec = _speculative(argv)
    assert spec["num_speculative_tokens"] == 4
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 65536, 4]]
    assert "--enable-logging-iteration-details" in argv
    assert parse_serve_args(config.to_args(), env={})[0] == config
    # A schedule given is the startup schedule; the ceiling stays the K flag.
    given, _ = parse_serve_args([*PEAGLE, "4", "--hot-schedule", "--batch-schedule", "1:8:2"], {})
    assert _speculative(vllm_argv(given))["num_speculative_tokens_per_batch_size"] == [[1, 8, 2]]
    # Without --hot-schedule nothing changes.
    plain, _ = parse_serve_args([*PEAGLE, "4"], env={})
    assert "num_speculative_tokens_per_batch_size" not in _speculative(vllm_argv(plain))
    assert "--enable-logging-iteration-details" not in vllm_argv(plain)


@pytest.mark.parametrize("method", [["--method", "none"], ["--method", "suffix"]])
def test_hot_schedules_need_a_method_with_a_fixed_k(method: list[str]) -> None:
    with pytest.raises(ConfigError, match="--hot-schedule needs a method with a fixed K"):
        parse_serve_args(["--model", "t", *method, "--hot-schedule"], env={})


def test_the_engine_s_environment_opens_the_endpoint_only_for_a_hot_pod() -> None:
    hot, _ = parse_serve_args([*PEAGLE, "4", "--hot-schedule"], env={})
    env = engine_env(hot, {"PATH": "/bin"})
    assert ENDPOINT_PLUGIN in env["VLLM_PLUGINS"].split(",")
    assert env[ENV_STEP_STATS] == "1" and env["PATH"] == "/bin"
    # The user asked for vLLM's per-step lines: they stay.
    asked, _ = parse_serve_args(
        [*PEAGLE, "4", "--hot-schedule", "--", "--enable-logging-iteration-details"], {}
    )
    assert ENV_STEP_STATS not in engine_env(asked, {})
    cold, _ = parse_serve_args([*PEAGLE, "4"], env={})
    assert engine_env(cold, {"PATH": "/bin"}) == {"PATH": "/bin"}
