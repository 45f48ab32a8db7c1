"""Shared machinery for the throughput benchmarks (imported by ``run.py``).

A benchmark module defines ``VARIANTS``: a list of :class:`Variant`.  Each
variant builds the same pipeline twice through the streamz-compatible chaining
API (once on ``rivermark.Stream``, once on ``streamz.Stream``) and gives the
plain Python loop that calls the same functions.  ``run.py`` times the three in
the same process, checks that they produce the same output on a small input,
and measures rivermark's peak traced memory at two input sizes.

Not a test: nothing here asserts on timings.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["Variant", "Result", "time_rivermark_like", "time_plain", "check", "peak_memory"]

#: ``build(StreamClass, sink_func) -> source``; the source's ``emit`` is driven by the runner
Build = Callable[[Any, Callable[[Any], Any]], Any]
#: ``plain(n, sink_func)``: the same work as the pipeline, as a plain loop over ``range(n)``
Plain = Callable[[int, Callable[[Any], Any]], None]


@dataclass(frozen=True)
class Variant:
    """One pipeline shape, as a graph builder and as a plain loop."""

    key: str
    title: str
    build: Build
    plain: Plain
    #: ``rivermark.Stream`` attributes the pipeline needs (missing -> the variant is skipped)
    requires: tuple[str, ...] = ()


@dataclass
class Result:
    """Figures for one variant, measured in one run."""

    variant: Variant
    n: int
    rivermark: float | None = None  # events/s
    plain: float | None = None
    streamz: float | None = None
    streamz_n: int = 0
    check: str = "-"
    mem_small: int | None = None  # peak traced bytes while emitting
    mem_large: int | None = None
    mem_ns: tuple[int, int] = (0, 0)
    notes: list[str] = field(default_factory=list)


def in_child(script: str, src: str, args: list[str]) -> dict[str, Any]:
    """Run ``script --child ARGS`` with ``PYTHONPATH=src`` (the tree measured).

    Returns the JSON object the child printed on its last line: benchmarks
    that compare two trees run each measurement in a process of its own.
    """
    env = {**os.environ, "PYTHONPATH": src}
    cmd = [sys.executable, script, "--child", *args]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.splitlines()[-1]))


def noop(x: Any) -> None:
    """The benchmark sink: does nothing."""


def _best_of(repeat: int, once: Callable[[], float]) -> float:
    return min(once() for _ in range(repeat))


def time_rivermark_like(stream_cls: Any, build: Build, n: int, repeat: int) -> float:
    """Best wall-clock seconds to emit ``range(n)`` into a freshly built graph."""

    def once() -> float:
        source = build(stream_cls, noop)
        emit = source.emit
        gc.collect()
        t0 = time.perf_counter()
        for x in range(n):
            emit(x)
        took = time.perf_counter() - t0
        source.destroy() if hasattr(source, "destroy") else None
        return took

    return _best_of(repeat, once)


def time_plain(plain: Plain, n: int, repeat: int) -> float:
    """Best wall-clock seconds for the plain loop over ``range(n)``."""

    def once() -> float:
        gc.collect()
        t0 = time.perf_counter()
        plain(n, noop)
        return time.perf_counter() - t0

    return _best_of(repeat, once)


def outputs(stream_cls: Any, build: Build, n: int) -> list[Any]:
    """What the pipeline delivers to its sink for ``range(n)``."""
    out: list[Any] = []
    source = build(stream_cls, out.append)
    for x in range(n):
        source.emit(x)
    return out


def plain_outputs(plain: Plain, n: int) -> list[Any]:
    out: list[Any] = []
    plain(n, out.append)
    return out


def check(variant: Variant, rivermark_cls: Any, streamz_cls: Any | None, n: int = 1000) -> str:
    """Compare the three outputs on a small input: ``ok`` or what differs."""
    expected = plain_outputs(variant.plain, n)
    got = outputs(rivermark_cls, variant.build, n)
    problems = []
    if got != expected:
        problems.append(f"rivermark!=plain (first: {got[:3]!r} vs {expected[:3]!r})")
    if streamz_cls is not None:
        ref = outputs(streamz_cls, variant.build, n)
        if ref != expected:
            problems.append(f"streamz!=plain (first: {ref[:3]!r} vs {expected[:3]!r})")
    return "; ".join(problems) or "ok"


def peak_memory(stream_cls: Any, build: Build, n: int) -> int:
    """Peak bytes traced by ``tracemalloc`` while emitting ``range(n)`` (graph built before)."""
    source = build(stream_cls, noop)
    emit = source.emit
    for x in range(100):  # warm caches (fused push functions etc.) before measuring
        emit(x)
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for x in range(n):
            emit(x)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - base
