"""Pass one of generating code from a step: what is known, folded in.

:mod:`.steps` parses an operator's ``update`` once (:class:`~.steps.StepInfo`);
this module writes that step out at a :class:`Site` (in a generated graph,
or as the node's own specialised update) with the node's fixed
configuration, and in a graph the shape and the record's metadata, folded
in (the rules are in :mod:`.steps`' docs), and holds the one place where
generated code is executed (:func:`define`).
"""

from __future__ import annotations

import ast
import builtins
import copy
import functools
import hashlib
import linecache
import operator
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from rivermark.execution.fixed import Fixed, Planned
from rivermark.execution.node import Node
from rivermark.execution.steps import (
    MAX_SIZE,
    MAX_UNROLL,
    PURE,
    SHAPE,
    StepInfo,
    Unsupported,
    where,
)

__all__ = ["Binder", "Names", "Site", "define", "specialize", "specialized_update"]


#: ``bind(obj, hint) -> name``: the name under which generated code sees ``obj``
Binder = Callable[[Any, str], str]


#: the fixed configuration of each node class, found once per class
_FIXED: weakref.WeakKeyDictionary[type, dict[str, Fixed]] = weakref.WeakKeyDictionary()


def _fixed_slots(cls: type) -> dict[str, Fixed]:
    """Attribute -> :class:`~rivermark.execution.fixed.Fixed` of each one of ``cls`` (both names)."""
    found = _FIXED.get(cls)
    if found is not None:
        return found
    out: dict[str, Fixed] = {}
    for klass in cls.__mro__:
        for name, value in vars(klass).items():
            if isinstance(value, Fixed) and name not in out:
                out[name] = value
                out.setdefault(value.slot, value)
    _FIXED[cls] = out
    return out


_LITERAL_TYPES = (type(None), bool, int, float, complex, str, bytes, type(...))


def _literal(value: object) -> bool:
    if type(value) in _LITERAL_TYPES:
        return True
    return type(value) is tuple and all(_literal(v) for v in value)


@dataclass
class Site:
    """Where a step is being written: the node, and what is known of the record."""

    node: Node
    bind: Binder
    #: a graph (folds metadata, who and the shape) or the node's own update
    graph: bool
    #: the name the generated code holds the node under (a graph; else ``self``)
    self_name: str = "self"
    #: the local holding the incoming record (a graph; else the parameter)
    var: str = "x"
    #: the upstream the record comes from (a graph)
    who: Any = None
    #: suffix that keeps this step's locals apart from other steps' (a graph)
    suffix: str = ""


_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.Not: operator.not_,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Invert: operator.invert,
}
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


def _evaluate(expr: ast.expr, values: list[Any]) -> Any:
    """The value of ``expr`` from the values of its child expressions, in order."""
    if isinstance(expr, ast.UnaryOp):
        return _UNARY[type(expr.op)](values[0])
    if isinstance(expr, ast.BinOp):
        return _BINARY[type(expr.op)](values[0], values[1])
    if isinstance(expr, ast.Compare):
        left = values[0]
        for op, right in zip(expr.ops, values[1:], strict=True):
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(expr, ast.Subscript):
        return values[0][values[1]]
    if isinstance(expr, ast.Call):  # a pure builtin (see PURE): func, then the arguments
        return values[0](*values[1:])
    raise Unsupported(f"cannot evaluate {type(expr).__name__}")


