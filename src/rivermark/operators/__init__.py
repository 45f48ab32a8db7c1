"""Operators, registered on :class:`rivermark.Stream` under streamz's method names."""

from __future__ import annotations

from . import asyncops as asyncops
from . import eventtime as eventtime
from . import eventtimers as eventtimers
from . import intervaljoin as intervaljoin
from . import joins as joins
from . import stateful as stateful
from . import timejoins as timejoins
from . import timing as timing
from . import transform as transform
from . import windowjoin as windowjoin
from . import windows as windows
