"""Writing the synchronous graph below a node out as one generated function.

The node-by-node path (:mod:`rivermark.fastpath.push`) costs one Python call
per node and record.  For a purely synchronous graph, :func:`compile_emit`
writes the source code of one function, ``emit(x)``, that does for an
untracked record (``metadata`` is None) what the nodes' ``update`` methods
would do, with the per-record step of the common nodes written out in place
(their kernels, each next to its operator's class): one ``try`` per user
function (so each node keeps its own error policy and ``error_count``), the
node's state read from and written back to the node itself at every record
(so ``get_state()`` between two records, and ``set_state`` replacing a
node's containers, see and act on exactly what ``update`` would), and the
node's live configuration (``func``, ``predicate``, ``n``, ``maxsize``)
read from the node at every record.  :func:`compile_loop` writes the same
body inside a ``for`` loop over many records: the function a source runs
over a chunk.

A node class takes part by registering a kernel (exact classes only; a node
whose instance overrides ``update`` is never written out).  Everything else,
and every record whose node is not in its simple state (a tracked record
parked in a window, a full zip buffer, ...), goes through the node's push,
i.e. its own ``update``.

A kernel is also the definition of its node's ``update``: a class whose
``update`` is :func:`derived_update` gets, per node, the same kernel
written out for that node alone (:func:`compile_update`, a ``Codegen`` in
single-node mode: fields read on ``self``, records passed on with
``return self._emit(y, metadata)``, tracked records included).  The
per-record step of such an operator is thus written once, in its kernel.

Every generated function has its own globals, which hold the objects it
uses (nodes, error handlers: a global costs nothing per call, whereas every
closure variable is copied into the frame on every call) and a validity
flag ``_valid``.  On the next change of any graph's shape the node takes
the function back and the flag is cleared (:func:`retire`); from then on
the function hands every record to the node's current path, so it never
runs a graph that has changed (``connect``/``disconnect``/``destroy``).
Records with metadata and ``asynchronous=True`` calls always take the
general path.
"""

from __future__ import annotations

import builtins
import functools
import logging
from collections.abc import Callable
from types import CodeType, MethodType
from typing import TYPE_CHECKING, Any

from ..core import counting
from ..core.clock import retire as retire
from . import push as fusion

if TYPE_CHECKING:  # pragma: no cover
    from ..core.node import Stream

logger = logging.getLogger(__name__)

__all__ = [
    "Codegen",
    "Inliner",
    "register_inliner",
    "compile_emit",
    "compile_loop",
    "compile_update",
    "derived_update",
    "pass_on",
    "retire",
]

#: ``inliner(codegen, node, who, var) -> bool``: write the code that passes the
#: untracked record held in the local variable ``var`` from ``who`` through
#: ``node``; return False, before writing anything, to decline (the node's
#: fused push is called instead)
Inliner = Callable[["Codegen", Any, Any, str], bool]

_INLINERS: dict[type, Inliner] = {}

#: set to False to leave every graph on its fused path (for comparisons in tests)
ENABLED = True

#: at most this many nodes are written out per compiled function (a node
#: reached by several paths is written once per path)
MAX_INLINED = 400
#: deepest indentation used; deeper parts call the fused push instead
MAX_INDENT = 40
#: longest path written out
MAX_PATH = 200


@functools.lru_cache(maxsize=128)
def _code(src: str) -> CodeType:
    # graphs of the same shape and configuration give the same source: compiling
    # it (the costly part) once serves graphs rebuilt or changed back and forth
    return compile(src, "<rivermark emit>", "exec")


def register_inliner(cls: type, inliner: Inliner) -> None:
    """Write nodes whose type is exactly ``cls`` out with ``inliner``."""
    _INLINERS[cls] = inliner


