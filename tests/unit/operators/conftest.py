"""Helpers shared by the operator tests."""

from __future__ import annotations

import pickle
from typing import Any

from rivermark import Stream

from ..helpers import StrictRef as StrictRef


def emit_tracked(s: Stream, x: Any) -> StrictRef:
    """Emit ``x`` into ``s`` holding a reference as a source would; return the ref."""
    ref = StrictRef()
    ref.retain()
    s.emit(x, metadata=[{"ref": ref}])
    ref.release()
    return ref


def roundtrip(state: Any) -> Any:
    return pickle.loads(pickle.dumps(state))
