"""Writing the synchronous graph below a node out as one generated function.

The node-by-node path costs a Python call per node and record.  For a
synchronous graph the plan writes one function that does, for an
untracked record, what the nodes' steps do, each step written out in
place (:mod:`.steps` specialises it for its node and its place):

* :func:`compile_loop` writes ``run(records)``, a ``for`` loop over a
  chunk of records: what a source runs.  The objects it reads are bound
  as keyword-only defaults, so the loop reads them as fast locals;
* :func:`compile_emit` writes ``emit(x)``, the same body for one record:
  what ``source.emit(x)`` runs.  Its objects are its globals (a default
  would be copied into the frame at every call).

Where a step returns, the record is done at that node.  When nothing
follows the node in the function (*tail* position), that is a
``continue`` to the next record (``return`` in ``emit``).  When a sibling
branch still has to run, the statements after the return's branch are
moved into the other branches instead (``if``/``else``, ``try``/``else``),
so the node's code always ends where it was placed.  The main
``return self._emit(y, metadata)`` of a step becomes the downstream nodes'
code, with ``y`` as their record.  A node the writer does not write out
(no step, a step it cannot place, a cycle, a limit reached) is called
through its update, which is that node's whole path from there.

Every generated function checks the flag ``_valid`` in its globals; when
the graph changes shape, the plan clears it and the function hands every
record to the node's current path (:func:`retire`).  Records with
metadata and ``asynchronous=True`` calls never take a generated function.
"""

from __future__ import annotations

import ast
import logging
import re
from collections.abc import Callable
from typing import Any

from rivermark.execution import counting
from rivermark.execution.folding import Names, Site, define, specialize
from rivermark.execution.node import Node
from rivermark.execution.push import merge_results, pass_down
from rivermark.execution.steps import Unsupported, emit_call, step_of

logger = logging.getLogger(__name__)

__all__ = ["GraphWriter", "compile_emit", "compile_loop", "retire", "ENABLED", "writes_out"]

#: set to False to leave every graph on its node-by-node path (for comparisons)
ENABLED = True

#: at most this many nodes are written out per function (a node reached by
#: several paths counts once per path)
MAX_WRITTEN = 400
#: deepest nesting of statements (the parser allows 100 levels)
MAX_DEPTH = 60
#: deepest nesting of loops and ``try`` blocks (the compiler allows 20)
MAX_BLOCKS = 16
#: longest path of nodes written out (each costs a few frames of recursion
#: while the code is written)
MAX_PATH = 100

#: ``update(x, who, metadata)`` of a node, as the plan runs it
Update = Callable[[Any, Any, Any], Any]


def retire(fn: Callable[..., object]) -> None:
    """Make the generated function ``fn`` hand every call to its node's current path."""
    if hasattr(fn, "rivermark_source"):
        fn.__globals__["_valid"] = False


def writes_out(node: Node) -> bool:
    """Whether a graph may write ``node``'s step out in place."""
    cls = type(node)
    if step_of(cls.update) is None or cls._emit is not pass_down:
        return False
    update = node.update  # an update set on the instance wins over the class's step
    # optional: a plain function has no __func__ (only a bound method)
    return getattr(update, "__func__", None) is cls.update


def _has_return(stmt: ast.stmt) -> bool:
    """Whether ``stmt`` holds a ``return`` (remembered on the node: asked at every level)."""
    # optional: only the statements the generator marks carry their returns
    found = getattr(stmt, "rivermark_returns", None)
    if found is None:
        found = isinstance(stmt, ast.Return) or any(
            _has_return(child)
            for field in ("body", "orelse", "finalbody", "handlers")
            for child in getattr(stmt, field, ())
        )
        stmt.rivermark_returns = found  # type: ignore[attr-defined]
    return bool(found)


def _name(id_: str) -> ast.Name:
    return ast.Name(id_, ast.Load())


