"""One execution plan per connected graph: how its records travel, for its current shape.

A :class:`Plan` belongs to one connected graph (every node reachable up
or down from any of them) and holds what was built for the graph's
present shape: each node's push to its downstreams, the update the
node-by-node path runs for it, the generated ``emit`` of a root, the
generated loop a source runs, and which nodes need the event loop.  Each
is built the first time it is needed.

Any change of shape (a node created below another, ``connect``,
``disconnect``, ``destroy``, a node found to be asynchronous, a root
starting to count its records) calls :func:`changed` with the nodes
involved, which retires their plans: every generated function of the plan
hands its records to the nodes' current path from then on, and each node
forgets what the plan put on it.  The next record builds a new plan for
the graph as it is.  Graphs that do not touch each other keep their plans.

What a plan puts on a node, so that the hot path costs one attribute
look-up: ``node._push`` (the node's push) and ``node.emit`` (the generated
``emit`` of a root); the node's class provides both otherwise
(:func:`unplanned_push`, :class:`EmitMethod`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterator
from types import MethodType
from typing import Any

from rivermark.execution import counting, delivery, graphcode
from rivermark.execution.folding import specialized_update
from rivermark.execution.node import Node, Results
from rivermark.execution.push import Push, build_push, fan_out, no_downstream, pass_down
from rivermark.execution.steps import step_of

__all__ = [
    "Plan",
    "plan_of",
    "changed",
    "count_emits",
    "unplanned_push",
    "EmitMethod",
    "emit_loop",
    "retire_all",
]

#: plans are built and retired under this lock (records never take it)
_LOCK = threading.RLock()
#: the plans alive, for :func:`retire_all`
_PLANS: weakref.WeakSet[Plan] = weakref.WeakSet()

Update = Callable[[Any, Any, Any], Any]


class Plan:
    """What one connected graph runs, built lazily for its current shape."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        #: False once the graph changed: nothing of this plan is used any more
        self.valid = True
        self._generated: list[Callable[..., Any]] = []
        self._updates: dict[int, Update] = {}
        self._loops: dict[int, Callable[[Iterator[Any]], Any]] = {}
        self._below: dict[int, asyncio.AbstractEventLoop | None] = {}
        self._deferred: dict[int, tuple[delivery.DeferredDelivery, ...]] = {}

    # ------------------------------------------------------------------ lifecycle
    def retire(self) -> None:
        """The graph changed: take back everything built for its old shape."""
        with _LOCK:
            if not self.valid:
                return
            self.valid = False
            for fn in self._generated:
                graphcode.retire(fn)
            for n in self.nodes:
                if n._rivermark_plan is self:  # noqa: SLF001 - the plan's own mark on its nodes
                    n._rivermark_plan = None  # noqa: SLF001
                for attr in ("_push", "emit"):
                    with contextlib.suppress(AttributeError):
                        delattr(n, attr)

    def _install(self, node: Node, attr: str, value: object) -> None:
        if self.valid:
            object.__setattr__(node, attr, value)

    # ------------------------------------------------------------------ node by node
    def update_of(self, node: Node) -> Update:
        """The update the node-by-node path runs for ``node``.

        Its step specialised to its fixed configuration when its class's
        ``update`` is a step and the instance has no ``update`` of its own;
        else its ``update``.
        """
        found = self._updates.get(id(node))
        if found is not None:
            return found
        update: Update = node.update
        info = step_of(type(node).update)
        # optional: a plain function has no __func__ (only a bound method)
        if info is not None and getattr(update, "__func__", None) is type(node).update:
            update = specialized_update(node, info)
        self._updates[id(node)] = update
        return update

    def push_of(self, node: Node) -> Push:
        """``node``'s push to its downstreams (counting included), installed on it."""
        with _LOCK:
            ds = list(node.downstreams)
            if not ds:
                push: Push = no_downstream
            elif len(ds) == 1:
                push = build_push(self.update_of(ds[0]), node)
            else:
                push = fan_out([build_push(self.update_of(d), node) for d in ds])
            push = counting.counting_push(node, push)
            self._install(node, "_push", push)
            return push

    # ------------------------------------------------------------------ event loop
    def loop_below(self, node: Node) -> asyncio.AbstractEventLoop | None:
        """The loop an emit from ``node`` runs on: an asynchronous node's, at or below it.

        None for a synchronous graph below ``node``.
        """
        key = id(node)
        if key in self._below:
            return self._below[key]
        found: Node | None = None
        seen: set[int] = set()
        todo: list[Node] = [node]
        while todo:
            n = todo.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            if n._is_async:  # noqa: SLF001 - a node of this plan's graph
                found = n
                break
            todo.extend(n.downstreams)
        loop = found.loop if found is not None else None
        # only an asynchronous node defers delivery, so a synchronous graph has none
        self._deferred[key] = () if found is None else delivery.deferred_nodes(node.downstreams)
        self._below[key] = loop
        return loop

    def deferred(self, node: Node) -> tuple[delivery.DeferredDelivery, ...]:
        """The nodes below ``node`` that pass records on after their update returned."""
        self.loop_below(node)
        return self._deferred[id(node)]

    # ------------------------------------------------------------------ generated code
    def record_loop(self, node: Node) -> Callable[[Iterator[Any]], list[Awaitable[object]] | None]:
        """``run(records)`` for ``node`` (see :meth:`rivermark.core.node.Stream.record_loop`)."""
        fn = self._loops.get(id(node))
        if fn is not None:
            return fn
        with _LOCK:
            fn = functools.partial(emit_loop, node._emit)
            if (
                graphcode.ENABLED
                and type(node)._emit is pass_down
                and all(self.loop_below(d) is None for d in node.downstreams)
            ):
                generated = graphcode.compile_loop(node, self.update_of)
                if generated is not None:
                    self._generated.append(generated)
                    if not self.valid:
                        graphcode.retire(generated)
                    fn = generated
            if self.valid:
                self._loops[id(node)] = fn
            return fn

    def emit_of(self, node: Node, general_emit: Callable[..., object]) -> Callable[..., object]:
        """What ``node.emit`` is for the graph as it is now, installed on the node.

        For a synchronous graph below a node whose class keeps the base
        ``emit`` and that was not created with ``asynchronous=True``, the
        generated function of :func:`.graphcode.compile_emit` (one call per
        record for the whole graph); otherwise the ordinary bound method.
        """
        with _LOCK:
            general = MethodType(general_emit, node)
            if type(node).emit is not general_emit:
                return general  # a class with its own emit calling super().emit(): never shadow it
            fn: Callable[..., Any] = general
            if not node.asynchronous and self.loop_below(node) is None:
                generated = None
                if graphcode.ENABLED and type(node)._emit is pass_down:
                    generated = graphcode.compile_emit(node, general_emit, self.update_of)
                if generated is not None:
                    self._generated.append(generated)
                    fn = generated
                else:
                    fn = self._push_emit(node, general)
            if not self.valid:
                graphcode.retire(fn)
                return general
            self._install(node, "emit", fn)
            return fn

    def _push_emit(self, node: Node, general: Callable[..., object]) -> Callable[..., object]:
        """``emit`` of a synchronous graph that is not written out: the node's push."""
        emit_down = self.push_of(node) if type(node)._emit is pass_down else node._emit
        plan = self

        def emit(x: Any, asynchronous: bool = False, metadata: Any = None) -> Any:
            if not plan.valid:  # the graph changed: the node's current emit
                return node.emit(x, asynchronous, metadata)
            if asynchronous:
                return general(x, asynchronous, metadata)
            emit_down(x, metadata)
            return None

        emit.__doc__ = general.__doc__
        return emit


