"""A vLLM endpoint plugin: `GET/POST /specfleet/schedule` on the pod's API server, for the
operator alone, reaching the engine-side methods of vllm_hot_schedule.py.

vLLM (0.32 CPU and 0.33) adds the routes of `vllm.endpoint_plugins` entries to its API
server only when VLLM_PLUGINS names them (vllm/plugins/__init__.py,
load_endpoint_plugins); the runtime sets it (hot_schedule.plugin_allowlist). The call
goes to EngineCore with `call_utility_async`, which the engine serves between two steps.

GET returns the schedule in force (generation, bands, ceiling, the Ks the engine now
schedules) or why this engine cannot change it. POST takes {"generation": N, "schedule":
[[start, end, K], ...]} or {"generation": N, "k": K}: 200 with the same report and
`changed` (false: that generation was already in force), 409 for an older or reused
generation or an engine that cannot, 422 for a malformed schedule, each with `reason`.
Both need the operator's per-model bearer credential (hot_schedule.authorize): 401
without one, 403 with a wrong one.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from specfleet.runtime import vllm_step_stats
from specfleet.runtime.hot_schedule import ENDPOINT_PLUGIN, PATH, authorize
from specfleet.runtime.vllm_hot_schedule import GET_METHOD, SET_METHOD


def _response(body: dict[str, Any], status: int, headers: dict[str, str] | None = None) -> Any:
    responses = importlib.import_module("starlette.responses")
    return responses.JSONResponse(body, status_code=status, headers=headers)


class ScheduleEndpoint:
    """The endpoint plugin (vLLM's EndpointPlugin protocol), made by vLLM with no args."""

    name = ENDPOINT_PLUGIN
    required_tasks = ("generate",)

    def __init__(self) -> None:
        self.engine_core: Any = None

    def attach_router(self, app: Any) -> None:
        # A plain route: the handler takes the request itself, no FastAPI signature magic.
        app.add_route(PATH, self.handle, methods=["GET", "POST"])

    async def init_state(self, engine_client: Any, state: Any, args: Any) -> None:
        del state, args
        self.engine_core = getattr(engine_client, "engine_core", None)

    async def handle(self, request: Any) -> Any:
        denied = authorize(request.headers.get("authorization"))
        if denied is not None:
            status, reason = denied
            challenge = {"WWW-Authenticate": "Bearer"} if status == 401 else None
            return _response({"reason": reason}, status, challenge)
        if self.engine_core is None:
            return _response({"reason": "this server has no engine"}, 503)
        call: tuple[Any, ...] = (GET_METHOD,)
        if request.method == "POST":
            try:
                body = json.loads(await request.body())
            except ValueError as error:
                return _response({"reason": f"the body is not JSON: {error}"}, 400)
            if not isinstance(body, dict):
                return _response({"reason": "the body is not a JSON object"}, 400)
            call = (SET_METHOD, body)
        try:
            result = await self.engine_core.call_utility_async(*call)
        except Exception as error:  # the engine has no such method: the plugin is off there
            return _response({"hot": False, "reason": f"no hot schedules here: {error}"}, 409)
        status = int(result.pop("status", 200))
        if "generation" in result:
            vllm_step_stats.schedule_generation_in_force(int(result["generation"]))
        return _response(result, status)
