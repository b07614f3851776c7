"""Status at the CRD's limits: whatever the spec holds, each status write stays far under
what etcd stores (1.5 MiB an object), and every message status holds is bounded; the full
text is in the operator's log."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from specfleet.operator.api import MAX_ARG_LENGTH, MAX_ARGS
from specfleet.operator.fleet import Fleet
from specfleet.operator.status import MESSAGE_LIMIT
from tests.fake_cluster import FakeCluster
from tests.test_fleet import settle

MIB = 1024 * 1024
COMMITS = 30


def _args(commit: int) -> list[str]:
    """MAX_ARGS args of MAX_ARG_LENGTH characters, every one new in each commit."""
    args = []
    for index in range(MAX_ARGS):
        flag = f"--x-test-{index:02d}="
        args.append(flag + f"{commit:04d}" * ((MAX_ARG_LENGTH - len(flag)) // 4))
    return args


def _messages(value: Any) -> list[str]:
    if isinstance(value, list):
        return [text for item in value for text in _messages(item)]
    if not isinstance(value, dict):
        return []
    found = [v for k, v in value.items() if k in ("message", "reason") and isinstance(v, str)]
    return found + [text for v in value.values() for text in _messages(v)]


def test_status_writes_stay_under_a_mebibyte_with_the_largest_args_changed_often(
    cluster: FakeCluster,
    fleet: Fleet,
    peagle_manifest: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """64 args of 1 KB, rollout Immediate, 30 commits each changing every arg: each
    commit's config is applied, and each status write, the model as written included, is
    under 1 MiB: 0.21 MiB at most, the running config's pods included (before: each
    commit's message held the old and new args whole, 126 KB more status each; the 12th
    write passed 1 MiB, the 20th the 1.5 MiB etcd takes, and the last were 2.8 MiB)."""
    sizes: list[int] = []
    replace_status = cluster.replace_status

    async def measured(*args: Any) -> dict[str, Any]:
        written = await replace_status(*args)
        sizes.append(len(json.dumps(written)))
        return written

    monkeypatch.setattr(cluster, "replace_status", measured)
    peagle_manifest["metadata"]["name"] = "llama"
    peagle_manifest["spec"]["rollout"] = {"strategy": "Immediate"}
    peagle_manifest["spec"]["runtime"]["args"] = _args(0)
    cluster.create_model(peagle_manifest)
    settle(cluster, fleet)
    caplog.set_level(logging.INFO, logger="specfleet.fleet")
    for commit in range(1, COMMITS + 1):

        def edit(spec: dict[str, Any], commit: int = commit) -> None:
            spec["runtime"]["args"] = _args(commit)

        cluster.edit_spec("llama", edit)
        settle(cluster, fleet)
        assert cluster.stable_args("llama")[-MAX_ARGS:] == _args(commit)
    assert len(sizes) > COMMITS
    assert max(sizes) < MIB, [round(size / MIB, 2) for size in sizes]
    status = cluster.model("llama")["status"]
    assert max(len(text) for text in _messages(status)) <= MESSAGE_LIMIT
    assert any(_args(COMMITS)[-1] in record.getMessage() for record in caplog.records)
