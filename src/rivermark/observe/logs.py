"""Log output of the ``rivermark`` command: text lines or one JSON object per line.

Records may carry ``node``, ``epoch``, ``position``, ``source`` and, for a
written checkpoint, ``duration_seconds``, ``pause_seconds`` and ``size_bytes``
(passed with ``extra=``); the JSON format writes them as fields of their own.
The text format is for a person: time of day, level, message, and the
logger's name only at DEBUG level.

>>> import logging
>>> rec = logging.LogRecord("rivermark.x", logging.INFO, "f", 1, "checkpoint %d", (3,), None)
>>> rec.epoch = 3
>>> JsonFormatter().format(rec).split(", ", 2)[2]
'"logger": "rivermark.x", "message": "checkpoint 3", "epoch": 3}'
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

__all__ = ["JsonFormatter", "TextFormatter", "configure_logging", "LOG_FIELDS"]

#: record attributes written as JSON fields when present
LOG_FIELDS = (
    "node",
    "epoch",
    "position",
    "source",
    "partition",
    "duration_seconds",
    "pause_seconds",
    "size_bytes",
)


class TextFormatter(logging.Formatter):
    """``06:24:38.615 INFO    checkpoint 3 written: ...``; DEBUG lines also name their logger.

    >>> rec = logging.LogRecord("rivermark.x", logging.INFO, "f", 1, "checkpoint %d", (3,), None)
    >>> TextFormatter().format(rec)[12:]
    ' INFO    checkpoint 3'
    """

    def __init__(self) -> None:
        super().__init__("%(asctime)s.%(msecs)03d %(levelname)-7s %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno <= logging.DEBUG:
            text += f"  [{record.name}]"
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC), level, logger, message and the known fields."""

    converter = time.gmtime  # type: ignore[assignment]

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in LOG_FIELDS:
            if hasattr(record, name):
                out[name] = getattr(record, name)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=repr)


def configure_logging(level: str, fmt: str) -> logging.Handler | None:
    """Log to stderr at ``level`` in ``fmt`` ("text" or "json"), unless logging is set up.

    Only the ``rivermark`` command calls this; a library never configures the
    root logger.  Returns the handler it installed (None if the root logger
    had one already).
    """
    root = logging.getLogger()
    if root.handlers:
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    return handler
