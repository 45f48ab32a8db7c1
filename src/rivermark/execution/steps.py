"""An operator's per-record step: one typed method, and the copies derived from it.

An operator says what it does with one record in its ``update`` method,
written as ordinary Python that mypy checks and a reader reads.  Decorated
with :func:`step`, that method is also the source of the two faster forms
the engine runs, both derived from the method's own syntax tree:

* **written out in a graph** (:mod:`.graphcode`): the step's statements are
  placed inside the one function generated for the synchronous graph below
  a source, with the node's fixed configuration, the graph's shape and the
  record's missing metadata folded in, and the downstream nodes' steps in
  place of ``return self._emit(y, metadata)``;
* **specialised for one node** (:func:`.folding.specialized_update`): the same
  method with the node's fixed configuration folded in (``map(f)`` calls
  ``f(x)``, not ``f(x, *(), **{})``), which the node-by-node path runs.

Nothing restates the step: a change to the method changes every path.

What folding knows (and nothing else):

* the node's fixed configuration: the attributes its class declares with
  :class:`~rivermark.execution.fixed.Fixed` (``self.args`` and ``self._args``);
  those declared :class:`~rivermark.execution.fixed.Planned` are known by
  their object only when it may change in place (a buffer: the code holds
  it, but its length or truth is asked at run time; a tuple's items are
  known by their objects the same way);
* in a graph, where every record is untracked, ``metadata`` is ``None``;
  ``who`` is the upstream the record comes from, ``self.upstreams`` and
  ``self.downstreams`` are the graph's shape, and a method marked
  :func:`graph_fact` answers for that shape (a change of shape throws the
  generated code away);
* module-level names and builtins are looked up when the code is made, and
  calls of a few pure builtins (``len``, ``isinstance``, ...) on known
  values are evaluated then.

An ``if`` whose test is known keeps one branch, a ``for`` over a known
tuple is unrolled, and a local the step assigns once, from a known value,
becomes that value.

The rules a step follows (checked by :func:`step` when the class is
defined, with a message naming the method and the line):

* its parameters are ``(self, x, who=None, metadata=None)`` and it never
  assigns them;
* it defines no function, lambda, class or comprehension (call a helper
  instead), uses no ``global``/``nonlocal``/``yield``/``await``;
* it passes a record on with ``return self._emit(y, metadata)``: the last
  such statement is the one a graph writes out in place; any other passes
  its record on node by node.  A ``return`` inside a loop or a ``with``
  block keeps the node out of generated graphs (its specialised update is
  called there instead).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["StepInfo", "Unsupported", "step", "graph_fact", "step_of", "emit_call", "where"]

F = TypeVar("F", bound=Callable[..., Any])

#: a node's shape, known while a generated graph lives
SHAPE = frozenset({"upstreams", "downstreams"})
#: builtins that folding may call on known values (pure, cheap)
PURE = frozenset(
    {len, isinstance, issubclass, bool, tuple, type, callable, min, max, abs, frozenset}
)
#: a ``for`` over a known sequence is unrolled up to this many times
MAX_UNROLL = 16
#: the most a specialised step may grow to (statements, weighted by their fields:
#: unrolled loops multiply them)
MAX_SIZE = 4000

_FORBIDDEN = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Lambda,
    ast.Global,
    ast.Nonlocal,
    ast.Yield,
    ast.YieldFrom,
    ast.Await,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
    ast.AsyncFor,
    ast.AsyncWith,
)


class Unsupported(Exception):
    """A step cannot be written out here (the node's specialised update is called instead)."""


@dataclass(frozen=True)
class StepInfo:
    """A step as parsed once: its syntax tree and the names it uses."""

    func: Callable[..., Any]
    #: the method's statements (its docstring dropped)
    body: tuple[ast.stmt, ...]
    #: the module globals its names resolve in
    globals: dict[str, Any]
    #: names the step assigns (its locals), with how often each is assigned
    assigned: dict[str, int]
    #: (line, column) of the ``return self._emit(...)`` a graph writes out in place
    main_emit: tuple[int, int] | None
    #: the names of the parameters as written (``self``, ``x``, ``who``, ``metadata``)
    params: tuple[str, str, str, str]

    @property
    def name(self) -> str:
        return self.func.__qualname__


def where(func: Callable[..., object], node: ast.AST | None = None) -> str:
    """``Class.method (file:line)``: where a step (or a line of it) is written, for messages."""
    code = func.__code__
    # optional: some AST nodes (arguments, keywords) carry no line number
    line = code.co_firstlineno + (getattr(node, "lineno", 1) - 1 if node is not None else 0)
    return f"{func.__qualname__} ({code.co_filename}:{line})"


def emit_call(value: ast.expr | None, self_name: str) -> ast.Call | None:
    """``value`` if it is ``self._emit(y)`` or ``self._emit(y, metadata)``, else None."""
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "_emit"
        and isinstance(value.func.value, ast.Name)
        and value.func.value.id == self_name
        and 1 <= len(value.args) <= 2
        and not value.keywords
        and not any(isinstance(a, ast.Starred) for a in value.args)
    ):
        return value
    return None