class GraphWriter:
    """The body of one generated function while it is being written."""

    def __init__(self, update_of: Callable[[Node], Update], loop: bool) -> None:
        #: the update the plan runs for a node that is not written out
        self.update_of = update_of
        #: a loop over many records that returns the awaitables nodes hand back
        #: (backpressure), or ``emit`` of one record
        self.loop = loop
        #: the generated function's globals, by the names the code uses
        self.bind = Names()
        self.scope = self.bind.scope
        self._steps = 0
        self._path: list[int] = []
        self.written = 0

    def stop(self) -> list[ast.stmt]:
        """The record is done: go on with the next one (handing back awaitables first)."""
        if self.loop:
            return [ast.If(_name("_out"), [ast.Return(_name("_out"))], []), ast.Continue()]
        return [ast.Return(ast.Constant(None))]

    def collect(self, expr: ast.expr) -> ast.stmt:
        """Evaluate ``expr``, a call that may return awaitables, and keep them (a loop)."""
        if self.loop:
            merged = ast.Call(_name(self.bind(merge_results, "merge")), [_name("_out"), expr], [])
            return ast.Assign([ast.Name("_out", ast.Store())], merged)
        return ast.Expr(expr)

    # ------------------------------------------------------------------ graph
    def push_down(self, node: Node, var: str, tail: bool, depth: tuple[int, int]) -> list[ast.stmt]:
        """Pass the record in ``var`` on from ``node`` to each of its downstreams, in order."""
        out: list[ast.stmt] = []
        if counting.counts_output(node):
            step_counter = ast.Call(
                _name(self.bind(next, "next")), [_name(self.bind(node.out_counter, "passed"))], []
            )
            out.append(ast.Expr(step_counter))
        ds = list(node.downstreams)
        for i, d in enumerate(ds):
            out.extend(self.edge(d, node, var, tail and i == len(ds) - 1, depth))
        return out

    def edge(
        self, node: Node, who: Node, var: str, tail: bool, depth: tuple[int, int]
    ) -> list[ast.stmt]:
        """Pass the record in ``var`` from ``who`` through ``node`` and everything below it."""
        if (
            writes_out(node)
            and id(node) not in self._path
            and len(self._path) < MAX_PATH
            and depth[0] < MAX_DEPTH
            and depth[1] < MAX_BLOCKS
            and self.written < MAX_WRITTEN
        ):
            self._path.append(id(node))
            try:
                stmts = self._write(node, who, var, tail, depth)
            except (Unsupported, RecursionError) as e:
                logger.debug("%s is called, not written out: %r", node, e)
            else:
                self.written += 1
                return stmts
            finally:
                self._path.pop()
        update = self.bind(self.update_of(node), "update")
        call = ast.Call(
            _name(update), [_name(var), _name(self.bind(who, "who")), ast.Constant(None)], []
        )
        return [self.collect(call)]

    def _write(
        self, node: Node, who: Node, var: str, tail: bool, depth: tuple[int, int]
    ) -> list[ast.stmt]:
        info = step_of(type(node).update)
        assert info is not None
        self._steps += 1
        site = Site(
            node=node,
            bind=self.bind,
            graph=True,
            self_name=self.bind(node, "node"),
            var=var,
            who=who,
            suffix=f"_{self._steps}",
        )
        body = specialize(info, site)
        return _Placer(self, node, site.self_name).place(body, tail, depth)


