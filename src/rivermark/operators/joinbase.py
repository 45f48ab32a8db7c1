"""What the joins by event time share: the key rule, the ``.late`` side output, bounds.

The joins themselves live in :mod:`.timejoins` (tables, as-of),
:mod:`.intervaljoin` and :mod:`.windowjoin`.  See ``docs/joins.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from rivermark.core.figures import SIDES
from rivermark.core.naming import function_name
from rivermark.core.node import Stream
from rivermark.core.refs import Metadata
from rivermark.core.timeutil import parse_interval
from rivermark.errors import ConfigurationError
from rivermark.operators.eventtime import LateRecords, key_function
from rivermark.operators.timestamps import Results

logger = logging.getLogger(__name__)

__all__ = ["LateSide", "join_key", "func_name", "signed_interval"]


def join_key(kind: str, key: Any) -> Callable[[Any], Any]:
    """The key function of a join (``key`` callable, or an index or field name); required."""
    fn = key_function(key)
    if fn is None:
        raise ConfigurationError(
            f"{kind}: key= is required (a callable, or an index or field name for x[key])"
        )
    return fn


def func_name(func: object) -> str:
    """A user function's name, for state signatures and messages."""
    return function_name(func)


def signed_interval(value: object, kind: str, arg: str) -> float:
    """Seconds or a duration string, which may be negative (``"-2s"``)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value.startswith("-"):
        return -parse_interval(value[1:], kind, arg)
    return parse_interval(value, kind, arg)


class LateSide:
    """A node's ``.late`` stream and its counts (shared by the table and the joins).

    ``late_count`` counts this run's late records (the job's counts carry it
    over a restore); ``late_sides`` counts them per side since the job first
    started, restored with the node's state (:meth:`_counters`).
    """

    kind = "node"
    _late: LateRecords | None = None
    late_count = 0
    #: late records per side (left, right) since the job first started
    late_sides: tuple[int, int] = (0, 0)

    @property
    def late(self) -> LateRecords:
        """The records that arrived after their side's watermark had passed their time."""
        assert isinstance(self, Stream)
        if self._late is None:
            self._late = LateRecords(self, stream_name=f"{self.kind}.late")
        return self._late

    def _send_late(self, x: Any, metadata: Metadata | None, ts: float, side: int = 0) -> Results:
        assert isinstance(self, Stream)
        self.late_count += 1
        left, right = self.late_sides
        self.late_sides = (left + 1, right) if side == 0 else (left, right + 1)
        if self._late is not None:
            return self._late.pass_late(x, metadata)
        if self.late_count == 1:
            logger.warning(
                "%s: a record arrived after its side's watermark had passed its time (%s); "
                "such records are counted in late_count; sink %s.late to keep them",
                self.display_name(),
                ts,
                self.kind,
            )
        return None

    def _late_figures(self, sides: int = 2) -> dict[str, int]:
        """The late records of the first ``sides`` sides, by side name."""
        return dict(zip(SIDES[:sides], self.late_sides))

    def _counters(self) -> dict[str, object]:
        """The counters the node's checkpointed state carries (see :meth:`_restore_counters`)."""
        return {"late": list(self.late_sides)}

    def _restore_counters(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`_counters` gave (a state written before it had none: 0)."""
        left, right = state.get("counters", {}).get("late", (0, 0))
        self.late_sides = (int(left), int(right))
