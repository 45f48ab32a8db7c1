"""What ``to_parquet`` and ``to_delta`` share as sinks: the sink id, its location and lease.

:class:`LakeSink` holds the parts both file sinks write the same way: the
sink id and the home of its own files (``_rivermark/<digest>``), the
location opened once with the sink's lease (one job at a time per sink id),
the error that stops the job when the location fails, the writer thread
(:mod:`rivermark.lake.worker`), the checks of a record's and a batch's
columns against the schema, and the release of the lease at ``close``.
Each sink keeps its own protocol (files, commits, restore).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from rivermark.checkpoint.stores.lease import Lease
from rivermark.errors import ConfigurationError
from rivermark.lake.files import LakeSinkError, Location, RecordSchemaError, schema_of
from rivermark.lake.worker import BackgroundWriter
from rivermark.sinks.base import sink_digest
from rivermark.sinks.basic import Sink
from rivermark.sinks.sqlstores import first_line

logger = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["LakeSink", "check_url"]


#: the schemes of a URL a file sink writes to (the stores its lease can be held in)
_SCHEMES = ("file", "s3", "s3a")


def check_url(api: str, url: object) -> None:
    """Refuse a ``url`` that is not a non-empty string, naming the sink (``to_parquet``).

    A URL of another scheme than ``file://`` or ``s3://``, or a path that
    starts with what looks like a mistyped scheme (``s3:/bucket``), is
    refused too, the URL shown without credentials.

    >>> check_url("to_parquet", "s3:/bucket/x")
    Traceback (most recent call last):
    ...
    rivermark.errors.ConfigurationError: to_parquet: url 's3:/bucket/x' starts with 's3:', a mistyped scheme: write s3://... (two slashes), or ./s3:/bucket/x for a local directory of that name
    """
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"{api}: url must be a non-empty string, got {url!r}")
    m = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):(//)?", url)
    if m is None:
        return
    scheme = m.group(1)
    if m.group(2) is None:
        if len(scheme) > 1 and re.match(r"[^/]*:(/|\Z)", url):  # not a drive letter (C:/...)
            raise ConfigurationError(
                f"{api}: url {_shown(url)!r} starts with {scheme + ':'!r}, a mistyped scheme: "
                f"write {scheme}://... (two slashes), or ./{_shown(url)} for a local directory "
                "of that name"
            )
    elif scheme not in _SCHEMES:
        raise ConfigurationError(
            f"{api}: cannot write to {_shown(url)!r}: a file sink writes to a local directory, "
            "file://... or s3://bucket/prefix (where it can hold its lock), not to "
            f"{scheme}://; write to one of those"
        )


def _shown(url: str) -> str:
    """``url`` without the user, password and query it may hold."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host.rsplit('@', 1)[-1]}{slash}{path.split('?', 1)[0]}"


