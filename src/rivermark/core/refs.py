"""Completion tracking: knowing when a record has fully left the pipeline.

A source that wants to know when a record is done attaches a
:class:`RefCounter` to the record's metadata (a list of dicts, as in streamz:
``[{"ref": counter, ...}]``).  The source holds one reference while it emits.
Any node that keeps the record beyond the synchronous call (a buffer, a window,
an asynchronous map, an asynchronous sink) retains the reference and releases
it once the record (or what it became) has been passed on and the downstream
work has finished.  When the count returns to zero the counter's callback runs,
exactly once.

Records without metadata cost nothing: every helper here returns at once when
``metadata`` is empty.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from rivermark.execution.node import Metadata as Metadata

logger = logging.getLogger(__name__)


__all__ = [
    "RefCounter",
    "Untracked",
    "Metadata",
    "hold_refs",
    "retain_refs",
    "release_refs",
    "merge_metadata",
]


class RefCounter:
    """Count the places a record is still held; call ``callback`` when none remain.

    >>> done = []
    >>> ref = RefCounter(callback=lambda: done.append(True))
    >>> ref.retain(); ref.retain(); ref.release()
    >>> done
    []
    >>> ref.release(); done
    [True]
    >>> ref.release()  # a release after completion is ignored, never fires twice
    >>> done
    [True]
    """

    __slots__ = ("count", "callback", "done", "loop")

    #: whether anyone waits for this counter's completion (:class:`Untracked`: no one)
    tracked = True

    def __init__(
        self,
        initial: int = 0,
        callback: Callable[[], Any] | None = None,
        loop: Any = None,
        *,
        cb: Callable[[], Any] | None = None,
    ) -> None:
        if cb is not None:
            if callback is not None:
                raise TypeError(
                    f"RefCounter: got both callback={callback!r} and cb={cb!r}; pass one of them "
                    "(cb= is streamz's name for callback=)"
                )
            callback = cb
        self.count = initial
        self.callback = callback
        self.done = False
        #: as in streamz: when given (an asyncio loop or a Tornado IOLoop), the
        #: callback is scheduled on it instead of being called at once
        self.loop = loop

    @property
    def cb(self) -> Callable[[], object] | None:
        """streamz's name for :attr:`callback`."""
        return self.callback

    def retain(self, n: int = 1) -> None:
        """Add ``n`` holders."""
        self.count += n

    def release(self, n: int = 1) -> None:
        """Remove ``n`` holders; fire the callback when the last one leaves."""
        if self.done:
            return
        self.count -= n
        if self.count <= 0:
            self.count = 0
            self.done = True
            cb = self.callback
            if cb is not None:
                loop = self.loop
                if loop is None:
                    cb()
                elif hasattr(loop, "add_callback"):  # a Tornado IOLoop
                    loop.add_callback(cb)
                else:
                    loop.call_soon_threadsafe(cb)

    def __repr__(self) -> str:
        state = "done" if self.done else f"count={self.count}"
        return f"<RefCounter {state}>"


class Untracked(RefCounter):
    """A ``ref`` whose completion nobody waits for: retaining and releasing it does nothing.

    A source whose positions are kept by checkpoints (under a job) gives its
    records one shared counter of this kind, and a node that holds a record
    need not retain it (:func:`hold_refs`).

    >>> ref = Untracked(); ref.retain(); ref.release(); ref.release(); ref
    <RefCounter count=1>
    """

    __slots__ = ()

    tracked = False

    def __init__(self) -> None:
        super().__init__(initial=1)

    def retain(self, n: int = 1) -> None:
        """Nothing to count."""

    def release(self, n: int = 1) -> None:
        """Nothing to complete."""


def hold_refs(metadata: Metadata | None) -> Metadata | None:
    """Retain the counters of ``metadata`` someone waits for; what to release later.

    ``metadata`` itself when it holds such a counter (release it with
    :func:`release_refs` once the record is done), else None: a record whose
    counters are all :class:`Untracked` costs nothing more to hold.

    >>> ref = RefCounter(initial=1)
    >>> hold_refs([{"ref": ref}]) is not None, ref.count
    (True, 2)
    >>> hold_refs([{"ref": Untracked()}]) is None
    True
    """
    if not metadata:
        return None
    held = None
    for m in metadata:
        ref = m.get("ref")
        if ref is not None and ref.tracked:
            ref.retain()
            held = metadata
    return held


def retain_refs(metadata: Metadata | None, n: int = 1) -> None:
    """Retain every reference counter found in ``metadata``."""
    if not metadata:
        return
    for m in metadata:
        ref = m.get("ref")
        if ref is not None:
            ref.retain(n)


def release_refs(metadata: Metadata | None, n: int = 1) -> None:
    """Release every reference counter found in ``metadata``."""
    if not metadata:
        return
    for m in metadata:
        ref = m.get("ref")
        if ref is not None:
            ref.release(n)


def merge_metadata(parts: Iterable[Metadata | None]) -> Metadata | None:
    """Concatenate metadata lists (for nodes that combine several records)."""
    out: Metadata = []
    for p in parts:
        if p:
            out.extend(p)
    return out or None
