"""Helpers shared by the operator tests."""

from __future__ import annotations

import pickle
from typing import Any

from rivermark import RefCounter, Stream


class StrictRef(RefCounter):
    """A RefCounter that also counts releases arriving after completion (double releases)."""

    def __init__(self) -> None:
        super().__init__(callback=self._fire)
        self.fired = 0
        self.late = 0

    def _fire(self) -> None:
        self.fired += 1

    def release(self, n: int = 1) -> None:
        if self.done:
            self.late += 1
        super().release(n)


def emit_tracked(s: Stream, x: Any) -> StrictRef:
    """Emit ``x`` into ``s`` holding a reference as a source would; return the ref."""
    ref = StrictRef()
    ref.retain()
    s.emit(x, metadata=[{"ref": ref}])
    ref.release()
    return ref


def roundtrip(state: Any) -> Any:
    return pickle.loads(pickle.dumps(state))
