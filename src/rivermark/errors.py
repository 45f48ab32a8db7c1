"""Exceptions raised by rivermark.

Every error derives from :class:`RivermarkError`, so ``except RivermarkError``
catches anything the library raises on purpose.  Messages say what happened,
quote the offending value, name the node, and say what to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "RivermarkError",
    "ConfigurationError",
    "UserFunctionError",
    "GraphError",
    "NodeFailedError",
    "ChangedFileError",
    "FileInUseError",
    "InputDecodeError",
    "StateStoreError",
    "ErrorContext",
    "add_context",
    "context_of",
    "describe",
    "exit_code_of",
]


def first_line(e: BaseException) -> str:
    """The first line of an exception's text (its type's name when it has none).

    >>> first_line(OSError("disk full\\nmore"))
    'disk full'
    >>> first_line(KeyError())
    'KeyError'
    """
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


class RivermarkError(Exception):
    """Root of every exception raised by rivermark.

    ``exit_code`` is the status the ``rivermark`` command exits with when the
    error ends it: 2 for usage and configuration errors (the default), 1 for
    failures of a running job.
    """

    exit_code: int = 2
    #: the exit status of a job this error ends, whichever error of the job
    #: wraps it (e.g. "the broker was unreachable" is 2 wherever it is noticed)
    job_exit_code: int | None = None


def exit_code_of(error: RivermarkError) -> int:
    """The ``rivermark`` command's exit status for ``error``.

    The first error in its chain of causes that declares a ``job_exit_code``
    decides; else ``error.exit_code``.

    >>> class Down(RivermarkError):
    ...     job_exit_code = 2
    >>> wrapper = RivermarkError("the job failed"); wrapper.exit_code = 1
    >>> wrapper.__cause__ = Down("the broker was unreachable")
    >>> exit_code_of(wrapper), exit_code_of(RivermarkError("bad option"))
    (2, 2)
    """
    seen: set[int] = set()
    cur: BaseException | None = error
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        # optional: any exception in the chain; only rivermark's own carry an exit code
        code = getattr(cur, "job_exit_code", None)
        if isinstance(code, int):
            return code
        cur = cur.__cause__ or cur.__context__
    return error.exit_code


class ConfigurationError(RivermarkError, ValueError):
    """A node, source, sink or job was constructed with invalid arguments."""


class GraphError(RivermarkError):
    """The stream graph is not in a shape that the requested action allows."""


class UserFunctionError(RivermarkError):
    """Not raised for a user function's exception any more; kept for ``except`` clauses.

    A user function's own exception propagates out of ``emit`` with its own
    type, as in streamz, carrying an :class:`ErrorContext` (see
    :func:`add_context`).  The class stays importable so that code written
    against earlier versions still imports.
    """

    def __init__(self, message: str, node: object, record: object) -> None:
        super().__init__(message)
        self.node = node
        self.record = record


class NodeFailedError(RivermarkError):
    """A node failed for good earlier and takes no more records.

    Raised by a node whose background work (a delayed or buffered emit, an
    asynchronous call, a timed flush) hit an error that no caller could
    catch; that error is chained as ``__cause__`` and kept on the node as
    ``node.failure``.
    """


class ChangedFileError(ConfigurationError):
    """A file that a checkpoint refers to is not the one it recorded.

    A source's input that is shorter than the checkpointed position or whose
    bytes before it differ (truncated, replaced), or a sink's output that is
    another file than the one the checkpoint's handle belongs to.  Resuming
    would skip input or truncate an unrelated file, so it is refused.
    """


class FileInUseError(ConfigurationError):
    """Another job (or another sink of this job) holds the lock of an output file."""


class StateStoreError(RivermarkError):
    """A node's state store failed (the disk of RocksDB state is full, a write failed).

    The store failed, not the record: no error policy (``on_error``) drops
    it; the job stops and the last complete checkpoint stays intact.
    """

    exit_code = 1


class InputDecodeError(RivermarkError, ValueError):
    """A source read bytes that its encoding cannot decode (the message names the byte offset)."""


@dataclass(frozen=True)
class ErrorContext:
    """Where a user function's exception happened: set as ``exc.rivermark_context``.

    ``node`` is the node's display name, ``function`` the function's name,
    ``record`` the input it was given, ``origin`` where that input came from
    when its source knows (e.g. a Kafka topic, partition and offset), and
    ``stream`` the node itself (not part of equality or repr).
    """

    node: str
    function: str
    record: Any
    origin: str | None = None
    stream: Any = field(default=None, compare=False, repr=False)

    def record_text(self) -> str:
        """The record's repr, cut at 200 characters, with its origin if known."""
        rec = repr(self.record)
        if len(rec) > 200:
            rec = rec[:200] + "..."
        return f"{rec} (input {self.origin})" if self.origin else rec

    def message(self) -> str:
        rec = self.record_text()
        return (
            f"{self.node}: user function {self.function!r} raised on record {rec}. Fix the "
            "function or the input, or set on_error='skip' (drop and count) or "
            "on_error=callable(record, exc) (e.g. send to a dead-letter sink) on this node "
            "or its source."
        )


def add_context(exc: BaseException, context: ErrorContext) -> None:
    """Attach ``context`` to ``exc``, which is then raised with its own type.

    Sets ``exc.rivermark_context`` and, on Python 3.11+, adds the context's
    message as a PEP 678 note (shown under the traceback).  The first context
    wins: an exception passing through several nodes names the one whose
    function raised it.

    >>> e = ZeroDivisionError("division by zero")
    >>> add_context(e, ErrorContext("Map('m')", "f", 0))
    >>> e.rivermark_context.node
    "Map('m')"
    """
    if context_of(exc) is not None:
        return
    try:
        exc.rivermark_context = context  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # an exception type that takes no attributes
        return
    # optional: BaseException.add_note exists from Python 3.11
    add_note = getattr(exc, "add_note", None)
    if add_note is not None:
        add_note(context.message())


def context_of(exc: BaseException) -> ErrorContext | None:
    """The node, function and record :func:`add_context` attached to ``exc`` (None: none).

    >>> e = KeyError("k")
    >>> context_of(e) is None
    True
    >>> add_context(e, ErrorContext("Map('m')", "f", 1)); context_of(e).function
    'f'
    """
    # optional: set only on exceptions raised inside a node
    ctx = getattr(exc, "rivermark_context", None)
    return ctx if isinstance(ctx, ErrorContext) else None


def describe(exc: BaseException) -> str:
    """``"Type: message"`` of ``exc``, plus the node, function and record if it has them.

    >>> e = ValueError("boom")
    >>> describe(e)
    'ValueError: boom'
    >>> add_context(e, ErrorContext("Map('m')", "f", 5))
    >>> describe(e)
    "ValueError: boom, in Map('m'): user function 'f' on record 5"
    """
    text = f"{type(exc).__name__}: {exc}"
    ctx = context_of(exc)
    if ctx is not None:
        text += f", in {ctx.node}: user function {ctx.function!r} on record {ctx.record_text()}"
    return text
