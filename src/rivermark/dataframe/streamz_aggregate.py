"""Aggregations written for streamz (``initial``/``on_new``/``on_old``), run with checkpoints."""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

import numpy as np
import pandas as pd

from rivermark.core.node import Stream
from rivermark.dataframe.running import StepNode
from rivermark.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["StreamzAggregate"]


class StreamzAggregate(StepNode):
    """Run an aggregation written for streamz (``initial``/``on_new``/``on_old``).

    Without a window ``on_old`` is never called.  With ``n`` (rows) or
    ``value`` (a ``pd.Timedelta`` of index) the batches in the window are
    kept; after ``on_new(state, batch)`` every part that left the window is
    passed to ``on_old``, as streamz does, and the last result is emitted.
    The aggregation's state and the window's batches are the checkpoint
    state; ``with_state=True`` emits ``(state, result)`` and ``start`` is such
    a state.

    >>> from rivermark.dataframe import Aggregation
    >>> class Total(Aggregation):
    ...     def initial(self, new): return 0
    ...     def on_new(self, state, new): return state + new.sum(), state + new.sum()
    ...     def on_old(self, state, old): return state - old.sum(), state - old.sum()
    >>> s = Stream()
    >>> L = StreamzAggregate(s, Total(), n=2).sink_to_list()
    >>> s.emit(pd.Series([1, 2])); s.emit(pd.Series([3]))
    >>> [int(v) for v in L]
    [3, 5]
    """

    _graphviz_shape = "box"

    def __init__(
        self,
        upstream: Stream,
        agg: Any,
        n: int | None = None,
        value: pd.Timedelta | None = None,
        with_state: bool = False,
        start: object = None,
        **kwargs: Any,
    ) -> None:
        self.agg = agg
        self.n = n
        self.value = value
        self.with_state = with_state
        self.state: object = None
        self.started = False
        self.frames: deque[pd.DataFrame | pd.Series] = deque()
        Stream.__init__(self, upstream, **kwargs)
        if start is not None:
            self.set_state(start)

    def get_state(self) -> dict[str, object]:
        return {"state": self.state, "started": self.started, "frames": list(self.frames)}

    def set_state(self, state: object) -> None:
        if not isinstance(state, dict) or "state" not in state:
            raise ConfigurationError(
                f"{self.display_name()}: start/state must be a state this node emitted "
                f"(with_state=True) or checkpointed, got {state!r}; pass start=None to begin empty"
            )
        self.state = state["state"]
        self.started = bool(state.get("started", True))
        self.frames = deque(state.get("frames", ()))

    def state_signature(self) -> str:
        return f"StreamzAggregate({type(self.agg).__name__}, n={self.n}, value={self.value})"

    def _leaving(self) -> list[pd.DataFrame | pd.Series]:
        """Remove and return the parts of the kept batches that left the window."""
        frames = self.frames
        old: list[pd.DataFrame | pd.Series] = []
        if self.n is not None:
            excess = sum(len(f) for f in frames) - self.n
            while excess > 0 and frames:
                head = frames[0]
                if len(head) <= excess:
                    old.append(frames.popleft())
                    excess -= len(head)
                else:
                    old.append(head.iloc[:excess])
                    frames[0] = head.iloc[excess:]
                    excess = 0
        elif self.value is not None and frames:
            cutoff = max(f.index.max() for f in frames) - self.value
            while frames:
                head = frames[0]
                mask = np.asarray(head.index <= cutoff)
                if not mask.any():
                    break
                old.append(head[mask])
                if mask.all():
                    frames.popleft()
                else:
                    frames[0] = head[~mask]
                    break
        return old

    def _step(self, x: pd.DataFrame | pd.Series) -> object:
        agg = self.agg
        if not self.started:
            self.state = agg.initial(x)
            self.started = True
        self.state, result = agg.on_new(self.state, x)
        if self.n is not None or self.value is not None:
            if len(x):
                self.frames.append(x)
            for old in self._leaving():
                if len(old):
                    self.state, result = agg.on_old(self.state, old)
        return result

    def _failed(self, x: object, e: Exception) -> None:
        self._user_error(x, e, self.agg.on_new)
