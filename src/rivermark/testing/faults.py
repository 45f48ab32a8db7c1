"""Fault points for crash tests (the public name of :mod:`rivermark.checkpoint.faults`).

The points live in the checkpoint package, which passes them; tests and
apps import them from here.

>>> from rivermark.testing.faults import FAULT_POINTS
>>> FAULT_POINTS[0]
'before-resume'
"""

from __future__ import annotations

from rivermark.checkpoint.faults import FAULT_POINTS as FAULT_POINTS
from rivermark.checkpoint.faults import fault_error as fault_error
from rivermark.checkpoint.faults import fault_point as fault_point

__all__ = ["fault_point", "fault_error", "FAULT_POINTS"]
