"""Sinks: where records leave the pipeline."""

from __future__ import annotations

from . import basic as basic
from . import textfile as textfile