class _Placer:
    """Pass two: a specialised step's returns turned into the graph's control flow."""

    def __init__(self, writer: GraphWriter, node: Node, self_name: str) -> None:
        self.w = writer
        self.node = node
        self.self_name = self_name
        self._vars = 0

    def place(self, stmts: list[ast.stmt], tail: bool, depth: tuple[int, int]) -> list[ast.stmt]:
        return self.jump(stmts, depth) if tail else self.nest(stmts, depth)

    def jump(self, stmts: list[ast.stmt], depth: tuple[int, int]) -> list[ast.stmt]:
        """Tail position: a return ends the record where it is."""
        out: list[ast.stmt] = []
        for s in stmts:
            if isinstance(s, ast.Return):
                out.extend(self.on_return(s, True, depth))
                return out
            if not _has_return(s):
                out.append(s)
            elif isinstance(s, ast.If):
                inner = (depth[0] + 1, depth[1])
                out.append(
                    ast.If(
                        s.test, self.jump(s.body, inner) or [ast.Pass()], self.jump(s.orelse, inner)
                    )
                )
            elif isinstance(s, ast.Try) and not any(map(_has_return, s.finalbody)):
                inner = (depth[0] + 1, depth[1] + 1)
                s.body = self.jump(s.body, inner) or [ast.Pass()]
                for h in s.handlers:
                    h.body = self.jump(h.body, inner) or [ast.Pass()]
                s.orelse = self.jump(s.orelse, inner)
                out.append(s)
            else:
                raise Unsupported("a return inside a loop or a with block")
        return out

    def nest(self, stmts: list[ast.stmt], depth: tuple[int, int]) -> list[ast.stmt]:
        """Not in tail position: what follows a branch that returns moves into the others."""
        out: list[ast.stmt] = []
        for i, s in enumerate(stmts):
            if isinstance(s, ast.Return):
                out.extend(self.on_return(s, False, depth))
                return out
            if not _has_return(s):
                out.append(s)
                continue
            rest = stmts[i + 1 :]
            inner = (depth[0] + 1, depth[1])
            if isinstance(s, ast.If):
                body = self.nest(s.body + rest, inner)
                orelse = self.nest(s.orelse + rest, inner)
                if body:
                    out.append(ast.If(s.test, body, orelse))
                elif orelse:
                    out.append(ast.If(_negate(s.test), orelse, []))
                else:
                    out.append(ast.Expr(s.test))
            elif (
                isinstance(s, ast.Try)
                and not any(map(_has_return, s.body))
                and not any(map(_has_return, s.finalbody))
            ):
                inner = (depth[0] + 1, depth[1] + 1)
                for h in s.handlers:
                    h.body = self.nest(h.body + rest, inner) or [ast.Pass()]
                s.orelse = self.nest(s.orelse + rest, inner)
                out.append(s)
            else:
                raise Unsupported("a return inside a loop, a with block or a try block")
            return out
        return out

    def on_return(self, ret: ast.Return, tail: bool, depth: tuple[int, int]) -> list[ast.stmt]:
        """What ``ret`` does in the graph, then (tail) the end of the record."""
        value = ret.value
        out: list[ast.stmt] = []
        if value is not None and not (isinstance(value, ast.Constant) and value.value is None):
            call = emit_call(value, self.self_name)
            meta = call.args[1] if call is not None and len(call.args) > 1 else ast.Constant(None)
            if (
                call is not None
                # optional: only the statements the generator marks carry this flag
                and getattr(ret, "rivermark_main", False)
                and isinstance(meta, ast.Constant)
                and meta.value is None
            ):
                y = call.args[0]
                if isinstance(y, ast.Name):
                    var = y.id
                else:
                    self._vars += 1
                    var = f"{self.self_name}_out{self._vars}"
                    out.append(ast.Assign([ast.Name(var, ast.Store())], y))
                out.extend(self.w.push_down(self.node, var, tail, depth))
            else:
                out.append(self.w.collect(value))
        if tail and not (out and isinstance(out[-1], (ast.Continue, ast.Return))):
            out.extend(self.w.stop())
        return out


def _negate(test: ast.expr) -> ast.expr:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    return ast.UnaryOp(ast.Not(), test)


def _trim(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """Drop statements after an unconditional jump in every block (dead code)."""
    out: list[ast.stmt] = []
    for s in stmts:
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(s, field, None)
            if inner:
                setattr(s, field, _trim(inner) or [ast.Pass()] if field == "body" else _trim(inner))
        if isinstance(s, ast.Try):
            for h in s.handlers:
                h.body = _trim(h.body) or [ast.Pass()]
        out.append(s)
        if isinstance(s, (ast.Return, ast.Continue, ast.Break, ast.Raise)):
            break
    return out


def _stops(stmts: list[ast.stmt]) -> bool:
    """Whether ``stmts`` end with the loop's ``if _out: return _out; continue``."""
    return len(stmts) >= 2 and isinstance(stmts[-1], ast.Continue) and isinstance(stmts[-2], ast.If)


def _is_out_check(stmt: ast.stmt) -> bool:
    """Whether ``stmt`` is the loop's ``if _out: return _out``."""
    return (
        isinstance(stmt, ast.If)
        and isinstance(stmt.test, ast.Name)
        and stmt.test.id == "_out"
        and not stmt.orelse
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], ast.Return)
    )


