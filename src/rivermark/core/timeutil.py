"""Time intervals: numbers of seconds or short duration strings.

``parse_interval`` accepts what streamz accepts for its time-based operators
(a number of seconds, or a pandas-style duration such as ``"500ms"``,
``"2s"``, ``"1min"``) without importing pandas.
"""

from __future__ import annotations

import datetime
import logging
import math
import re
from typing import Any

from ..errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["parse_interval"]

_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
}

_PATTERN = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")


def parse_interval(value: Any, node_kind: str = "interval", arg: str = "interval") -> float:
    """Return ``value`` as a positive number of seconds.

    ``node_kind`` and ``arg`` name the node and argument in the error message.

    >>> parse_interval(2)
    2.0
    >>> parse_interval("500ms")
    0.5
    >>> parse_interval("1min")
    60.0
    """
    seconds: float | None = None
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        m = _PATTERN.match(value)
        if m is not None:
            unit = m.group(2).lower() or "s"
            if unit in _UNITS:
                seconds = float(m.group(1)) * _UNITS[unit]
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        raise ConfigurationError(
            f"{node_kind}: {arg} must be a positive number of seconds or a duration "
            f"string, got {value!r}; pass e.g. {arg}=0.5 or {arg}='500ms'"
        )
    return seconds