class Codegen:
    """The source of one generated ``emit`` while it is being written.

    An inliner writes statements with :meth:`line` and the helpers below.
    Control flow is expressed with :meth:`call_user`, :meth:`attempt`,
    :meth:`only_if`, :meth:`skip_if` and :meth:`open`: each of them either ends the path
    (``return``) when nothing follows the current node in the function, or
    nests what follows inside an ``else``/``if`` block when a sibling
    branch still has to run after it.  Blocks opened by an inliner are
    closed when it returns, so all statements an inliner writes after
    opening one belong inside it.
    """

    def __init__(self, loop: bool = False, node: Stream | None = None) -> None:
        #: single-node mode: the node whose own ``update`` is being written
        #: (:func:`compile_update`); None for a graph
        self.node = node
        #: single-node mode: the name of the node's method that is its whole
        #: update for this configuration (:meth:`delegate`)
        self.delegate_to: str | None = None
        #: the expression for the record's metadata: a graph carries only
        #: untracked records; a node's own ``update`` receives ``metadata``
        self.meta = "None" if node is None else "metadata"
        #: True for a loop over many records that returns the awaitables the
        #: nodes hand back as soon as a record has produced some (a source
        #: waits for them: backpressure); False for ``emit`` in a synchronous
        #: graph, one record, which returns None
        self.collect = loop
        self.lines: list[str] = []
        self.indent = 2 if loop else 1
        #: True while nothing follows the current position in the function
        self.tail = True
        #: the generated function's globals
        self.scope: dict[str, Any] = {"__builtins__": builtins}
        self._bound: dict[int, str] = {}
        self._tmp = 0
        self._path: list[int] = []
        self.inlined = 0

    # ------------------------------------------------------------------ names
    def bind(self, obj: Any, hint: str = "b") -> str:
        """The name under which the generated code sees ``obj`` (one of its globals)."""
        if self.node is not None and obj is self.node:
            return "self"
        name = self._bound.get(id(obj))
        if name is None:
            name = f"_{hint}{len(self._bound)}"
            self._bound[id(obj)] = name
            self.scope[name] = obj
        return name

    def field(self, node: Stream, name: str) -> str:
        """The expression for ``node.<name>``, a field its class declares for kernels.

        Generated code reaches a node only through the fields its class
        declares: its state (``_state_attrs``, what ``get_state``/``set_state``
        and the checkpoint see) and ``_kernel_fields`` (live configuration,
        the methods a kernel may call, and the containers of nodes whose
        state is written by ``get_state``), so a kernel cannot touch
        anything the class does not declare as part of that contract.
        """
        cls = type(node)
        if name not in cls._kernel_fields and name not in cls._state_attrs:
            declared = sorted(cls._kernel_fields | set(cls._state_attrs))
            raise TypeError(
                f"kernel for {cls.__name__} uses {name!r}, which the class does not "
                f"declare in _state_attrs or _kernel_fields {declared!r}"
            )
        return f"{self.bind(node, 'node')}.{name}"

    def fields(self, node: Stream) -> Callable[[str], str]:
        """``field`` bound to ``node``: ``f = cg.fields(node); f("state")``."""
        return functools.partial(self.field, node)

    def read(self, node: Stream, attr: str) -> str:
        """A local variable holding ``node.<attr>`` read now (live configuration, a field)."""
        v = self.tmp("f")
        self.line(f"{v} = {self.field(node, attr)}")
        return v

    def value(self, expr: str) -> str:
        """A local variable holding ``expr`` evaluated once (a record passed on is a name)."""
        v = self.tmp()
        self.line(f"{v} = {expr}")
        return v

    def call_args(self, first: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The argument list ``first, *args, **kwargs`` of a user function (fixed ``args``)."""
        parts = [first]
        if args:
            parts.append("*" + self.bind(args, "args"))
        if kwargs:
            parts.append("**" + self.bind(kwargs, "kw"))
        return ", ".join(parts)

    def tmp(self, hint: str = "v") -> str:
        """A fresh local variable name."""
        self._tmp += 1
        return f"{hint}{self._tmp}"

    # ------------------------------------------------------------------ statements
    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def _stop(self) -> None:
        if self.collect:  # the next record, once this one's awaitables are handed back
            self.line("    if _out:")
            self.line("        return _out")
            self.line("    continue")
        elif not self.lines[-1].startswith("    " * (self.indent + 1) + "return "):
            self.line("    return None")

    def result(self, expr: str) -> str:
        """A statement evaluating ``expr``, a call that may return awaitables (a node's push).

        In a collecting function the awaitables are added to the list the
        function returns; otherwise the value is dropped (a synchronous
        ``emit`` outside any event loop gets none back).
        """
        if self.node is not None:  # the node's own update: hand them to its caller
            return f"return {expr}"
        if not self.collect:
            return expr
        return f"_out = {self.bind(_merge, 'merge')}(_out, {expr})"

    def open(self, header: str) -> None:
        """Open ``header:`` (e.g. ``if cond``); it lasts until the inliner returns."""
        self.line(header + ":")
        self.indent += 1

    def when(self, cond: str, *stmts: str) -> None:
        """``if cond: stmts`` and go on after it either way."""
        self.line(f"if {cond}:")
        for s in stmts:
            self.line("    " + s)

    def skip_if(self, cond: str, *stmts: str) -> None:
        """When ``cond``: run ``stmts`` and nothing more on this path."""
        self.line(f"if {cond}:")
        for s in stmts:
            self.line("    " + s)
        if self.tail:
            self._stop()
        else:
            if not stmts:
                self.line("    pass")
            self.line("else:")
            self.indent += 1

    def only_if(self, cond: str) -> None:
        """Go on along this path only when ``cond`` holds."""
        if self.tail:
            self.line(f"if not ({cond}):")
            self._stop()
        else:
            self.open(f"if {cond}")

    def rare(
        self, cond: str, node: Stream, who: Stream | None, var: str, body: Callable[[], None]
    ) -> None:
        """When ``cond``: the record takes ``body``, a rare case of ``node``'s step.

        ``body`` is written into the node's own ``update`` (single-node mode)
        and must end the path (pass the record on with :meth:`push_down`, or
        nothing); in a graph the record is handed to that ``update`` instead
        (its push), so a rare case costs no code per graph.
        """
        if self.node is None:
            self.skip_if(cond, self.result(self.fallback(node, who, var)))
            return
        self.line(f"if {cond}:")
        self.indent += 1
        body()
        if not self._returned():
            self.line("return None")
        self.indent -= 1

    def delegate(self, node: Stream, name: str) -> bool:
        """Make the declared method ``name`` (an ``update``) the node's step for its configuration.

        In a graph the kernel declines (returns False: the node's push calls
        that method); the node's own ``update`` is the method itself, with no
        call in between.  For configurations a kernel does not write out.
        """
        self.field(node, name)  # declared
        if self.node is None:
            return False
        self.delegate_to = name
        return True

    def _returned(self) -> bool:
        """Whether the last line written is a ``return`` at the current indentation."""
        return bool(self.lines) and self.lines[-1].startswith("    " * self.indent + "return ")

    def call_user(self, target: str, call: str, record: str, node: Stream, func: str) -> None:
        """``target = call`` guarded by the node's error policy.

        When the call raises, ``node._user_error(record, exc, func)`` decides
        (raise the user's exception with its context, or drop the record) and nothing
        more happens on this path.
        """
        err = self.bind(node._user_error, "err")  # noqa: SLF001 - the node's error policy
        e = self.tmp("e")
        self.attempt(f"{target} = {call}", f"Exception as {e}", f"{err}({record}, {e}, {func})")

    def attempt(self, stmt: str, exc: str, *handler: str) -> None:
        """``try: stmt`` and, on ``except exc``, run ``handler`` and nothing more on this path."""
        self.line("try:")
        self.line(f"    {stmt}")
        self.line(f"except {exc}:")
        for s in handler:
            self.line("    " + s)
        if self.tail:
            self._stop()
        else:
            self.line("else:")
            self.indent += 1

    # ------------------------------------------------------------------ graph
    def fallback(self, node: Stream, who: Stream | None, var: str) -> str:
        """An expression passing ``var`` through ``node``'s full (fused) path."""
        if self.node is not None:
            raise TypeError(
                f"the kernel of {type(node).__name__} hands the record to the node's own "
                "update, which is this kernel: write the case out (Codegen.rare)"
            )
        assert who is not None, "a graph passes a record on from an upstream"
        return f"{self.bind(fusion.build_push(node, who), 'push')}({var}, None)"

    def push_down(self, node: Stream, var: str, meta: str = "metadata") -> None:
        """Pass the untracked record in ``var`` to every downstream of ``node``, in order.

        In single-node mode: ``return self._emit(var, <meta>)`` (the node's
        push to its downstreams, counting included, tracked records too);
        ``meta`` is the record's own ``metadata`` unless the kernel passes on
        a new record without any (``"None"``: a window of untracked records).
        """
        if self.node is not None:
            assert node is self.node, "a node's own update passes records on from itself"
            self.line(f"return self._emit({var}, {meta})")
            return
        ds = list(node.downstreams)
        count = counting.count_statement(node, self.bind)
        if count is not None:
            self.line(count)
        tail = self.tail
        base = self.indent
        for i, d in enumerate(ds):
            self.tail = tail and i == len(ds) - 1
            self.push_edge(d, node, var)
            self.indent = base
        self.tail = tail

    def push_edge(self, node: Stream, who: Stream, var: str) -> None:
        """Pass the untracked record in ``var`` from ``who`` to ``node``."""
        inliner = _INLINERS.get(type(node))
        if (
            inliner is not None
            and fusion.own_update(node)
            and id(node) not in self._path
            and len(self._path) < MAX_PATH
            and self.indent < MAX_INDENT
            and self.inlined < MAX_INLINED
        ):
            before = len(self.lines)
            self._path.append(id(node))
            try:
                done = inliner(self, node, who, var)
            finally:
                self._path.pop()
            if done:
                self.inlined += 1
                return
            assert len(self.lines) == before, f"{inliner!r} declined after writing code"
        self.line(self.result(self.fallback(node, who, var)))

    # ------------------------------------------------------------------ output
    def source(self) -> str:
        head = [
            "def emit(x, asynchronous=False, metadata=None):",
            "    if asynchronous or metadata is not None or not _valid:",
            "        if _valid:",
            "            return _general(_self, x, asynchronous, metadata)",
            "        return _self.emit(x, asynchronous, metadata)",
        ]
        return "\n".join([*head, *self.lines, "    return None", ""])

    def loop_source(self) -> str:
        # what the loop reads per record is bound once per call, as keyword-only
        # defaults (fast locals), not looked up as a global per record; only
        # ``_valid`` stays a global, for :func:`retire` to turn off
        fixed = [k for k in self.scope if k != "__builtins__"] + ["next", "len", "tuple"]
        params = ", ".join(f"{k}={k}" for k in fixed)
        head = [
            f"def run(records, *, {params}):",
            "    _out = None",
            "    for x in records:",
            "        if not _valid:",
            "            _out = _self._emit(x, None)",
            "            if _out:",
            "                return _out",
            "            continue",
        ]
        tail = ["        if _out:", "            return _out", "    return None", ""]
        return "\n".join([*head, *self.lines, *tail])

    def update_source(self) -> str:
        head = ["def update(self, x, who=None, metadata=None):"]
        tail = [] if self._returned() else ["    return None"]
        return "\n".join([*head, *self.lines, *tail, ""])


def _merge(out: list[Any] | None, results: Any) -> list[Any] | None:
    """Add the awaitables ``results`` (a push's return value) to ``out``."""
    if not results:
        return out
    if out is None:
        return list(results)
    out.extend(results)
    return out


def compile_emit(root: Stream, general: Callable[..., Any]) -> Callable[..., Any] | None:
    """Generate ``emit(x, asynchronous=False, metadata=None)`` for ``root``'s graph.

    ``general`` is the general ``Stream.emit`` (called as
    ``general(root, x, asynchronous, metadata)``) that the generated
    function hands tracked records and asynchronous calls to.  The caller
    makes sure the graph below ``root`` is purely synchronous, and retires
    the function (:func:`retire`) when the graph changes, after taking it
    back from the node (``root.emit`` must then no longer be this
    function).  Returns None if the generated code does not compile.
    """
    cg = Codegen()
    cg.push_down(root, "x")
    src = cg.source()
    scope = cg.scope
    scope.update(_self=root, _general=general, _valid=True)
    try:
        exec(_code(src), scope)
    except (SyntaxError, RecursionError, MemoryError) as e:  # pragma: no cover - a safety net
        logger.debug("could not compile the emit of %r: %r", root, e)
        return None
    fn: Callable[..., Any] = scope["emit"]
    fn.__qualname__ = f"{type(root).__name__}.emit"
    fn.__doc__ = general.__doc__
    fn.rivermark_source = src  # type: ignore[attr-defined]
    return fn


def compile_loop(root: Stream) -> Callable[[Any], Any] | None:
    """Generate ``run(records)`` passing untracked records to every downstream of ``root``.

    ``records`` is an iterator; ``run`` takes records from it and runs the
    body of :func:`compile_emit` on each, in one loop (no call per record),
    until it is exhausted (returns None) or a record's nodes handed back
    awaitables (asynchronous work, e.g. a full zip buffer's backpressure):
    it then returns them at once, after that record, and the caller waits
    for them and calls ``run`` again with the same iterator.  After
    :func:`retire` every record goes through ``root._emit``.  The caller
    makes sure the graph below ``root`` (not ``root`` itself) is purely
    synchronous.
    """
    cg = Codegen(loop=True)
    cg.push_down(root, "x")
    src = cg.loop_source()
    scope = cg.scope
    scope.update(_self=root, _valid=True)
    try:
        exec(_code(src), scope)
    except (SyntaxError, RecursionError, MemoryError) as e:  # pragma: no cover - a safety net
        logger.debug("could not compile the push of %r: %r", root, e)
        return None
    fn: Callable[[Any], Any] = scope["run"]
    fn.__qualname__ = f"{type(root).__name__}.run"
    fn.rivermark_source = src  # type: ignore[attr-defined]
    return fn


def pass_on(cg: Codegen, node: Stream, who: Stream | None, var: str) -> bool:
    """The kernel of a node that passes every record on unchanged (``union``, ``Stream``)."""
    cg.push_down(node, var)
    return True


def compile_update(node: Stream, kernel: Inliner) -> Callable[..., Any]:
    """``update(self, x, who=None, metadata=None)`` for ``node``: ``kernel`` written for it alone.

    The text depends on the node's fixed configuration only (live
    configuration and state are read on ``self`` at every record), so nodes
    configured alike share one compiled code object (:func:`_code`); the
    objects it uses (the error policy's handler, fixed arguments) are the
    function's own globals.  The kernel must write every case out here: it
    may not hand the record to the node's push (that is this function).
    """
    cg = Codegen(node=node)
    done = kernel(cg, node, None, "x")
    if not done:
        raise TypeError(f"the kernel of {type(node).__name__} declined its own node")
    if cg.delegate_to is not None:
        method: Callable[..., Any] = getattr(type(node), cg.delegate_to)
        method.rivermark_derived = True  # type: ignore[attr-defined]
        return method
    src = cg.update_source()
    scope = cg.scope
    exec(_code(src), scope)
    fn: Callable[..., Any] = scope["update"]
    fn.__qualname__ = f"{type(node).__name__}.update"
    fn.rivermark_source = src  # type: ignore[attr-defined]
    fn.rivermark_derived = True  # type: ignore[attr-defined]
    return fn


class derived_update:  # noqa: N801 - used like a decorator-made method
    """A node class's ``update``, written per node from the class's kernel.

    ``update = derived_update(kernel)`` in a class body registers ``kernel``
    for the class (:func:`register_inliner`: how generated graphs write the
    node out) and makes ``node.update`` the same kernel compiled for that
    node alone (:func:`compile_update`), on first use.  The bound function
    is then kept on the node, so later look-ups cost nothing.  A subclass
    that defines its own ``update`` is untouched (``super().update(...)``
    still reaches the derived one).
    """

    def __init__(self, kernel: Inliner) -> None:
        self.kernel = kernel
        self.__doc__ = "Receive ``x`` from upstream ``who``: the class's kernel, compiled per node."

    def __set_name__(self, owner: type, name: str) -> None:
        register_inliner(owner, self.kernel)
        self.slot = f"_derived_update_{owner.__name__}"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        bound = getattr(obj, self.slot, None)
        if bound is None:
            bound = MethodType(compile_update(obj, self.kernel), obj)
            setattr(obj, self.slot, bound)  # for ``super().update`` in a subclass
            if type(obj).update is self:
                obj.update = bound  # found before the class's descriptor from now on
        return bound

    def __call__(self, node: Stream, x: Any, who: Any = None, metadata: Any = None) -> Any:
        """``Class.update(node, x, ...)`` called on the class."""
        return self.__get__(node)(x, who, metadata)
