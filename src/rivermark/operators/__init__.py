"""Operators, registered on :class:`rivermark.Stream` under streamz's method names."""

from __future__ import annotations

from . import transform as transform
from . import fused as fused