def plan_of(node: Node) -> Plan:
    """The plan of ``node``'s graph, built for its current shape if there is none."""
    plan: Plan | None = node._rivermark_plan  # noqa: SLF001 - the plan's mark on the node
    if plan is not None and plan.valid:
        return plan
    with _LOCK:
        plan = node._rivermark_plan  # noqa: SLF001
        if plan is not None and plan.valid:
            return plan
        nodes = list(node.walk())
        plan = Plan(nodes)
        for n in nodes:
            n._rivermark_plan = plan  # noqa: SLF001
        _PLANS.add(plan)
        return plan


def changed(*nodes: Node) -> None:
    """The graphs of ``nodes`` changed shape: retire their plans."""
    with _LOCK:
        for n in nodes:
            plan = n._rivermark_plan  # noqa: SLF001 - the plan's mark on the node
            if plan is not None:
                plan.retire()


def retire_all() -> None:
    """Retire every plan (after switching :data:`.graphcode.ENABLED` or counting)."""
    with _LOCK:
        for plan in list(_PLANS):
            plan.retire()


def count_emits(node: Node) -> None:
    """Count the records a root fed by ``emit`` passes on (from now on)."""
    if not node.counts_emits:
        node.counts_emits = True
        changed(node)


def unplanned_push(node: Any, x: Any, metadata: Any) -> Results:
    """``Stream._push`` before the plan built one: build it, then push (``node``: a Node)."""
    push = plan_of(node).push_of(node)
    results: Results = push(x, metadata)
    return results


class EmitMethod:
    """``Stream.emit``: on an instance, what the plan installs (:meth:`Plan.emit_of`).

    Looking ``emit`` up on a node that has nothing installed for the
    current shape builds it then, so ``emit = source.emit`` taken after
    building a synchronous graph is its generated function.  On the class
    it is the plain method.
    """

    def __init__(self, func: Callable[..., object]) -> None:
        self.func = func
        self.__doc__ = func.__doc__
        self.__name__ = func.__name__
        self.__qualname__ = func.__qualname__

    def __get__(self, obj: Node | None, objtype: type | None = None) -> Any:
        if obj is None:
            return self.func
        return plan_of(obj).emit_of(obj, self.func)


def emit_loop(
    emit: Callable[[Any, Any], list[Awaitable[object]] | None], records: Iterator[Any]
) -> list[Awaitable[object]] | None:
    """The record loop of a graph with asynchronous nodes: one ``_emit`` per record."""
    for x in records:
        results = emit(x, None)
        if results:
            return results
    return None
