"""Event-time windows over the rows of streaming DataFrame batches: the node that keeps them.

A :class:`FrameWindow` sits right below a
:class:`~rivermark.dataframe.eventtime.FrameTimestamps` node, which gives
every row of a batch its event time and the watermark that row is judged
against (the watermark moves row by row, exactly as it would if the rows
came one at a time; see :mod:`rivermark.dataframe.eventtime`).  Per batch:

1. every row is placed in its windows with numpy (the window index is the
   floor of ``(time - offset) / step``, exact at window edges); a row whose
   window closed already (``end + grace <= its watermark``; for sessions
   ``time + grace < its watermark``) is *late* for it;
2. the rows that count are grouped by key and window (for the built-in
   aggregations in one numpy pass, :mod:`rivermark.dataframe.windowgroups`;
   for a function with pandas), and each group's partial (counts, sums,
   extremes, or the values themselves for a function) is merged into the
   open window's partial, all of a batch's windows at once;
3. the windows whose ``end + grace`` the batch's watermark reached are
   emitted, as one DataFrame ``start, end, <keys>, <values>`` in the order of
   ``(end, start, key)``;
4. the late rows go to ``.late`` as one DataFrame.

Because lateness is decided per row against the watermark before it, and a
window that closes in the middle of a batch can receive no more rows that
are not late, what is emitted depends on the rows and their order alone,
not on how they are cut into batches.

The open windows are the record windows' store,
:class:`~rivermark.operators.windowstore.OpenWindows` (for fixed windows
its subclass ``BulkWindows``, which closes a window span's windows
together): ``{(key, start):
(end, seq, partial[, last])}`` of plain values (numbers, strings, tuples), so
a checkpoint writes the windows changed since the previous one, and nothing
in it is a pickle.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Any, cast

import numpy as np
import pandas as pd

from rivermark.core.node import Stream
from rivermark.core.refs import Metadata
from rivermark.core.timeutil import NANOS
from rivermark.dataframe.running import ConformingNode, OpName
from rivermark.dataframe.schema import Dtype
from rivermark.dataframe.windowgroups import (
    SEQ,
    BatchGroups,
    KeyCodes,
    Partials,
    built_in_partials,
)
from rivermark.operators.eventtime import LateRecords
from rivermark.operators.timestamps import Results, _merge
from rivermark.operators.windowstore import (
    BulkWindows,
    Closed,
    OpenWindows,
    exact_sign,
    in_close_order,
    slot,
)

logger = logging.getLogger(__name__)

__all__ = ["WindowSpec", "FrameWindow", "BUILT_IN"]

#: the hidden column of a row's window (or session) while grouping
_WINDOW = "__rivermark_window__"
#: the aggregations built in: each keeps a small partial per window
BUILT_IN = ("count", "size", "sum", "mean", "min", "max")


@dataclass(frozen=True)
class WindowSpec:
    """Which windows: ``kind`` (``tumbling_window``, ``hopping_window``, ``session_window``)
    and its seconds (``size``, ``step``, ``offset``; ``gap``), with ``grace``."""

    kind: str
    size: float = 0.0
    step: float = 0.0
    offset: float = 0.0
    gap: float = 0.0
    grace: float = 0.0
    #: ``emit="updates"``: after each batch, the windows it changed (``final`` False)
    updates: bool = False

    @property
    def sessions(self) -> bool:
        return self.kind == "session_window"

    def describe(self) -> str:
        if self.sessions:
            args = f"{self.gap:g}"
        elif self.kind == "hopping_window":
            args = f"{self.size:g}, {self.step:g}"
        else:
            args = f"{self.size:g}"
        return f"{self.kind}({args})"

    def signature(self) -> str:
        return (
            f"{self.kind}(size={self.size}, step={self.step}, offset={self.offset}, "
            f"gap={self.gap}, grace={self.grace})"
        )


def slots(ts: np.ndarray, width: float, offset: float, shift: float = 0.0) -> np.ndarray:
    """``floor((ts - offset - shift) / width)`` per time, exact on the float values.

    The same index as the record windows' (``operators.windowstore.slot``):
    numpy's division decides every time far from a slot boundary, and
    integral times with integral window parameters exactly; the few others
    near a boundary are decided with fractions.
    """
    q = (ts - offset - shift) / width
    k = np.floor(q)
    frac = q - k
    tol = ((np.abs(ts) + abs(offset) + abs(shift)) / width + 1.0) * 1e-14
    unsure = ~((tol < frac) & (frac < 1.0 - tol))
    if unsure.any() and all(float(v).is_integer() for v in (width, offset, shift)):
        # integral times and parameters below 2**52: the float division floors exactly
        unsure &= ~((ts == np.floor(ts)) & (np.abs(ts - offset - shift) < 2.0**52))
    out = k.astype(np.int64)
    for i in np.flatnonzero(unsure):
        out[i] = slot(float(ts[i]), width, offset, shift)
    return out


def _below(a: np.ndarray, b: float, c: np.ndarray) -> np.ndarray:
    """``a + b < c`` per element, exactly (``c`` may hold ``-inf``)."""
    d = a + b - c
    with np.errstate(invalid="ignore"):
        unsure = np.isfinite(c) & (np.abs(d) <= (np.abs(a) + abs(b) + np.abs(c)) * 1e-12)
    out: np.ndarray = d < 0
    for i in np.flatnonzero(unsure):
        out[i] = exact_sign(float(a[i]), b, -float(c[i])) < 0
    return out


class FrameWindow(ConformingNode):
    """Event-time windows over DataFrame rows (built by ``sdf.timestamps(...).tumbling_window(...)``).

    See the module docs.  ``clock`` is the ``FrameTimestamps`` node right
    above; ``by`` the key columns (empty: one window per time span);
    ``columns`` the value columns; ``how`` a name of :data:`BUILT_IN` or a
    function of a ``pandas.Series`` (a window's values of one column).
    """

    _graphviz_shape = "box3d"
    _state_attrs = ("schema",)

    def __init__(
        self,
        clock: Any,
        spec: WindowSpec,
        by: Sequence[Hashable],
        columns: Sequence[Hashable],
        how: str | Callable[[pd.Series], object],
        example: pd.DataFrame,
        outputs: Sequence[Hashable],
        result_example: pd.DataFrame,
        time_dtype: pd.DatetimeTZDtype | None = None,
        op: str = "",
        **kwargs: Any,
    ) -> None:
        self.clock = clock
        self.spec = spec
        self.by = tuple(by)
        self.columns = tuple(columns)
        self.how = how
        self.partials = Partials(how, columns)
        #: the columns the windows read (keys and values)
        self._used = list(dict.fromkeys([*self.by, *self.columns]))
        #: the input's example (the late rows' columns)
        self.input_example = example
        self.example = example[self._used]
        self.outputs = tuple(outputs)
        self.result_example = result_example
        #: the dtype of each output column (read per closing batch)
        self._out_dtypes: dict[Hashable, Dtype] = dict(
            zip(result_example.columns, result_example.dtypes.tolist())
        )
        #: the time column's dtype when it holds datetimes (``start`` and ``end`` take it)
        self.time_dtype = time_dtype
        self.op = OpName(op)
        self.schema = None
        #: the open windows
        self.store = (
            OpenWindows(clock, spec.grace, spec.gap)
            if spec.sessions
            else BulkWindows(clock, spec.grace)
        )
        self._rows = 0
        self._late: LateRecords | None = None
        #: rows that arrived after (one of) their window(s) had closed
        self.late_count = 0
        #: ``emit="updates"``: the windows the batch being placed changed
        self._touched: list[tuple[Any, float]] = []
        Stream.__init__(self, clock, **kwargs)
        clock._windows.append(self)  # noqa: SLF001 - the clock notifies its windows

    @property
    def late(self) -> LateRecords:
        """The stream of the late rows (a DataFrame per batch that had any)."""
        if self._late is None:
            self._late = LateRecords(self, stream_name=f"{self.spec.kind}.late")
        return self._late

    @property
    def open_windows(self) -> int:
        """How many windows (per key) are open now."""
        return len(self.store)

    def update(
        self, x: pd.DataFrame, who: Stream | None = None, metadata: Metadata | None = None
    ) -> Results:
        clock = self.clock
        try:
            times, marks = clock.times, clock.row_watermarks
            if len(times) != len(x):
                raise RuntimeError(
                    f"{self.display_name()}: the batch has {len(x)} rows but its times "
                    f"{len(times)}; put the window right after sdf.timestamps(...)"
                )
            used = self._used_columns(x)
            late = self._add(used, times, marks) if len(x) else None
        except Exception as e:
            self._touched = []
            self._failed(x, e)
            return None
        results = self._updated() if self._touched else None
        results = _merge(results, self.close_until(clock.watermark))
        if late is not None and late.any():
            results = _merge(results, self._pass_late(x[late], metadata, int(late.sum())))
        return results

    def _used_columns(self, x: pd.DataFrame) -> pd.DataFrame:
        """``x`` with the columns the windows read matched to the example: ``x`` itself when
        those columns have the dtypes of earlier batches (the windows read them by label)."""
        schema = self.schema  # a frame's: its columns' dtypes
        if isinstance(schema, pd.Series) and len(x) and x.columns.is_unique:
            have = dict(zip(x.columns, x.dtypes.tolist()))
            if [have.get(c) for c in self._used] == schema.tolist():
                return x
        # only the columns the windows read are matched to the example
        return self._conform(x[self._used]) if len(x) else x

    def _updated(self) -> Results:
        """``emit="updates"``: pass on the windows the batch changed, as they are now."""
        touched, self._touched = self._touched, []
        open_ = self.store.open
        now = []
        for k, start in dict.fromkeys(touched):
            cur = open_.get((k, start))
            if cur is not None:  # not merged into another session meanwhile
                now.append((cur[0], start, cur[1], k, cur[2]))
        frame = self._results(now, final=False)
        return None if frame is None else self._emit(frame, None)

    def _pass_late(self, rows: pd.DataFrame, metadata: Metadata | None, n: int) -> Results:
        self.late_count += n
        if self._late is not None:
            return self._late.pass_late(rows, metadata)
        if self.late_count == n:
            logger.warning(
                "%s: %d row(s) arrived after their window closed; such rows are counted in "
                "late_count; sink %s.late to keep them",
                self.display_name(),
                n,
                self.spec.kind,
            )
        return None

    # ------------------------------------------------------------------ rows in
    def _add(self, x: pd.DataFrame, times: np.ndarray, marks: np.ndarray) -> np.ndarray:
        """Put the rows of ``x`` in their windows; return which rows were late."""
        n = len(x)
        seqs = np.arange(self._rows, self._rows + n, dtype=np.int64)
        self._rows += n
        if self.spec.sessions:
            return self._add_sessions(x, times, marks, seqs)
        return self._add_fixed(x, times, marks, seqs)

    def _frame(self, x: pd.DataFrame, seqs: np.ndarray, take: np.ndarray | None) -> pd.DataFrame:
        """The key and value columns of ``x`` (rows ``take``) with their arrival numbers."""
        data = {c: x[c].to_numpy() if take is None else x[c].to_numpy()[take] for c in self._used}
        data[SEQ] = seqs if take is None else seqs[take]
        return pd.DataFrame(data, copy=False)

    def _grouped(self, rows: pd.DataFrame, by: list[Hashable]) -> tuple[pd.Index, list[Any]]:
        """The group labels of ``rows`` by ``by`` and each group's partial."""
        grouped = rows.groupby(by, sort=True, observed=True, dropna=True)
        labels = grouped.size().index
        codes = _codes(grouped) if callable(self.how) else np.empty(0, np.int64)
        return labels, self.partials.of_groups(grouped, codes, rows)

    def _keys(self, labels: pd.Index) -> list[Hashable]:
        """The key of each group label of ``(*by, window)`` (None without ``by``)."""
        if not self.by:
            return [None] * len(labels)
        if len(self.by) == 1:
            return list(labels.get_level_values(0).tolist())
        return list(zip(*(labels.get_level_values(i).tolist() for i in range(len(self.by)))))

    def _add_fixed(
        self, x: pd.DataFrame, times: np.ndarray, marks: np.ndarray, seqs: np.ndarray
    ) -> np.ndarray:
        spec = self.spec
        size, step, offset, grace = spec.size, spec.step, spec.offset, spec.grace
        last = slots(times, step, offset)
        if step == size:
            rep, j = None, last
        else:
            first = slots(times, step, offset, size) + 1
            counts = last - first + 1
            rep = np.repeat(np.arange(len(times)), counts)
            within = np.arange(len(rep)) - np.repeat(np.cumsum(counts) - counts, counts)
            j = np.repeat(last, counts) - within  # each row's windows, latest first
        starts = offset + j * step
        pair_late = starts + size + grace <= (marks if rep is None else marks[rep])
        if rep is None:
            late, take = pair_late, np.flatnonzero(~pair_late)
        else:
            late = np.zeros(len(times), dtype=bool)
            late[rep[pair_late]] = True
            take = rep[~pair_late]
        if not len(take):
            return late
        windows = j[~pair_late]
        how = self.how
        if isinstance(how, str):  # a built-in: grouped with numpy (windowgroups)
            codes = KeyCodes.of([x[b].to_numpy() for b in self.by])
            groups = BatchGroups.of(codes, windows, take)
            if groups is not None:
                values = [x[c].to_numpy() for c in self.columns]
                parts = built_in_partials(how, groups, values, take)
                self._merge_fixed(groups.keys, groups.windows, parts)
                return late
        rows = self._frame(x, seqs, take)
        rows[_WINDOW] = windows
        labels, parts = self._grouped(rows, [*self.by, _WINDOW])
        self._merge_fixed(self._keys(labels), labels.get_level_values(-1).to_numpy(), parts)
        return late

    def _merge_fixed(self, keys: list[Any], windows: np.ndarray, parts: list[Any]) -> None:
        """Merge each group's partial into its window ``(key, window)``, the groups in the
        order of ``(key, window)``: windows not open yet open in that order.  Those of
        a span (a start) with no open window yet are opened without a lookup each.
        """
        spec = self.spec
        store = cast("BulkWindows", self.store)  # fixed windows' (see __init__)
        # the same floats as offset + w * step and start + size per window (int64 to
        # float64 is exact here)
        starts = spec.offset + windows.astype(np.float64) * spec.step
        ends = starts + spec.size
        ids = list(zip(keys, starts.tolist()))
        if spec.updates:
            self._touched.extend(ids)
        fresh = self._fresh(windows, starts, ends, store)
        known = ids if fresh is None else list(compress(ids, (~fresh).tolist()))
        curs = store.lookup(known)
        combine_all = self.partials.combine_all
        if fresh is None and None not in curs:
            store.update_fixed(ids, curs, combine_all(list(map(_acc_of, curs)), parts))
            return
        is_new = np.fromiter(map(operator.is_, curs, repeat(None)), dtype=bool, count=len(curs))
        if fresh is None:
            new = is_new
        else:
            new = fresh.copy()
            new[~fresh] = is_new
        if not is_new.all():
            olds = list(compress(curs, (~is_new).tolist()))
            old = (~new).tolist()
            accs = combine_all(list(map(_acc_of, olds)), list(compress(parts, old)))
            store.update_fixed(list(compress(ids, old)), olds, accs)
        if new.all():
            store.open_fixed(ids, ends.tolist(), parts)
            return
        mask = new.tolist()
        store.open_fixed(
            list(compress(ids, mask)),
            list(compress(ends.tolist(), mask)),
            list(compress(parts, mask)),
        )

    @staticmethod
    def _fresh(
        windows: np.ndarray, starts: np.ndarray, ends: np.ndarray, store: BulkWindows
    ) -> np.ndarray | None:
        """Which groups are in a window span with no open window (None: none is)."""
        present, first = np.unique(windows, return_index=True)
        spans = zip(ends[first].tolist(), starts[first].tolist())
        fresh = [w for w, span in zip(present.tolist(), spans) if span not in store.buckets]
        return np.isin(windows, fresh) if fresh else None

    def _add_sessions(
        self, x: pd.DataFrame, times: np.ndarray, marks: np.ndarray, seqs: np.ndarray
    ) -> np.ndarray:
        gap = self.spec.gap
        late = _below(times, self.spec.grace, marks)
        take = np.flatnonzero(~late)
        if not len(take):
            return late
        rows = self._frame(x, seqs, take)
        t = times[take]
        if self.by:
            keyed = rows.groupby(list(self.by), sort=True, observed=True, dropna=True)
            codes = _codes(keyed)
            keys = keyed.size().index.tolist()
            if len(self.by) > 1:
                keys = [tuple(k) for k in keys]
        else:
            codes, keys = np.zeros(len(t), dtype=np.int64), [None]
        has_key = codes >= 0
        if not has_key.all():  # rows whose key is missing are in no window
            rows, t, codes = rows[has_key].copy(), t[has_key], codes[has_key]
        store = self.store
        old = [(c, s) for c, k in enumerate(keys) for s in store.session_starts(k)]
        old_last = [store.open[(keys[c], s)][3] for c, s in old]
        item_code = np.concatenate([codes, np.array([c for c, _ in old], dtype=np.int64)])
        item_start = np.concatenate([t, np.array([s for _, s in old], dtype=float)])
        item_last = np.concatenate([t, np.array(old_last, dtype=float)])
        order = np.lexsort((item_start, item_code))
        sc, ss, sl = item_code[order], item_start[order], item_last[order]
        reach = pd.Series(sl).groupby(sc).cummax().to_numpy()  # the largest last so far, per key
        new = np.ones(len(order), dtype=bool)
        if len(order) > 1:
            same = sc[1:] == sc[:-1]
            joined = _below(ss[1:], -gap, reach[:-1])  # start - gap < reach: within gap
            new[1:] = ~(same & joined)
        seg = np.cumsum(new) - 1
        seg_of = np.empty(len(order), dtype=np.int64)
        seg_of[order] = seg
        seg_start = ss[new]
        seg_last = np.maximum.reduceat(sl, np.flatnonzero(new))
        seg_key = sc[new]
        rows[_WINDOW] = seg_of[: len(t)]
        index, parts = self._grouped(rows, [_WINDOW])
        labels = index.tolist()
        olds: dict[int, list[tuple[float, Any]]] = {}
        for i, (c, s) in enumerate(old):
            olds.setdefault(int(seg_of[len(t) + i]), []).append((s, c))
        for label, part in zip(labels, parts):
            self._merge_session(
                keys[seg_key[label]], seg_start[label], seg_last[label], part, olds.get(label, [])
            )
        return late

    def _merge_session(
        self, k: Any, start: float, last: float, part: Any, olds: list[tuple[float, Any]]
    ) -> None:
        store, combine = self.store, self.partials.combine
        acc = part
        for s, _ in sorted(olds, key=lambda o: o[0]):
            acc = combine(store.open[(k, s)][2], acc)
        start, last = float(start), float(last)
        merged = [s for s, _ in olds] if olds else ()
        store.join_sessions(k, merged, start, last + self.spec.gap, acc, last)
        if self.spec.updates:
            self._touched.append((k, start))

    # ------------------------------------------------------------------ windows out
    def next_due(self) -> float:
        """The watermark at which this node's next window may close (+inf: none open)."""
        return self.store.next_due()

    def close_until(self, watermark: float) -> Results:
        """Emit every window whose end plus grace is at or below ``watermark``, as one DataFrame."""
        closed = self.store.pop_due(watermark)
        if not closed:
            return None
        frame = self._results(closed, ordered=True)
        return None if frame is None else self._emit(frame, None)

    def _results(
        self, closed: list[Closed], final: bool = True, ordered: bool = False
    ) -> pd.DataFrame | None:
        """The frame of the windows ``closed`` (``ordered``: in close order already)."""
        if not ordered:
            in_close_order(closed)
        how = self.how
        if how == "size":
            return self._frame_of(closed, [list(map(_acc, closed))], final)
        if isinstance(how, str) and how != "mean":  # the partial is the result
            accs = list(map(_acc, closed))
            columns = [list(map(operator.itemgetter(i), accs)) for i in range(len(self.outputs))]
            return self._frame_of(closed, columns, final)
        values: list[tuple[Any, ...]] = []
        kept = []
        for c in closed:
            try:
                values.append(self.partials.result(c[4]))
            except Exception as e:
                what = (
                    f"window [{c[1]}, {c[0]}) of key {c[3]!r}" if self.by else f"[{c[1]}, {c[0]})"
                )
                self._user_error(what, e, how)
                continue
            kept.append(c)
        if not kept:
            return None
        return self._frame_of(kept, list(zip(*values)), final)

    def _frame_of(
        self,
        kept: list[Closed],
        columns: Sequence[Sequence[Any]],
        final: bool,
    ) -> pd.DataFrame:
        """The frame of windows ``kept``, ``columns`` the values of each output column."""
        ex, dtypes = self.result_example, self._out_dtypes
        data: dict[Any, Any] = {}
        n = len(kept)
        for name, i in (("start", 1), ("end", 0)):
            col = np.fromiter(map(operator.itemgetter(i), kept), dtype=float, count=n)
            dtype = self.time_dtype
            data[name] = col if dtype is None else _as_datetimes(col, dtype)
        keys = list(map(_window_key, kept))
        if len(self.by) == 1:
            data[self.by[0]] = _typed(keys, dtypes[self.by[0]])
        elif self.by:
            for i, b in enumerate(self.by):
                data[b] = _typed([k[i] for k in keys], dtypes[b])
        for label, values in zip(self.outputs, columns):
            column = list(values)
            # a function's results take the dtype pandas infers for them
            data[label] = column if callable(self.how) else _typed(column, dtypes[label])
        if self.spec.updates:
            data["final"] = np.full(n, final)
        # built under positions, then labelled with the example's own columns (pandas
        # infers no Index from the labels of every batch)
        frame = pd.DataFrame(dict(enumerate(data[c] for c in ex.columns)), copy=False)
        return frame.set_axis(ex.columns, axis=1)

    # ------------------------------------------------------------------ state
    def records_held(self) -> int | None:
        return len(self.store)

    def get_state(self) -> dict[str, object]:
        # the live container: the checkpoint takes its changed windows at the barrier
        return {**self.store.get_state(), "rows": self._rows, "schema": self.schema}

    def set_state(self, state: Any) -> None:
        self.store.set_state(state)
        self._rows = int(state["rows"])
        self.schema = state.get("schema")

    def state_signature(self) -> str:
        # optional: a callable object has no __qualname__
        how = self.how if isinstance(self.how, str) else getattr(self.how, "__qualname__", "func")
        return (
            f"FrameWindow({self.spec.signature()}, by={list(self.by)!r}, "
            f"columns={list(self.columns)!r}, how={how})"
        )


#: a closed window's partial and key (``Closed``)
_acc = operator.itemgetter(4)
#: an open window's partial (``(end, seq, acc)``)
_acc_of = operator.itemgetter(2)
_window_key = operator.itemgetter(3)


def _codes(grouped: pd.api.typing.DataFrameGroupBy) -> np.ndarray:
    """Each row's group number (-1 for a row whose key is missing)."""
    return np.asarray(grouped.ngroup().fillna(-1).to_numpy(), dtype=np.int64)


def _typed(
    values: list[object], dtype: Dtype
) -> pd.api.extensions.ExtensionArray | np.ndarray | list[object]:
    """``values`` as an array of ``dtype`` where they fit it (else as pandas infers)."""
    if isinstance(dtype, np.dtype) and dtype.kind in "iufb":
        inferred = np.array(values)
        if inferred.ndim == 1 and inferred.dtype == dtype:  # numpy reads them as that dtype
            return inferred
    try:
        return pd.array(values, dtype=dtype)
    except (TypeError, ValueError):
        return values


def _as_datetimes(seconds: np.ndarray, dtype: pd.DatetimeTZDtype) -> pd.DatetimeIndex:
    """Epoch seconds as datetimes of the time column's ``dtype`` (its timezone and unit)."""
    # by integer arithmetic (the float seconds to the nearest nanosecond), not pandas' float
    # product, which puts a window's edge a microsecond off
    whole = np.floor(seconds)
    nanos = whole.astype(np.int64) * NANOS + np.round((seconds - whole) * NANOS).astype(np.int64)
    stamps = pd.DatetimeIndex(nanos.astype("datetime64[ns]")).tz_localize("UTC")
    return stamps.tz_convert(dtype.tz).as_unit(dtype.unit)
