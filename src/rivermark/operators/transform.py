"""Record-by-record operators: map, starmap, filter, remove, pluck, flatten.

None of these holds a record past the synchronous call, so completion
tracking needs nothing from them: a record dropped by a filter is complete
when the call returns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..core.node import Stream, check_callable
from ..core.refs import Metadata

__all__ = ["Map", "Starmap", "Filter", "Remove", "Pluck", "Flatten"]


@Stream.register_api(attribute_name="map")
class Map(Stream):
    """Apply ``func(x, *args, **kwargs)`` to every record.

    >>> s = Stream()
    >>> L = s.map(lambda x, k: x * k, 10).sink_to_list()
    >>> s.emit(1); s.emit(2); L
    [10, 20]
    """

    def __init__(self, upstream: Stream, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        check_callable("map", "func", func)
        self.func = func
        stream_name = kwargs.pop("stream_name", None)
        name = kwargs.pop("name", None)
        on_error = kwargs.pop("on_error", None)
        self.kwargs = kwargs
        self.args = args
        Stream.__init__(self, upstream, stream_name=stream_name, name=name, on_error=on_error)

    def update(self, x: Any, who: Stream | None = None, metadata: Metadata | None = None) -> list[Awaitable[Any]] | None:
        try:
            y = self.func(x, *self.args, **self.kwargs)
        except Exception as e:
            self._user_error(x, e, self.func)
            return None
        return self._emit(y, metadata)


@Stream.register_api(attribute_name="starmap")
class Starmap(Map):
    """Apply ``func(*x, *args, **kwargs)`` to every record (a tuple).

    >>> s = Stream()
    >>> L = s.starmap(lambda a, b: a + b).sink_to_list()
    >>> s.emit((1, 2)); L
    [3]
    """

    def update(self, x: Any, who: Stream | None = None, metadata: Metadata | None = None) -> list[Awaitable[Any]] | None:
        try:
            y = self.func(*x, *self.args, **self.kwargs)
        except Exception as e:
            self._user_error(x, e, self.func)
            return None
        return self._emit(y, metadata)
