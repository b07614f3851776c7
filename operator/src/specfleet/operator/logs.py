"""The operator's log output: level and format (plain text or one JSON object a line)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from enum import StrEnum


class LogLevel(StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


# kopf logs "Handler 'model_event' succeeded." at INFO for every model event it hands the
# fleet (with the children's events too, before they had watches of their own: 18,000
# lines and about 4% of the CPU while 1,000 models were applied), then one a status
# write. Its failures are ERROR; DEBUG shows them all again.
KOPF_OBJECTS_LOGGER = "kopf.objects"


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, the fields log collectors index by."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure(level: LogLevel, log_format: LogFormat) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter()
        if log_format is LogFormat.JSON
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    )
    logging.basicConfig(level=level.value, handlers=[handler], force=True)
    objects = logging.getLogger(KOPF_OBJECTS_LOGGER)
    objects.setLevel(logging.NOTSET if level is LogLevel.DEBUG else logging.WARNING)
