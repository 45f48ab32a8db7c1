"""Exceptions raised by rivermark.

Every error derives from :class:`RivermarkError`, so ``except RivermarkError``
catches anything the library raises on purpose.  Messages say what happened,
quote the offending value, name the node, and say what to do.
"""

from __future__ import annotations

__all__ = [
    "RivermarkError",
    "ConfigurationError",
    "UserFunctionError",
    "GraphError",
    "NodeFailedError",
    "ChangedFileError",
    "FileInUseError",
]


class RivermarkError(Exception):
    """Root of every exception raised by rivermark.

    ``exit_code`` is the status the ``rivermark`` command exits with when the
    error ends it: 2 for usage and configuration errors (the default), 1 for
    failures of a running job.
    """

    exit_code: int = 2


class ConfigurationError(RivermarkError, ValueError):
    """A node, source, sink or job was constructed with invalid arguments."""


class GraphError(RivermarkError):
    """The stream graph is not in a shape that the requested action allows."""


class UserFunctionError(RivermarkError):
    """A user function raised while processing a record.

    ``node`` is the node whose function raised, ``record`` the input it was
    given; the original exception is chained as ``__cause__``.
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