def _sets_out(stmt: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Name) and n.id == "_out" and isinstance(n.ctx, ast.Store)
        for n in ast.walk(stmt)
    )


def _ends(stmts: list[ast.stmt]) -> bool:
    """Whether control never runs past the end of ``stmts``."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, (ast.Continue, ast.Return, ast.Break, ast.Raise)):
        return True
    return isinstance(last, ast.If) and _ends(last.body) and _ends(last.orelse)


def _drop_clean_checks(stmts: list[ast.stmt], dirty: bool) -> tuple[list[ast.stmt], bool]:
    """Drop each ``if _out: return _out`` that runs before ``_out`` can have been set.

    Every record starts with ``_out`` empty (a record that collected
    awaitables returns them before the next one starts), so the check is
    dead on every path that has not assigned ``_out`` since the loop's top.
    ``dirty`` says whether some path reaching ``stmts`` may have assigned
    it; returns the statements and whether a path leaving them may have.
    """
    out: list[ast.stmt] = []
    for stmt in stmts:
        if not dirty and _is_out_check(stmt):
            continue
        if isinstance(stmt, ast.If):
            stmt.body, body_dirty = _drop_clean_checks(stmt.body, dirty)
            stmt.orelse, else_dirty = _drop_clean_checks(stmt.orelse, dirty)
            if not stmt.body:
                stmt.body = [ast.Pass()]
            # a branch that ends (continue, return) takes its assignment with it
            dirty = (body_dirty and not _ends(stmt.body)) or (else_dirty and not _ends(stmt.orelse))
        elif isinstance(stmt, ast.Try) and not stmt.finalbody:
            stmt.body, body_dirty = _drop_clean_checks(stmt.body, dirty)
            # a handler may run after any part of the body
            raised = dirty or body_dirty
            handled: list[bool] = []
            for h in stmt.handlers:
                h.body, h_dirty = _drop_clean_checks(h.body, raised)
                h.body = h.body or [ast.Pass()]
                handled.append(h_dirty and not _ends(h.body))
            stmt.orelse, else_dirty = _drop_clean_checks(stmt.orelse, body_dirty)
            after_body = else_dirty if stmt.orelse else body_dirty
            ends_body = _ends(stmt.orelse) if stmt.orelse else _ends(stmt.body)
            dirty = any(handled) or (after_body and not ends_body)
        elif _sets_out(stmt):
            dirty = True
        out.append(stmt)
    return out, dirty


def _source(fdef: ast.FunctionDef) -> str:
    module = ast.fix_missing_locations(ast.Module(body=[fdef], type_ignores=[]))
    return ast.unparse(module) + "\n"


def _args(
    names: list[str], defaults: list[ast.expr], kwonly: list[str] | None = None
) -> ast.arguments:
    kw = kwonly or []
    return ast.arguments(
        posonlyargs=[],
        args=[ast.arg(n) for n in names],
        kwonlyargs=[ast.arg(n) for n in kw],
        kw_defaults=[_name(n) for n in kw],
        defaults=defaults,
    )


def _compile(src: str, scope: dict[str, object], what: str) -> Callable[..., object] | None:
    try:
        return define(src, f"graph {what}", scope, what)
    except (SyntaxError, RecursionError, MemoryError) as e:  # pragma: no cover - a safety net
        logger.debug("could not compile the %s: %r", what, e)
        return None


def compile_loop(root: Node, update_of: Callable[[Node], Update]) -> Callable[[Any], Any] | None:
    """``run(records)``: pass untracked records from an iterator to every downstream of ``root``.

    ``run`` takes records until the iterator is exhausted (returns None) or
    a record's nodes handed back awaitables (asynchronous work running
    below, e.g. a full ``zip`` buffer's backpressure): it returns them at
    once, after that record, and the caller waits for them and calls
    ``run`` again with the same iterator.  Once retired, every record goes
    through ``root._emit``.  The caller makes sure the graph below ``root``
    is synchronous.
    """
    w = GraphWriter(update_of, loop=True)
    body = _trim(w.push_down(root, "x", tail=True, depth=(2, 1)))
    if _stops(body):
        del body[-2:]
    retired = [
        ast.Assign(
            [ast.Name("_out", ast.Store())],
            ast.Call(
                ast.Attribute(_name("_self"), "_emit", ast.Load()),
                [_name("x"), ast.Constant(None)],
                [],
            ),
        ),
        ast.If(_name("_out"), [ast.Return(_name("_out"))], []),
        ast.Continue(),
    ]
    loop_body: list[ast.stmt] = [
        ast.If(ast.UnaryOp(ast.Not(), _name("_valid")), retired, []),
        *body,
        ast.If(_name("_out"), [ast.Return(_name("_out"))], []),
    ]
    loop_body, _ = _drop_clean_checks(loop_body, dirty=False)
    fdef = ast.FunctionDef(
        name="run",
        args=_args(["records"], []),
        body=[
            ast.Assign([ast.Name("_out", ast.Store())], ast.Constant(None)),
            ast.For(ast.Name("x", ast.Store()), _name("records"), loop_body, []),
            ast.Return(ast.Constant(None)),
        ],
        decorator_list=[],
        returns=None,
    )
    text = _source(fdef)
    # the objects the loop reads, bound once per call as keyword-only defaults (fast
    # locals); those folding bound but left unused are not
    used = set(re.findall(r"\b_\w+", text))
    params = ", ".join(f"{k}={k}" for k in w.scope if k in used)
    if params:
        text = text.replace("def run(records):", f"def run(records, *, {params}):", 1)
    scope = w.scope
    scope.update(_self=root, _valid=True)
    fn = _compile(text, scope, "run")
    if fn is not None:
        fn.__qualname__ = f"{type(root).__name__}.run"
    return fn


def compile_emit(
    root: Node, general: Callable[..., object], update_of: Callable[[Node], Update]
) -> Callable[..., object] | None:
    """``emit(x, asynchronous=False, metadata=None)`` for the synchronous graph below ``root``.

    ``general`` is the general emit (``general(root, x, asynchronous,
    metadata)``) that the function hands tracked records and asynchronous
    calls to; once retired it calls ``root.emit``, the node's current one.
    """
    w = GraphWriter(update_of, loop=False)
    body = _trim(w.push_down(root, "x", tail=True, depth=(1, 0)))
    general_call = ast.Return(
        ast.Call(
            _name("_general"),
            [_name("_self"), _name("x"), _name("asynchronous"), _name("metadata")],
            [],
        )
    )
    current_call = ast.Return(
        ast.Call(
            ast.Attribute(_name("_self"), "emit", ast.Load()),
            [_name("x"), _name("asynchronous"), _name("metadata")],
            [],
        )
    )
    guard = ast.If(
        ast.BoolOp(
            ast.Or(),
            [
                _name("asynchronous"),
                ast.Compare(_name("metadata"), [ast.IsNot()], [ast.Constant(None)]),
                ast.UnaryOp(ast.Not(), _name("_valid")),
            ],
        ),
        [ast.If(_name("_valid"), [general_call], []), current_call],
        [],
    )
    fdef = ast.FunctionDef(
        name="emit",
        args=_args(["x", "asynchronous", "metadata"], [ast.Constant(False), ast.Constant(None)]),
        body=[guard, *body]
        if body and isinstance(body[-1], ast.Return)
        else [guard, *body, ast.Return(ast.Constant(None))],
        decorator_list=[],
        returns=None,
    )
    scope = w.scope
    scope.update(_self=root, _general=general, _valid=True)
    fn = _compile(_source(fdef), scope, "emit")
    if fn is not None:
        fn.__qualname__ = f"{type(root).__name__}.emit"
        fn.__doc__ = general.__doc__
    return fn
