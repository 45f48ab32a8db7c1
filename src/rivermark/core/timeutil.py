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

from rivermark.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["parse_interval", "epoch_seconds", "NANOS"]

#: nanoseconds per second
NANOS = 10**9


def epoch_seconds(whole: Any, nanos: Any) -> Any:
    """Epoch seconds as a float from whole seconds and the nanoseconds after them.

    The one rule that turns an exact time (a ``datetime``, a ``pandas.Timestamp``,
    a column of datetimes of any unit) into event-time seconds: the whole
    seconds and the fraction are exact integers, and the result is their sum
    in floating point, so a time that a float holds exactly (``12:00:00.250``)
    comes out exactly, and a record and a DataFrame row of the same time get
    the same float.  ``whole`` and ``nanos`` may be numpy arrays (numpy does
    the same operations element by element).

    >>> epoch_seconds(1767268800, 250_000_000)
    1767268800.25
    """
    return whole * 1.0 + nanos / NANOS


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


def parse_interval(
    value: object, node_kind: str = "interval", arg: str = "interval", allow_zero: bool = False
) -> float:
    """Return ``value`` as a positive number of seconds (or 0 with ``allow_zero``).

    ``node_kind`` and ``arg`` name the node and argument in the error message.
    ``allow_zero`` is for a poll interval where 0 means "do not wait".

    >>> parse_interval(2)
    2.0
    >>> parse_interval("500ms")
    0.5
    >>> parse_interval("1min")
    60.0
    >>> parse_interval("0s", allow_zero=True)
    0.0
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
    if (
        seconds is None
        or not math.isfinite(seconds)
        or seconds < 0
        or (seconds == 0 and not allow_zero)
    ):
        least = "a number of seconds >= 0" if allow_zero else "a positive number of seconds"
        raise ConfigurationError(
            f"{node_kind}: {arg} must be {least} or a duration "
            f"string, got {value!r}; pass e.g. {arg}=0.5 or {arg}='500ms'"
        )
    return seconds
