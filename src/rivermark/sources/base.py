"""The source contract: how a source emits, pauses at a barrier, and resumes.

A source is a node without upstreams that produces records on the event loop.
Subclasses implement :meth:`Source.run` (an ``async`` loop) and pass their
records through :meth:`Source._emit_chunk` (a list of records at a time, the
fast path) or :meth:`Source._emit_record` (one record).  Both

* wait while a checkpoint barrier holds the source paused,
* emit the records and await all asynchronous work downstream
  (backpressure), and only then
* move the source's position past the records.

``_emit_chunk`` runs the graph's synchronous push (the generated function
of :meth:`Stream.record_loop`) over the records and gives the
event loop a turn every :data:`TIME_SLICE` seconds, so that a barrier or a
stop waits for at most about one record's processing time, however large
the chunk (liveness).  A barrier can only run while the source is not
inside that loop (it runs on the same event loop), so it sees the position
moved past exactly the records that were fully processed.

Position: ``position()`` always names the *next* record the source would
emit (for a file, the byte offset just after the last emitted record; for an
iterable, the index of the next item; for Kafka, the next offset per
partition).  A checkpoint stores it while the source is paused and no emit is
in progress, so every record before the position has been emitted and every
record at or after it has not.  ``seek(position)`` makes the next run resume
there.  Sources that cannot replay (``replayable = False``) are reported by
the job as at-most-once.

``Source`` is generic in its position's type: ``from_iterable`` is a
``Source[int]`` (an index), ``from_textfile`` a ``Source[int | FilePosition]``,
``filenames`` a ``Source[list[str]]``, a Kafka source a
``Source[dict[str, Any]]`` (offsets by partition, with the topics' ids).
A bare ``Source`` has a position of any type.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from itertools import islice
from operator import length_hint
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Unpack, cast

from rivermark.core import runtime
from rivermark.core.node import NodeOptions, Stream
from rivermark.core.refs import Metadata
from rivermark.errors import ConfigurationError

if TYPE_CHECKING:
    # a bare Source has a position of any type, as before the contract had one
    # (a default of a type variable: typing has it from Python 3.13)
    from typing_extensions import TypeVar

    P = TypeVar("P", default=Any)
else:
    from typing import TypeVar

    P = TypeVar("P")

logger = logging.getLogger(__name__)

__all__ = ["Source", "RecordBudget", "TIME_SLICE"]

#: a source gives the event loop a turn after running records for this long (seconds)
TIME_SLICE = 0.005
#: records run between two looks at the clock: adapted so that a run takes about this long
_STEP_TARGET = TIME_SLICE / 5
_MAX_STEP = 4096


class RecordBudget:
    """How many more records the sources may emit before a record-count checkpoint.

    A job with ``every_batches`` shares one budget among its sources.  A source
    spends it record by record, inside its chunks: the source that spends the
    last record pauses itself right after it (so the checkpoint's position
    falls exactly there, however large the chunk) and calls ``spent()`` to
    wake the job.  The job refills it at every checkpoint.
    """

    def __init__(self, size: int, spent: Callable[[], None]) -> None:
        self.size = size
        self.left = size
        self.spent = spent

    def refill(self) -> None:
        self.left = self.size


class Source(Stream, Generic[P]):
    """Base class of every source node; ``P`` is the type of its position.

    ``start()`` schedules :meth:`run` on the node's event loop and returns at
    once; ``stop()`` asks it to end, cancels it if it is waiting, and releases
    its resources (:meth:`close`).  ``finished`` becomes true when the source
    is exhausted or stopped.
    """

    derived_out = True

    _is_async: bool = True
    _graphviz_shape: ClassVar[str] = "doubleoctagon"
    #: whether ``seek`` can replay records after a restart
    replayable: ClassVar[bool] = False

    def __init__(self, start: bool = False, **kwargs: Unpack[NodeOptions]) -> None:
        super().__init__(**kwargs)
        self.stopped = True
        self.started = False
        self.finished = False
        self._task: asyncio.Task[None] | None = None
        self._pause_requested = False
        self._resume: asyncio.Event | None = None
        self._emitting = False
        # where the source is, as the subclass counts (an index, a byte offset): what
        # position() returns unless the subclass builds its position from it
        self._position: Any = None
        self._done_event: asyncio.Event | None = None
        #: records emitted so far (read by the metrics)
        self.emitted = 0
        #: shared with the other sources of a job with ``every_batches``
        self.budget: RecordBudget | None = None
        self._finished_callbacks: list[Callable[[], None]] = []
        if start:
            self.start()

    # ---------------------------------------------------------------- contract
    async def run(self) -> None:
        """Produce records until exhausted or ``self.stopped``; override.

        As in streamz, a subclass may implement ``async def _run(self)``
        instead: one step of work, awaited again and again until ``stopped``
        is set (by :meth:`stop`, or by ``_run`` itself when it is done).
        """
        if type(self)._run is Source._run:
            raise NotImplementedError(
                f"{self.display_name()}: a Source subclass implements 'async def run(self)' "
                "(the whole loop) or 'async def _run(self)' (one step, repeated until "
                "self.stopped is set)"
            )
        while not self.stopped:
            await self._run()

    async def _run(self) -> None:
        """One step of a streamz-style source (see :meth:`run`)."""
        raise NotImplementedError

    def position(self) -> P:
        """JSON-serialisable position of the next record to emit."""
        return cast(P, self._position)

    def position_now(self) -> P:
        """The position for display: like :meth:`position`, without its checkpoint effects."""
        return cast(P, self._position)

    def seek(self, position: P) -> None:
        """Resume from ``position`` (a value :meth:`position` returned)."""
        self._position = position

    def check_position(self, position: P) -> None:
        """Refuse a ``position`` this source would not resume at as meant (one line).

        ``write_savepoint`` asks it of every position it is given, before
        anything is written: a position inside a record (it would emit a
        fragment), or past the end of the input (it would emit nothing),
        raises :class:`~rivermark.errors.ConfigurationError` naming the
        source and what to give instead.  Only what can be seen without side
        effects is checked (a file that is readable here, an iterable's
        length); a source checks the rest when it seeks.  The default
        accepts any position.
        """

    def lag(self) -> dict[str, int] | None:
        """How much is left to read, per partition (``""`` for a single stream), if known.

        In :attr:`lag_unit` units: a file source reports bytes left, a Kafka
        source the high watermark minus the next offset per ``topic:partition``.
        The default, ``None``, means the source cannot tell.  Called on the
        loop thread; it must not block.
        """
        return None

    #: what :meth:`lag` counts ("records" or "bytes")
    lag_unit: ClassVar[str] = "records"

    async def prepare(self) -> None:
        """Fix the concrete start position before the job's first checkpoint.

        A job awaits this for every source before the checkpoint it writes
        at start, so that checkpoint pins where the run began even when the
        configured start is relative ("the group's offset", "latest").  The
        default does nothing: most sources' configured start is already a
        concrete position.
        """

    def stop_at(self, position: P) -> None:
        """End once the source reaches ``position`` (a value :meth:`position` returned).

        No record at or after ``position`` is emitted: the source finishes as
        if its input ended there, so a job started from an earlier checkpoint
        reads exactly the input up to a later one (``rivermark replay --until
        EPOCH``).  Call it before the source starts.  A source that cannot
        raises :class:`~rivermark.errors.ConfigurationError` (the default).
        """
        raise ConfigurationError(
            f"{self.display_name()} cannot stop at a given position (it has no stop_at())"
        )

    def stop_at_input_end(self) -> None:
        """Finish at the end of the input instead of waiting for more.

        ``rivermark replay --until end`` calls it before the source starts
        (``from_textfile`` then behaves as with ``stop_at_eof=True``, a Kafka
        source as with ``stop_at_end=True``).  A source whose input has no
        end raises :class:`~rivermark.errors.ConfigurationError` (the default).
        """
        raise ConfigurationError(
            f"{self.display_name()} never ends: its input has no end it can stop at"
        )

    def read_only(self) -> None:
        """Leave no trace outside the job while it reads (``rivermark replay``).

        Called before a copy of a job runs beside the live one.  The default
        does nothing: a file or an iterable is only read.  A Kafka source
        commits no offsets to its consumer group from then on.
        """

    def checkpoint_durable(self, epoch: int, position: P) -> None:
        """Checkpoint ``epoch``, holding this source's ``position``, is durable.

        A job calls this after the checkpoint's manifest is written, never for
        a checkpoint that failed: a source may now publish ``position`` (a
        Kafka source commits it to its consumer group).  Default: nothing.
        """

    def close(self) -> None:
        """Release files, sockets, consumers; called once when the source ends."""

    def state_signature(self) -> str:
        return type(self).__name__

    # ---------------------------------------------------------------- emitting
    _step = 1
    #: the iterator over the chunk being emitted, and its list, while ``_emit_chunk`` runs
    _chunk_it: Any = None
    _chunk: list[Any] | None = None
    #: the records a cut took off the end of the chunk's list (put back after it)
    _chunk_tail: list[Any] = []  # noqa: RUF012 - replaced, never changed in place
    #: records of that chunk not yet taken when ``stop()`` cut it short (None: not cut)
    _chunk_cut: int | None = None
    #: how many records that chunk holds
    _chunk_total = 0
    #: when the current time slice ends (perf_counter); 0: at the next chunk
    _slice_end = 0.0

    def emitted_now(self) -> int:
        """Records handed to the graph so far, those of the chunk at hand included.

        For metrics, read from any thread: ``emitted`` grows once per chunk,
        and the records taken from the chunk being emitted are derived from
        its iterator, so the loop counts nothing per record.
        """
        n = self.emitted
        it, cut = self._chunk_it, self._chunk_cut
        if it is not None:
            left = length_hint(it) if cut is None else cut
            n += max(0, self._chunk_total - left)
        return n

    async def _hold_if_paused(self, budget: RecordBudget | None) -> None:
        """Before a chunk: wait while paused (also when another source spent the budget)."""
        if budget is not None and budget.left <= 0:
            self.pause()  # another source spent the budget: hold until the checkpoint
        if self._pause_requested:
            await self._wait_resumed()

    def _next_step(self, budget: RecordBudget | None) -> int | None:
        """How many records the next step runs (None: the budget is spent, pause)."""
        step = self._step
        if budget is not None:
            if budget.left <= 0:  # spent by another source meanwhile
                self.pause()
                return None
            step = min(step, budget.left)
        return step

    async def _run_part(self, run: Callable[[Any], Any], part: Any) -> tuple[Any, bool]:
        """Run the generated loop over ``part``, waiting out backpressure.

        Returns the loop to go on with (the graph may have changed while it
        waited) and whether a pause or stop cut the part short.
        """
        while True:
            results = run(part)
            if not results:
                return run, False
            # backpressure: wait for the asynchronous work below
            await runtime.gather_results(results)
            run = self.record_loop()
            if self._pause_requested or self.stopped:
                return run, True

    def _budget_spent(self, budget: RecordBudget | None) -> bool:
        """After a step: a record-count checkpoint is due right after its last record."""
        if budget is not None and budget.left <= 0:
            self.pause()
            budget.spent()
            return True
        return False

    def _done_before(self, e: BaseException, it: object, total: int) -> int:
        """How many records of a chunk were fully processed before the one that raised ``e``.

        That record (or one cancelled while its downstream work ran) may have
        left part of its effects in the graph: the position stays before it,
        and after an error no checkpoint may follow (``failure``).
        """
        if isinstance(e, Exception) and self.failure is None:
            self.failure = e
        left = length_hint(it) if self._chunk_cut is None else self._chunk_cut
        return max(0, total - left - 1)

    def _adapt_step(self, step: int, took: float) -> None:
        """Double or halve the step so that one takes about :data:`_STEP_TARGET` seconds."""
        if took < _STEP_TARGET / 2:
            self._step = min(step * 2, _MAX_STEP)
        elif took > _STEP_TARGET * 2 and step > 1:
            self._step = step // 2

    async def _emit_chunk(self, records: list[Any], advance: Callable[[int], None]) -> int:
        """Emit ``records`` in order; return how many were fully processed.

        Calls ``advance(k)`` once, before returning or raising, with the number
        ``k`` of records fully processed (their downstream work finished), so
        the source moves its position past exactly those.  Returns early
        (``k < len(records)``) when the time slice is used up or a pause or
        stop was requested while it waited for downstream work: the caller
        passes the rest again (``records[k:]``), after checking ``stopped``.
        The event loop gets a turn before this returns when the time slice
        (which runs across chunks) is used up or the chunk was cut short, so a
        fast source turns the loop every :data:`TIME_SLICE`, not every chunk.
        """
        budget = self.budget
        await self._hold_if_paused(budget)
        total = len(records)
        if self.stopped or not total:
            return 0
        it = iter(records)
        done = 0
        self._emitting = True
        self._chunk, self._chunk_it, self._chunk_cut, self._chunk_total = records, it, None, total
        try:
            run = self.record_loop()
            deadline = self._slice_end
            if not deadline:
                deadline = self._slice_end = time.perf_counter() + TIME_SLICE
            while True:
                step = self._next_step(budget)
                if step is None:
                    break
                t0 = time.perf_counter()
                # the rest of the chunk fits in this step: no islice around it
                part = it if step >= total - done else islice(it, step)
                run, interrupted = await self._run_part(run, part)
                cut = self._chunk_cut  # set when a record's processing called stop() or pause()
                now_done = total - (length_hint(it) if cut is None else cut)
                if budget is not None:
                    budget.left -= now_done - done
                done = now_done
                if cut is not None or self._budget_spent(budget) or interrupted or done >= total:
                    break
                t1 = time.perf_counter()
                self._adapt_step(step, t1 - t0)
                if t1 >= deadline:
                    break
        except BaseException as e:
            done = self._done_before(e, it, total)
            raise
        finally:
            self._end_chunk(records, done, advance)
        if done < total or time.perf_counter() >= deadline:
            await asyncio.sleep(0)
            self._slice_end = time.perf_counter() + TIME_SLICE
        return done

    def _end_chunk(self, records: list[Any], done: int, advance: Callable[[int], None]) -> None:
        """After a chunk (also when it raised): the source moves past ``done`` records."""
        if self._chunk_tail:  # put back what a cut took off the caller's list
            records.extend(self._chunk_tail)
            self._chunk_tail = []
        self._chunk_it = self._chunk = None
        self.emitted += done
        advance(done)
        self._emitting = False

    async def _emit_record(
        self, x: Any, next_position: P | None = None, metadata: Metadata | None = None
    ) -> None:
        """Emit ``x``, wait for downstream, then advance to ``next_position``."""
        budget = self.budget
        if budget is not None and budget.left <= 0:
            self.pause()  # another source spent the budget: hold until the checkpoint
        if self._pause_requested:
            await self._wait_resumed()
        self._emitting = True
        self.emitted += 1
        try:
            results = self._emit(x, metadata)
            if results:
                await runtime.gather_results(results)
            if next_position is not None:
                self._position = next_position
            if budget is not None:
                budget.left -= 1
                if budget.left <= 0:
                    self.pause()
                    budget.spent()
        except Exception as e:
            # recorded before the barrier can see the emit end: the graph may
            # hold part of this record's effects, so no checkpoint may follow
            if self.failure is None:
                self.failure = e
            raise
        finally:
            self._emitting = False

    async def _wait_resumed(self) -> None:
        if self._resume is None:
            self._resume = asyncio.Event()
        while self._pause_requested:
            await self._resume.wait()

    # ---------------------------------------------------------------- barrier
    def _cut_chunk(self) -> None:
        """End the chunk being emitted after the record at hand (on the loop thread).

        Called by :meth:`pause` and :meth:`stop` when a record's processing
        (or a task running while the chunk waits for backpressure) asks for
        them: the record being processed is finished, no later record of the
        chunk is emitted.  The records after it are taken off the chunk's list
        (a list iterator ends at the list's current end) and put back when
        :meth:`_emit_chunk` returns, so its loop costs no check per record.
        """
        it, chunk = self._chunk_it, self._chunk
        if it is not None and chunk is not None and self._chunk_cut is None:
            left = self._chunk_cut = length_hint(it)
            if left:
                at = len(chunk) - left
                self._chunk_tail = chunk[at:]
                del chunk[at:]

    def pause(self) -> None:
        """Hold the source before its next emit (call on the loop thread)."""
        self._cut_chunk()
        self._pause_requested = True
        if self._resume is None:
            self._resume = asyncio.Event()
        self._resume.clear()

    async def wait_quiescent(self) -> None:
        """Wait until the source is paused and no emit of it is in progress."""
        while self._emitting:
            await asyncio.sleep(0.0005)

    def resume(self) -> None:
        """Let a paused source go on."""
        self._pause_requested = False
        if self._resume is not None:
            self._resume.set()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start producing on the event loop (returns at once)."""
        if self.started and not self.finished:
            return
        self.started = True
        self.stopped = False
        self.finished = False
        loop = self.loop
        if runtime.in_loop_thread(loop):
            self._launch()
        else:
            loop.call_soon_threadsafe(self._launch)

    def _launch(self) -> None:
        self._done_event = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(
            self._main(), name=f"rivermark-source-{self.display_name()}"
        )

    async def _main(self) -> None:
        try:
            await self.run()
        except asyncio.CancelledError:
            pass
        except Exception as e:
            # logged here and kept as ``failure`` (a job stops on it and
            # ``wait_finished`` raises it), not left in the task for asyncio to
            # report at garbage collection
            if self.log_failures:
                logger.exception("source %s failed", self.display_name())
            else:
                logger.debug("source %s failed", self.display_name(), exc_info=True)
            self.error = True
            self.failure = e
        finally:
            self.finished = True
            self.stopped = True
            try:
                self.close()
            finally:
                if self._done_event is not None:
                    self._done_event.set()
                callbacks, self._finished_callbacks = self._finished_callbacks, []
                for callback in callbacks:
                    callback()

    def on_finished(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on the loop thread once the next :meth:`run` has returned.

        Register it before :meth:`start`; it is called once (a job wakes up
        when its sources are exhausted instead of polling for it).
        """
        self._finished_callbacks.append(callback)

    error: bool = False

    def stop(self) -> None:
        """Stop the source.

        On the source's event loop thread no record is emitted after this
        returns.  From another thread, while that loop runs, it waits (up to
        :attr:`stop_wait` seconds) until the source has ended and closed.
        """
        self.stopped = True
        task = self._task
        if task is None or task.done():
            if not self.started:
                self.close()
            return
        loop = task.get_loop()
        if runtime.in_loop_thread(loop):
            self._cut_chunk()
            if not self._emitting:
                task.cancel()
        else:
            loop.call_soon_threadsafe(self._cancel_if_idle)
            if loop.is_running():
                self._wait_ended(loop)

    #: how long :meth:`stop` called from outside the source's event loop waits
    #: for the source to end (its ``close`` included: a Kafka consumer commits
    #: and leaves its group), so that a program that stops its sources and
    #: exits does not leave them running under the interpreter's shutdown
    stop_wait: ClassVar[float] = 15.0

    def _wait_ended(self, loop: asyncio.AbstractEventLoop) -> None:
        async def ended() -> None:
            if self._done_event is not None:
                await self._done_event.wait()

        try:
            asyncio.run_coroutine_threadsafe(ended(), loop).result(self.stop_wait)
        except Exception as e:  # the loop stopped meanwhile, or the source is slow to end
            logger.debug("%s: stop did not see the source end: %r", self.display_name(), e)

    def _cancel_if_idle(self) -> None:
        if self._task is not None and not self._task.done() and not self._emitting:
            self._task.cancel()

    async def wait_finished(self) -> None:
        """Wait until :meth:`run` has returned (exhausted or stopped)."""
        while self._done_event is None:
            await asyncio.sleep(0.001)
        await self._done_event.wait()
        if self.error and self.failure is not None:
            raise self.failure
