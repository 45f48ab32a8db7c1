"""What the joins by event time share: the key rule, the ``.late`` side output, bounds, sides.

The joins themselves live in :mod:`.timejoins` (tables, as-of),
:mod:`.intervaljoin` and :mod:`.windowjoin`.  See ``docs/joins.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Unpack

from rivermark.core.figures import SIDES, JoinFigures
from rivermark.core.naming import function_name
from rivermark.core.node import NodeOptions, Stream
from rivermark.core.refs import Metadata
from rivermark.core.timeutil import parse_interval
from rivermark.errors import ConfigurationError
from rivermark.operators.eventtime import LateRecords, key_function
from rivermark.operators.timestamps import Results, Timestamps, attach

logger = logging.getLogger(__name__)

__all__ = [
    "HeldSides",
    "LateSide",
    "TwoSides",
    "attach_sides",
    "func_name",
    "join_key",
    "refuse_one_node",
    "signed_interval",
]


def join_key(kind: str, key: Any) -> Callable[[Any], Any]:
    """The key function of a join (``key`` callable, or an index or field name); required."""
    fn = key_function(key)
    if fn is None:
        raise ConfigurationError(
            f"{kind}: key= is required (a callable, or an index or field name for x[key])"
        )
    return fn


def refuse_one_node(kind: str, upstream: Stream, right: Stream) -> None:
    """A stream joined with itself is refused: each side needs its own clock."""
    if upstream is right:
        raise ConfigurationError(
            f"{kind}: the left and right streams are the same node; join two "
            "streams, each with its own timestamps(...)"
        )


def attach_sides(
    node: Stream, kind: str, upstream: Stream, right: Stream
) -> tuple[Timestamps, Timestamps]:
    """The event-time clocks of a join's two sides (each must be a ``timestamps`` node)."""
    left_clock = attach(node, kind, upstream)
    if not isinstance(right, Timestamps):
        raise ConfigurationError(
            f"{kind}: the right stream needs event times; pass "
            "right.timestamps(func, max_delay=...)"
        )
    return left_clock, attach(node, kind, right)


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


class HeldSides(LateSide):
    """A join holding records (or rows) of both sides until they can match no more.

    Its figures (:attr:`waiting`, :meth:`records_held`, :meth:`join_figures`)
    follow from :meth:`held_sides`: the interval and window joins of records
    and the interval join of DataFrame rows.
    """

    def held_sides(self) -> tuple[int, int]:
        """How many records of the left and of the right side are held."""
        raise NotImplementedError

    @property
    def waiting(self) -> int:
        """How many records of both sides are held."""
        left, right = self.held_sides()
        return left + right

    def records_held(self) -> int | None:
        return self.waiting

    def join_figures(self) -> JoinFigures:
        left, right = self.held_sides()
        return JoinFigures(buffered={"left": left, "right": right}, late=self._late_figures())


class TwoSides(HeldSides):
    """A join of two streams, each with its clock and key function (interval and window joins)."""

    left_clock: Timestamps
    right_clock: Timestamps
    key: Hashable | Callable[[Any], Any]

    def _set_keys(
        self, key: Hashable | Callable[[Any], Any], right_key: Hashable | Callable[[Any], Any]
    ) -> None:
        """The key functions of both sides (``right_key`` defaults to ``key``)."""
        self.key = key
        self._key_of = join_key(self.kind, key)
        self._right_key_of = self._key_of if right_key is None else join_key(self.kind, right_key)

    def close_until(self, watermark: float) -> Results:
        raise NotImplementedError

    def next_due(self) -> float:
        raise NotImplementedError

    def _connect(self, upstream: Stream, right: Stream, **kwargs: Unpack[NodeOptions]) -> None:
        """Make the node, below both sides, a client of both clocks (their watermarks reach it)."""
        assert isinstance(self, Stream)
        Stream.__init__(self, upstreams=[upstream, right], **kwargs)
        for clock in (self.left_clock, self.right_clock):
            clock.add_client(self)

    def _side_key(self, x: Any, who: Stream | None) -> tuple[int, Timestamps, Any] | None:
        """The side of ``x`` (0 left, 1 right), its clock and its key; None if the key failed.

        A key function that raises, or a key that cannot be hashed, goes through
        the node's error policy.
        """
        assert isinstance(self, Stream)
        side = 0 if who is self.upstreams[0] else 1
        clock = self.left_clock if side == 0 else self.right_clock
        try:
            k = (self._key_of if side == 0 else self._right_key_of)(x)
            hash(k)
        except Exception as e:
            self._user_error(x, e, self.key)
            return None
        return side, clock, k