class _Specializer(ast.NodeTransformer):
    """Pass one: a step's statements with everything known folded in."""

    #: the method that specialises each kind of statement (others: their expressions only)
    _STATEMENTS: ClassVar[dict[type, str]] = {
        ast.If: "_if",
        ast.For: "_for",
        ast.Assign: "_assign",
        ast.Return: "_return",
        ast.While: "_loop_or_with",
        ast.With: "_loop_or_with",
        ast.Try: "_try",
    }

    def __init__(self, info: StepInfo, site: Site) -> None:
        self.info = info
        self.site = site
        self.fixed = _fixed_slots(type(site.node))
        #: local names (as written) -> the values they are known to hold
        self.known: dict[str, Any] = {}
        #: bound names -> their values (globals, fixed configuration, shape)
        self.bound: dict[str, Any] = {}
        #: ids of the objects known by identity only (planned buffers: their
        #: contents change while the code lives, so nothing is evaluated on them)
        self.opaque: set[int] = set()
        self.size = 0
        self.p_self, self.p_x, self.p_who, self.p_meta = info.params

    def generic_visit(self, node: ast.AST) -> ast.AST:
        """A copy of ``node`` with its children visited (the step's own tree is never changed)."""
        node = copy.copy(node)
        for field, old in ast.iter_fields(node):
            if isinstance(old, list):
                new: list[Any] = []
                for value in old:
                    if isinstance(value, ast.AST):
                        value = self.visit(value)
                    new.append(value)
                setattr(node, field, new)
            elif isinstance(old, ast.AST):
                setattr(node, field, self.visit(old))
        return node

    # ------------------------------------------------------------------ values
    def _const(self, value: Any, hint: str) -> ast.expr:
        if _literal(value):
            return ast.Constant(value)
        name = self.site.bind(value, hint)
        self.bound[name] = value
        return ast.Name(name, ast.Load())

    def _value(self, expr: ast.expr) -> tuple[bool, object]:
        """(True, value) when ``expr`` is known, else (False, None)."""
        if isinstance(expr, ast.Constant):
            return True, expr.value
        if isinstance(expr, ast.Name) and isinstance(expr.ctx, ast.Load) and expr.id in self.bound:
            value = self.bound[expr.id]
            return (False, None) if id(value) in self.opaque else (True, value)
        if isinstance(expr, ast.Tuple) and isinstance(expr.ctx, ast.Load):
            values = []
            for elt in expr.elts:
                ok, v = self._value(elt)
                if not ok or isinstance(elt, ast.Starred):
                    return False, None
                values.append(v)
            return True, tuple(values)
        return False, None

    def _hold(self, value: object) -> None:
        """A planned attribute's value: an object that may change in place is opaque."""
        if type(value) is tuple:
            for item in value:  # the tuple is known (indexing folds); its items by identity
                if not _literal(item):
                    self.opaque.add(id(item))
        elif not _literal(value):
            self.opaque.add(id(value))

    def _local(self, name: str) -> str:
        return name + self.site.suffix if self.site.graph else name

    def _fold(self, expr: ast.expr) -> ast.expr:
        """``expr`` evaluated now when all its parts are known (a pure expression)."""
        parts = [c for c in ast.iter_child_nodes(expr) if isinstance(c, ast.expr)]
        known = [self._value(p) for p in parts]
        if not all(ok for ok, _ in known):
            return expr
        try:
            value = _evaluate(expr, [v for _, v in known])
        except Exception:  # e.g. an index out of range: leave it to run time
            return expr
        return self._const(value, "k")

    # ------------------------------------------------------------------ names
    def visit_Name(self, node: ast.Name) -> ast.expr:
        site, name = self.site, node.id
        if name == self.p_self:
            return ast.Name(site.self_name, node.ctx) if site.graph else node
        if name == self.p_x:
            return ast.Name(site.var, node.ctx) if site.graph else node
        if name == self.p_who:
            return self._const(site.who, "who") if site.graph else node
        if name == self.p_meta:
            return ast.Constant(None) if site.graph else node
        if name in self.info.assigned:
            if isinstance(node.ctx, ast.Load) and name in self.known:
                return self._const(self.known[name], name)
            return ast.Name(self._local(name), node.ctx)
        if name in self.info.globals:
            return self._const(self.info.globals[name], name)
        if hasattr(builtins, name):
            return self._const(getattr(builtins, name), name)
        raise TypeError(f"step {where(self.info.func, node)}: name {name!r} is not defined")

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        base = node.value
        if isinstance(base, ast.Name) and base.id == self.p_self and isinstance(node.ctx, ast.Load):
            attr = node.attr
            fixed = self.fixed.get(attr)
            if fixed is not None or (self.site.graph and attr in SHAPE):
                value = getattr(self.site.node, attr)
                if isinstance(fixed, Planned):
                    self._hold(value)
                return self._const(value, attr)
        return self.generic_visit(node)  # type: ignore[return-value]

    # ------------------------------------------------------------------ expressions
    def visit_Call(self, node: ast.Call) -> ast.expr:
        func = node.func
        if (
            self.site.graph
            and isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == self.p_self
            # optional: only methods marked as graph facts carry the flag
            and getattr(
                getattr(type(self.site.node), func.attr, None), "__rivermark_graph_fact__", False
            )
        ):
            args = [self.visit(a) for a in node.args]
            known = [self._value(a) for a in args]
            if not node.keywords and all(ok for ok, _ in known):
                answer = getattr(self.site.node, func.attr)(*(v for _, v in known))
                return self._const(answer, func.attr)
            raise TypeError(
                f"step {where(self.info.func, node)}: the graph fact {func.attr!r} is called "
                "with arguments that are not known in a graph"
            )
        node = self.generic_visit(node)  # type: ignore[assignment]
        node.args = self._spread(node.args)
        node.keywords = self._spread_keywords(node.keywords)
        ok, fn = self._value(node.func)
        if ok and fn in PURE and not node.keywords:
            return self._fold(node)
        return node

    def _spread(self, args: list[ast.expr]) -> list[ast.expr]:
        out: list[ast.expr] = []
        for a in args:
            if isinstance(a, ast.Starred):
                ok, v = self._value(a.value)
                if ok and isinstance(v, tuple) and (not v or _literal(v)):
                    out.extend(ast.Constant(e) for e in v)
                    continue
            out.append(a)
        return out

    def _spread_keywords(self, keywords: list[ast.keyword]) -> list[ast.keyword]:
        out: list[ast.keyword] = []
        for k in keywords:
            if k.arg is None:
                ok, v = self._value(k.value)
                if (
                    ok
                    and isinstance(v, dict)
                    and all(isinstance(n, str) and n.isidentifier() for n in v)
                    and all(_literal(e) for e in v.values())
                ):
                    out.extend(ast.keyword(n, ast.Constant(e)) for n, e in v.items())
                    continue
            out.append(k)
        return out

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        return self._fold(self.generic_visit(node))  # type: ignore[arg-type]

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        return self._fold(self.generic_visit(node))  # type: ignore[arg-type]

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        return self._fold(self.generic_visit(node))  # type: ignore[arg-type]

    def visit_Subscript(self, node: ast.Subscript) -> ast.expr:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if isinstance(node.ctx, ast.Load):
            return self._fold(node)
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.expr:
        test = self.visit(node.test)
        ok, v = self._value(test)
        if ok:
            return self.visit(node.body if v else node.orelse)  # type: ignore[no-any-return]
        return ast.IfExp(test, self.visit(node.body), self.visit(node.orelse))

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        is_and = isinstance(node.op, ast.And)
        values: list[ast.expr] = []
        for i, raw in enumerate(node.values):
            v = self.visit(raw)
            ok, value = self._value(v)
            last = i == len(node.values) - 1
            if ok and bool(value) != is_and:  # decides the result: nothing after it runs
                values.append(v)
                break
            if ok and not last:  # passes through to the next value
                continue
            values.append(v)
        if len(values) == 1:
            return values[0]
        return ast.BoolOp(node.op, values)

    # ------------------------------------------------------------------ statements
    def block(self, stmts: list[ast.stmt] | tuple[ast.stmt, ...]) -> list[ast.stmt]:
        """Specialise a list of statements (copies; the step's own tree is untouched)."""
        out: list[ast.stmt] = []
        for stmt in stmts:
            out.extend(self.statement(copy.copy(stmt)))
        return out

    def statement(self, stmt: ast.stmt) -> list[ast.stmt]:
        self.size += 1 + len(stmt.__dict__)
        if self.size > MAX_SIZE:
            raise Unsupported(f"{self.info.name} grows too large when specialised")
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            return []  # a docstring or a note
        method = self._STATEMENTS.get(type(stmt))
        if method is not None:
            return getattr(self, method)(stmt)  # type: ignore[no-any-return]
        return [self.visit(stmt)]

    def _return(self, stmt: ast.Return) -> list[ast.stmt]:
        main = (stmt.lineno, stmt.col_offset) == self.info.main_emit
        stmt = self.visit(stmt)
        stmt.rivermark_main = main  # type: ignore[attr-defined]
        return [stmt]

    def _loop_or_with(self, stmt: ast.While | ast.With) -> list[ast.stmt]:
        if isinstance(stmt, ast.While):
            stmt.test = self.visit(stmt.test)
            stmt.orelse = self.block(stmt.orelse)
        else:
            stmt.items = [self.visit(i) for i in stmt.items]
        stmt.body = self.block(stmt.body) or [ast.Pass()]
        return [stmt]

    def _try(self, stmt: ast.Try) -> list[ast.stmt]:
        stmt.body = self.block(stmt.body) or [ast.Pass()]
        handlers = []
        for h in stmt.handlers:
            h = copy.copy(h)
            if h.type is not None:
                h.type = self.visit(h.type)
            if h.name:
                h.name = self._local(h.name)
            h.body = self.block(h.body) or [ast.Pass()]
            handlers.append(h)
        stmt.handlers = handlers
        stmt.orelse = self.block(stmt.orelse)
        stmt.finalbody = self.block(stmt.finalbody)
        return [stmt]

    def _truth(self, test: ast.expr) -> ast.expr:
        """``test`` as a condition: a known last value that cannot decide the outcome goes.

        ``a or None`` and ``a and True`` are as true as ``a`` (not equal to it).
        """
        while isinstance(test, ast.BoolOp) and len(test.values) > 1:
            ok, value = self._value(test.values[-1])
            if not ok or bool(value) != isinstance(test.op, ast.And):
                break
            rest = test.values[:-1]
            test = rest[0] if len(rest) == 1 else ast.BoolOp(test.op, rest)
        return test

    def _if(self, stmt: ast.If) -> list[ast.stmt]:
        test = self._truth(self.visit(stmt.test))
        ok, value = self._value(test)
        if ok:
            return self.block(stmt.body if value else stmt.orelse)
        body = self.block(stmt.body)
        orelse = self.block(stmt.orelse)
        if not body and not orelse:
            return [ast.Expr(test)]
        if not body:
            return [ast.If(ast.UnaryOp(ast.Not(), test), orelse, [])]
        return [ast.If(test, body, orelse)]

    def _assign(self, stmt: ast.Assign) -> list[ast.stmt]:
        value = self.visit(stmt.value)
        target = stmt.targets[0]
        if (
            len(stmt.targets) == 1
            and isinstance(target, ast.Name)
            and self.info.assigned.get(target.id) == 1
            and self._value(value)[0]
        ):
            self.known[target.id] = self._value(value)[1]
            return []
        stmt.targets = [self.visit(t) for t in stmt.targets]
        stmt.value = value
        return [stmt]

    def _for(self, stmt: ast.For) -> list[ast.stmt]:
        it = self.visit(stmt.iter)
        ok, values = self._value(it)
        if (
            ok
            and isinstance(values, (tuple, range))
            and len(values) <= MAX_UNROLL
            and isinstance(stmt.target, ast.Name)
            and not stmt.orelse
            and not _breaks(stmt.body)
        ):
            name = stmt.target.id
            out: list[ast.stmt] = []
            for v in values:
                self.known[name] = v
                try:
                    out.extend(self.block(stmt.body))
                finally:
                    del self.known[name]
            if values:  # after the loop the variable holds its last value
                target = ast.Name(self._local(name), ast.Store())
                out.append(ast.Assign([target], self._const(values[-1], name)))
            return out
        stmt.target = self.visit(stmt.target)
        stmt.iter = it
        stmt.body = self.block(stmt.body) or [ast.Pass()]
        stmt.orelse = self.block(stmt.orelse)
        return [stmt]


