"""Handing the running stable pods their schedule (the I/O of hot switching): a POST of
status.speculation.hotSchedule to each Ready stable pod's /specfleet/schedule, with the
model's credential. What to hand them and when is `hot_schedules`' (pure).

A pod that cannot take a schedule hot says why (an engine started without one, data
parallel > 1, an image without the runtime's plugin): that reason becomes the fallback,
and K changes restart the pods again. Anything else (a pod not answering, a credential
not yet rolled out) is tried again at the next handoff; the pod's windows are left out
meanwhile, since it reports another generation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from specfleet.operator import schedule
from specfleet.operator.api import HotSchedule
from specfleet.operator.observations import ScrapeTarget
from specfleet.runtime.hot_schedule import PATH

log = logging.getLogger("specfleet.hot_handoff")
# A schedule takes effect between two engine steps; an answer later than this is a pod
# in trouble, tried again at the next handoff.
HANDOFF_TIMEOUT_SECONDS = 5.0
# HTTP statuses with which a pod says it cannot take schedules hot (not: not now).
CANNOT = (404, 405, 409, 422)


@dataclass(frozen=True)
class Handoff:
    """What the pods answered: the pods now at the generation, and why hot switching
    cannot work on them, if one said so."""

    in_force: tuple[str, ...]
    fallback: str | None


def body(hot: HotSchedule) -> dict[str, object]:
    """The request: the generation and vLLM's bands [start, end, K]."""
    bands = [[e.start, e.end, e.k] for e in schedule.entries(hot.schedule)]
    return {"generation": hot.generation, "schedule": bands}


def schedule_url(target: ScrapeTarget) -> str:
    """The pod's schedule endpoint, beside the /metrics page it is scraped at."""
    return target.url.rsplit("/", 1)[0] + PATH


async def _hand_one(
    session: aiohttp.ClientSession, target: ScrapeTarget, hot: HotSchedule, credential: str
) -> tuple[str, str | None, bool]:
    """(pod, why it cannot take schedules hot or None, whether the generation is in force)."""
    headers = {"Authorization": f"Bearer {credential}"}
    try:
        async with session.post(
            schedule_url(target),
            json=body(hot),
            headers=headers,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=HANDOFF_TIMEOUT_SECONDS),
        ) as response:
            answer = await response.json(content_type=None) if response.status != 404 else {}
            reason = str(answer.get("reason") or "") if isinstance(answer, dict) else ""
            if response.ok:
                return target.pod, None, True
            if response.status in CANNOT and not (isinstance(answer, dict) and answer.get("hot")):
                # The engine itself cannot (a refusal of this schedule by an engine that
                # can take others is a bug of ours: said, not fallen back on).
                why = reason or f"HTTP {response.status} from {PATH}: no hot schedules there"
                return target.pod, f"pod {target.pod}: {why}"[:300], False
            log.warning("pod %s refused schedule generation %d: HTTP %d %s",
                        target.pod, hot.generation, response.status, reason)  # fmt: skip
    except (TimeoutError, aiohttp.ClientError, ValueError) as error:
        log.warning("pod %s: schedule generation %d not handed over: %s",
                    target.pod, hot.generation, error or type(error).__name__)  # fmt: skip
    return target.pod, None, False


async def hand_off(targets: Sequence[ScrapeTarget], hot: HotSchedule, credential: str) -> Handoff:
    """POST the schedule to each stable target at once (each is idempotent)."""
    stable = [t for t in targets if t.track == "stable"]
    if not stable:
        return Handoff((), None)
    async with aiohttp.ClientSession() as session:
        answers = await asyncio.gather(*(_hand_one(session, t, hot, credential) for t in stable))
    in_force = tuple(pod for pod, _, ok in answers if ok)
    fallback = next((why for _, why, _ in answers if why is not None), None)
    return Handoff(in_force, fallback)
