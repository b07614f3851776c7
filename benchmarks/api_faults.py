"""The operator's request policy under two API-server faults, on loopback sockets, with the
operator's default settings (4 s request timeout; Lease 15 s, renew deadline 10 s, retry
2 s): the figures of docs/reliability.md.

    .venv/bin/python benchmarks/api_faults.py [--open-after 6] [--seconds 30] [--json FILE]

Each is measured with the operator's requests (the fleet's status write through
`kube.Cluster`; the Lease's through `kube.client_for`) and with the kubernetes client's
defaults, which is what the operator used before (urllib3 retrying a failed connect, and a
timed-out read of a PUT, 3 times):

- fence: a status write leaves with the fence open; the fence closes 0.5 s later (the
  leader's renew deadline); the API server's accept queue is full until `--open-after`
  seconds. Measured: when the write reached the server, from the fence closing; a standby
  may write from the margin (Lease duration - renew deadline = 5 s) on.
- late renewal: the API server commits each Lease write at once and answers it 5 s later
  (a 409 at once). The leader renews for `--seconds`. Measured: whether it keeps leading,
  its renewals committed, and the PUTs sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specfleet.operator.api import GROUP, PLURAL, VERSION  # noqa: E402
from specfleet.operator.kube import (  # noqa: E402
    MERGE,
    REQUEST_TIMEOUT,
    Cluster,
    Credentials,
    NotLeading,
    call,
    client_for,
)
from specfleet.operator.leadership import Election, ElectionConfig, LeaseStore  # noqa: E402
from tests.api_servers import FullAcceptQueue, LateLease  # noqa: E402

DEFAULTS = ElectionConfig("lease", "ns", "bench")
FENCE_CLOSES = 0.5
ANSWER_DELAY = 5.0


STATUS = f"/apis/{GROUP}/{VERSION}/namespaces/team/{PLURAL}/llama/status"
WRITE = {"status": {"phase": "Ready"}, "metadata": {"resourceVersion": "1"}}


def client_defaults_write(url: str, may_write: Callable[[], bool]) -> None:
    """A status write through the kubernetes client's defaults, the fence checked first."""
    if not may_write():
        raise NotLeading("fence closed")
    call(client.ApiClient(client.Configuration(host=url)), "PATCH", STATUS, WRITE, MERGE)


def fleet_write(url: str, may_write: Callable[[], bool]) -> None:
    """The fleet's status write (`kube.Cluster`)."""
    cluster = Cluster(Credentials(url, False, lambda: None), "bench", may_write)

    async def write() -> None:
        try:
            await cluster.replace_status("team", "llama", WRITE["status"], "1")
        finally:
            await cluster.close()

    asyncio.run(write())


# Each way of sending: the Lease's client, and the status write.
CLIENTS: dict[str, tuple[Callable[[str], Any], Callable[[str, Callable[[], bool]], None]]] = {
    "kubernetes client defaults (before)": (
        lambda url: client.ApiClient(client.Configuration(host=url)),
        client_defaults_write,
    ),
    "kube.client_for and kube.Cluster (now)": (
        lambda url: client_for(client.Configuration(host=url), "bench"),
        fleet_write,
    ),
}


def fence(write: Callable[[str, Callable[[], bool]], None], open_after: float) -> dict[str, Any]:
    server = FullAcceptQueue()
    started = time.monotonic()
    closes = started + FENCE_CLOSES
    opener = threading.Timer(open_after, server.open)
    opener.start()
    try:
        write(server.url, lambda: time.monotonic() < closes)
        outcome = "answered"
    except Exception as error:
        outcome = type(error).__name__
    gave_up = time.monotonic() - closes
    time.sleep(max(0.0, started + open_after + 2 * REQUEST_TIMEOUT - time.monotonic()))
    opener.cancel()
    server.close()
    arrived = [round(at - closes, 2) for at, _ in server.arrived]
    return {
        "outcome": outcome,
        "gave_up_after_fence": round(gave_up, 2),
        "reached_server_after_fence": arrived,
    }


def late_renewal(make_client: Any, seconds: float) -> dict[str, Any]:
    server = LateLease()
    store = LeaseStore(make_client(server.url), "ns", "lease")
    election = Election(DEFAULTS, store, on_lost=lambda: None)
    started = time.monotonic()
    lost_at = None
    while time.monotonic() < started + seconds:
        if not election.attempt():
            lost_at = round(time.monotonic() - started, 1)
            break
        server.delay = ANSWER_DELAY  # the first write (the acquire) is answered at once
        time.sleep(election.pause())
    server.close()
    return {
        "kept_leading": lost_at is None,
        "lost_after_seconds": lost_at,
        "renewals_committed": sum(1 for m, code in server.writes if m == "PUT" and code == 200),
        "puts_sent": sum(1 for m, _ in server.writes if m == "PUT"),
        "puts_refused_409": sum(1 for m, code in server.writes if m == "PUT" and code == 409),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--open-after", type=float, default=6.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for name, (make_client, write) in CLIENTS.items():
        results[name] = {
            "fence": fence(write, args.open_after),
            "late_renewal": late_renewal(make_client, args.seconds),
        }
    margin = DEFAULTS.lease_duration - DEFAULTS.renew_deadline
    print(f"fence closes at +{FENCE_CLOSES}s; a standby may write {margin:g}s after it")
    print("| client | write reached the server (s after the fence) | gave up (s after) |")
    print("| --- | --- | --- |")
    for name, result in results.items():
        reached = result["fence"]["reached_server_after_fence"]
        print(
            f"| {name} | {', '.join(f'+{r:g}' for r in reached) or 'never'} | "
            f"+{result['fence']['gave_up_after_fence']:g} ({result['fence']['outcome']}) |"
        )
    print(f"\nLease renewals answered {ANSWER_DELAY:g}s late, for {args.seconds:g}s")
    print("| client | kept leading | renewals committed | PUTs sent | 409s |")
    print("| --- | --- | --- | --- | --- |")
    for name, result in results.items():
        renewal = result["late_renewal"]
        kept = (
            "yes" if renewal["kept_leading"] else f"no (lost at {renewal['lost_after_seconds']}s)"
        )
        print(
            f"| {name} | {kept} | {renewal['renewals_committed']} | {renewal['puts_sent']} | "
            f"{renewal['puts_refused_409']} |"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