def _breaks(stmts: list[ast.stmt]) -> bool:
    """Whether ``break`` or ``continue`` of this loop level appear in ``stmts``."""

    def walk(nodes: list[ast.stmt]) -> Iterator[ast.AST]:
        for n in nodes:
            yield n
            if isinstance(n, (ast.For, ast.While)):
                continue  # an inner loop's own break/continue
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(n, field, None)
                if inner:
                    yield from walk(inner)

    return any(isinstance(n, (ast.Break, ast.Continue)) for n in walk(stmts))


def specialize(info: StepInfo, site: Site) -> list[ast.stmt]:
    """The step's statements with what is known at ``site`` folded in (pass one)."""
    spec = _Specializer(info, site)
    return spec.block(info.body)


class Names:
    """The names under which generated code sees objects: its globals (a :data:`Binder`)."""

    def __init__(self) -> None:
        self.scope: dict[str, Any] = {"__builtins__": builtins}
        self._names: dict[int, str] = {}

    def __call__(self, obj: object, hint: str = "b") -> str:
        name = self._names.get(id(obj))
        if name is None:
            base = "".join(c for c in hint if c.isalnum() or c == "_").strip("_") or "b"
            name = f"_{base}{len(self._names)}"
            self._names[id(obj)] = name
            self.scope[name] = obj
        return name