class LakeSink(Sink):
    """The base of the file sinks: a subclass sets ``api`` and fills the protocol."""

    #: the method that builds the sink (``to_parquet``), in its label and messages
    api: ClassVar[str]
    #: what a record that does not fit misses, in messages (``"the schema"``)
    schema_words: ClassVar[str] = "the schema"
    _graphviz_shape: ClassVar[str] = "trapezium"
    #: records after pre_commit(e) are buffered for the next epoch
    seals_epoch_at_pre_commit: ClassVar[bool] = True

    url: str
    #: seconds the sink waits for an answer of the object store (see rivermark.lake.worker)
    timeout: float
    _schema: Any

    def _init_files(self, url: str, sink_id: str | None, schema: object, example: object) -> None:
        """After ``Sink.__init__``: the sink id, its files' home, the schema if given, no lease."""
        self.sink_id = sink_id or self.name or url
        self.digest = sink_digest(self.sink_id)
        self.home = f"_rivermark/{self.digest}"
        self._schema = None
        self._names: frozenset[str] = frozenset()
        if schema is not None or example is not None:
            self._set_schema(schema_of(schema if schema is not None else example, self.label()))
        self._loc: Location | None = None
        self._lease: Lease | None = None
        self._closed = False
        #: converts and writes full buffers off the loop thread (see rivermark.lake.worker)
        self._bg = BackgroundWriter(self.label())

    def label(self) -> str:
        return f"{self.api} sink {self.sink_id!r}"

    def _set_schema(self, schema: Any) -> None:
        raise NotImplementedError

    def _settle(self) -> None:
        raise NotImplementedError

    def _misfit(self, what: str, e: BaseException) -> RecordSchemaError:
        return RecordSchemaError(
            f"{self.label()}: {what} does not fit {self.schema_words} ({type(e).__name__}: "
            f"{first_line(e)}); fix the input, pass schema= with the right types, or set "
            "on_error='skip' or on_error=callable on this node"
        )

    def _record_misfit(
        self, r: Mapping[str, Any], schema: Any, e: BaseException
    ) -> RecordSchemaError:
        """The error of a record that does not fit ``schema``, naming the column that does not."""
        import pyarrow as pa

        for field in schema:
            value = r.get(field.name)
            try:
                pa.array([value], type=field.type)
            except (pa.ArrowException, ValueError, TypeError, OverflowError) as ce:
                if pa.types.is_null(field.type):
                    return RecordSchemaError(
                        f"{self.label()}: record does not fit {self.schema_words} (column "
                        f"{field.name!r} has type null, derived from a record where it was None, "
                        f"and cannot take {value!r:.100}); pass example= or schema= that gives "
                        "it a type (a column is nullable unless declared otherwise), or set "
                        "on_error='skip' or on_error=callable on this node"
                    )
                return RecordSchemaError(
                    f"{self.label()}: record does not fit {self.schema_words} (column "
                    f"{field.name!r} of type {field.type} cannot take {value!r:.100}: "
                    f"{type(ce).__name__}: {first_line(ce)}); fix the input, pass schema= with "
                    "the right types, or set on_error='skip' or on_error=callable on this node"
                )
        return self._misfit("record", e)

    def _location_options(self) -> Mapping[str, object]:
        """The fsspec options of the sink's location."""
        raise NotImplementedError

    # ---------------------------------------------------------------- location and lock
    def _location(self) -> Location:
        if self._loc is None:
            if self._closed:
                raise ConfigurationError(f"{self.label()}: used after close()")
            loc = Location(self.url, self._location_options(), self.label(), self.timeout)
            # object storage: every call waits at most the timeout (rivermark.lake.worker)
            self._bg.deadline = None if loc.local else self.timeout
            try:
                self._lease = self._bg.call(lambda: loc.lease(f"{self.home}/LEASE"))
            except LakeSinkError:
                raise
            except Exception as e:
                raise self._failed(loc, "taking the sink's lock", e) from None
            self._loc = loc
        return self._loc

    def _failed(self, loc: Location, what: str, e: BaseException) -> LakeSinkError:
        return loc.failed(what, e)

    def _io(self, loc: Location, what: str, fn: Callable[[], T]) -> T:
        """``fn()``, on the writer thread within the timeout on object storage; errors in one line."""
        try:
            return self._bg.call(fn)
        except LakeSinkError:
            raise
        except Exception as e:
            raise self._failed(loc, what, e) from None

    def _shut(self, files: Sequence[Any]) -> None:
        """Close ``files`` (left unpublished) and release the lease, then forget the location.

        On the writer thread once its work is done; when the store is known to
        be down, on a thread nobody waits for (see rivermark.lake.worker).
        """
        lease, self._lease = self._lease, None

        def cleanup() -> None:
            for f in files:
                try:
                    f.handle.close()
                except Exception:  # an upload that cannot complete: the file stays unpublished
                    logger.debug("%s: close failed", self.label(), exc_info=True)
            if lease is not None:
                lease.release()

        self._bg.close(cleanup, down=self._loc is not None and self._loc.down)
        self._loc = None

    # ---------------------------------------------------------------- records
    def _record_fits(self, x: Mapping[str, object]) -> bool:
        """Whether the record's columns are the schema's (derived from it if none yet).

        A record with other columns goes through the node's error policy.
        """
        if self._schema is None:
            self._set_schema(schema_of(x, self.label()))
        if not x.keys() <= self._names:
            extra = [c for c in x if c not in self._names]
            self._user_error(x, RecordSchemaError(
                f"{self.label()}: record has column(s) {extra!r} that the schema does not "
                f"have (its columns: {self._schema.names!r}); pass schema= with them"
            ), self.update)  # fmt: skip
            return False
        return True

    def _frame_fits(self, df: Any) -> bool:
        """Whether a DataFrame's columns are in the schema (else it goes through the policy)."""
        extra = [c for c in df.columns if c not in self._names]
        if extra:
            e = ValueError(f"column(s) {extra!r} are not in the schema")
            self._user_error(df, self._misfit("DataFrame batch", e), self.update)
            return False
        return True

    def _not_a_record(self, x: object) -> ConfigurationError:
        return ConfigurationError(
            f"{self.label()}: received {x!r:.200}; {self.api} writes dicts (column -> value) "
            "or DataFrames: add a .map(...) that builds one"
        )

    def _rows_that_fit(
        self, rows: Sequence[Mapping[str, Any]], schema: Any
    ) -> list[Mapping[str, Any]]:
        """The rows that fit ``schema``; the others go through the error policy, one by one."""
        import pyarrow as pa

        good = []
        for r in rows:
            try:
                pa.Table.from_pylist([r], schema=schema)
            except (pa.ArrowException, ValueError, TypeError, OverflowError) as e:
                self._user_error(r, self._record_misfit(r, schema, e), self.update)
                continue
            good.append(r)
        return good

    def _submit(self, write: Callable[[], None]) -> None:
        """Run ``write`` on the writer thread once the write in flight is settled."""
        self._settle()
        self._bg.submit(write)

    # ---------------------------------------------------------------- checkpoint contract
    def _handle_epoch(self, handle: Any, kind: str) -> int:
        """The epoch of a checkpoint's handle (-1 without one), refused if another sink id's."""
        if handle is None:
            return -1
        if handle.get("sink") != self.sink_id:
            raise LakeSinkError(
                f"{self.label()}: the checkpoint's {kind} sink wrote as sink id "
                f"{handle.get('sink')!r}; write there again, or use a new checkpoint directory"
            )
        return int(handle["epoch"])
