"""The operator's log output: kopf's line for every watch event it hands the fleet is
left out at INFO, its failures and the operator's own lines are not."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from kopf._core.actions import loggers as kopf_loggers

from specfleet.operator import logs


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    objects = kopf_loggers.logger
    objects_level = objects.level
    yield
    root.handlers[:], root.level = handlers, level
    objects.setLevel(objects_level)


def _lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, str]]:
    return [json.loads(line) for line in capsys.readouterr().err.splitlines()]


def test_kopf_s_handler_lines_are_left_out_at_info_but_not_its_failures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure(logs.LogLevel.INFO, logs.LogFormat.JSON)
    # kopf's own logger for its per-object lines, as its handler execution uses it.
    kopf_loggers.logger.info("Handler 'model_event' succeeded.")
    kopf_loggers.logger.error("Handler 'model_event' failed with an exception.")
    logging.getLogger("specfleet.operator.fleet").info("m0001: children applied")
    assert [(line["logger"], line["level"]) for line in _lines(capsys)] == [
        ("kopf.objects", "ERROR"),
        ("specfleet.operator.fleet", "INFO"),
    ]


def test_debug_shows_kopf_s_handler_lines_again(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure(logs.LogLevel.INFO, logs.LogFormat.JSON)
    logs.configure(logs.LogLevel.DEBUG, logs.LogFormat.JSON)
    kopf_loggers.logger.info("Handler 'model_event' succeeded.")
    assert [line["message"] for line in _lines(capsys)] == ["Handler 'model_event' succeeded."]