@functools.lru_cache(maxsize=256)
def _code(src: str, filename: str) -> types.CodeType:
    # nodes configured alike give the same text: compiling it once serves them all
    return compile(src, filename, "exec")


def define(src: str, what: str, scope: dict[str, Any], name: str) -> Callable[..., Any]:
    """Run generated ``src`` in ``scope`` and return the function ``name`` it defines.

    The one place generated code is executed.  The text is registered in
    :mod:`linecache` under a file name of its own (``<rivermark what
    digest>``, one per distinct text), so a traceback through it shows
    each line, and a debugger can list it; ``fn.rivermark_source`` holds
    the text too.  ``exec`` may raise ``SyntaxError`` (the caller decides).
    """
    digest = hashlib.sha1(src.encode()).hexdigest()[:12]
    filename = f"<rivermark {what} {digest}>"
    # mtime None: linecache.checkcache() keeps the entry (there is no file to compare)
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(_code(src, filename), scope)  # noqa: S102 - written from the graph's steps
    fn: Callable[..., Any] = scope[name]
    fn.rivermark_source = src  # type: ignore[attr-defined]
    return fn


def specialized_update(node: Node, info: StepInfo) -> Callable[..., object]:
    """``node``'s step with its fixed configuration folded in, bound to it.

    The text depends on the class and the fixed configuration only, so
    nodes configured alike share one compiled code object; the objects it
    uses are the function's own globals.
    """
    bind = Names()
    body = specialize(info, Site(node=node, bind=bind, graph=False))
    p = info.params
    fdef = ast.FunctionDef(
        name="update",
        args=ast.arguments(
            posonlyargs=[],
            args=[ast.arg(p[0]), ast.arg(p[1]), ast.arg(p[2]), ast.arg(p[3])],
            kwonlyargs=[],
            kw_defaults=[],
            defaults=[ast.Constant(None), ast.Constant(None)],
        ),
        body=body or [ast.Pass()],
        decorator_list=[],
        returns=None,
    )
    src = ast.unparse(ast.fix_missing_locations(ast.Module(body=[fdef], type_ignores=[])))
    fn = define(src, f"step {info.name}", bind.scope, "update")
    fn.__qualname__ = info.name
    return types.MethodType(fn, node)
