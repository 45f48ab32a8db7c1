"""Sources: nodes that produce records on the event loop."""

from __future__ import annotations

from .base import Source as Source