def _params(func: Callable[..., object], fdef: ast.FunctionDef) -> tuple[str, str, str, str]:
    args = fdef.args
    names = tuple(a.arg for a in args.args)
    if (
        len(names) != 4
        or args.vararg
        or args.kwarg
        or args.kwonlyargs
        or args.posonlyargs
        or len(args.defaults) != 2
    ):
        raise TypeError(
            f"step {where(func)}: its parameters must be (self, x, who=None, metadata=None), "
            f"got ({', '.join(names)})"
        )
    return (names[0], names[1], names[2], names[3])


def _scan(
    func: Callable[..., object], body: list[ast.stmt], params: tuple[str, ...]
) -> tuple[dict[str, int], list[tuple[int, int]]]:
    """The locals a step assigns (and how often), and where it passes records on."""
    assigned: dict[str, int] = {}
    emits: list[tuple[int, int]] = []
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, _FORBIDDEN):
            raise TypeError(
                f"step {where(func, node)}: a step may not use {type(node).__name__} "
                "(define a helper function or method and call it)"
            )
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if node.id in params:
                raise TypeError(
                    f"step {where(func, node)}: a step may not assign its parameter "
                    f"{node.id!r} (use a local of another name)"
                )
            assigned[node.id] = assigned.get(node.id, 0) + 1
        elif isinstance(node, ast.ExceptHandler) and node.name:
            assigned[node.name] = assigned.get(node.name, 0) + 2  # never known
        elif isinstance(node, ast.Return) and emit_call(node.value, params[0]) is not None:
            emits.append((node.lineno, node.col_offset))
    return assigned, emits


def _parse(func: Callable[..., object]) -> StepInfo:
    """Parse and check ``func`` as a step (raises TypeError naming the line)."""
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError) as e:
        raise TypeError(f"step {func.__qualname__}: its source cannot be read ({e})") from e
    tree = ast.parse(source)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise TypeError(f"step {func.__qualname__}: a step is a method defined with def")
    # line numbers as in the file (for messages and for finding the main emit)
    ast.increment_lineno(tree, func.__code__.co_firstlineno - fdef.lineno)
    params = _params(func, fdef)
    body = list(fdef.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    assigned, emits = _scan(func, body, params)
    return StepInfo(
        func=func,
        body=tuple(body),
        globals=func.__globals__,
        assigned=assigned,
        main_emit=max(emits) if emits else None,
        params=params,
    )


#: the mark of a step of rivermark's own, not parsed yet (see :func:`step_of`)
_LATER = object()


def step(func: F) -> F:
    """Mark ``update`` as the operator's per-record step (see the module docs).

    The method is returned unchanged: it stays the class's ``update``,
    callable as written.  Its source is parsed and checked now (rivermark's
    own steps: when a graph first needs them).

    >>> from rivermark import Stream
    >>> class Double(Stream):
    ...     @step
    ...     def update(self, x, who=None, metadata=None):
    ...         return self._emit(2 * x, metadata)
    >>> s = Stream(); out = Double(s).sink_to_list()
    >>> for i in range(3):
    ...     s.emit(i)
    >>> out
    [0, 2, 4]
    """
    # rivermark's own steps are parsed when a graph first needs them (a process
    # that runs a few operators does not parse them all at import); the unit
    # tests parse every one of them
    own = func.__module__.startswith("rivermark.")
    func.__rivermark_step__ = _LATER if own else _parse(func)  # type: ignore[attr-defined]
    return func


def graph_fact(method: F) -> F:
    """Mark a method whose answer depends only on the graph's shape and fixed configuration.

    A step calls it like any method; in a generated graph, where the
    shape is fixed while the code lives, the call is made once, when the
    code is written, with the arguments known there (``who``), and its
    answer is written in its place.
    """
    method.__rivermark_graph_fact__ = True  # type: ignore[attr-defined]
    return method


def step_of(func: object) -> StepInfo | None:
    """The parsed step of ``func`` (a class's ``update``), or None if it is not one."""
    # optional: only a function decorated with @step carries its step
    info = getattr(func, "__rivermark_step__", None)
    if info is _LATER and callable(func):
        info = func.__rivermark_step__ = _parse(func)  # type: ignore[attr-defined]
    return info if isinstance(info, StepInfo) else None
