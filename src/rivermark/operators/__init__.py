"""Operators, registered on :class:`rivermark.Stream` under streamz's method names."""

from __future__ import annotations

from rivermark.operators import asyncops as asyncops
from rivermark.operators import eventtime as eventtime
from rivermark.operators import eventtimers as eventtimers
from rivermark.operators import intervaljoin as intervaljoin
from rivermark.operators import joins as joins
from rivermark.operators import stateful as stateful
from rivermark.operators import timejoins as timejoins
from rivermark.operators import timestamps as timestamps
from rivermark.operators import timing as timing
from rivermark.operators import transform as transform
from rivermark.operators import windowjoin as windowjoin
from rivermark.operators import windows as windows
