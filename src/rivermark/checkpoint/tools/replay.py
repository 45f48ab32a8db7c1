"""A dry run of a job's new code from a checkpoint of the live job (``rivermark replay``).

:func:`plan_replay` checks everything that can be checked without running:
the live checkpoint location and the epochs (``--from DIR[@EPOCH]``,
``--until EPOCH|end``), the restore of the first checkpoint into the new
graph under the upgrade rules of ``rivermark run`` (:func:`.upgrade.plan_restore`),
and that every source can stop where asked (:meth:`Source.stop_at` the
position each source has in the later checkpoint, or
:meth:`Source.stop_at_input_end`).  A refusal is a :class:`ReplayError`
naming the option.  Nothing is written.

:func:`run_replay` then runs the graph as a :class:`~.job.Job` with:

* every sink replaced by a side output in the output directory
  (:mod:`rivermark.sinks.side`: ``DIR/<sink id>.txt``, the text the sink
  would have written, one line per record); the sinks themselves are never
  called;
* a :class:`SideStore` as its checkpoint store: it reads the first
  checkpoint (and the checkpoints its delta chains build on) from the live
  location and writes the replay's own checkpoints to a temporary directory
  under the output directory, removed at the end.  The live location is
  only read;
* every source :meth:`~rivermark.sources.base.Source.read_only` (a Kafka
  source commits no offsets to the live job's consumer group).

:func:`diff_outputs` compares each side output with what the live sink
wrote between the two checkpoints, which a sink that can read its output
back gives (:class:`~rivermark.sinks.base.ReadBackSink`:
``sink_to_textfile``, the bytes of its file between the lengths its handles
record; ``to_kafka``, the records of its topic between the offsets its
handles record, read with ``read_committed``).
"""

from __future__ import annotations

import difflib
import logging
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rivermark.checkpoint.errors import CheckpointError, CheckpointMismatchError
from rivermark.checkpoint.protocol.job import Job
from rivermark.checkpoint.protocol.recovery import parse_savepoint_spec
from rivermark.checkpoint.protocol.upgrade import (
    UpgradePlan,
    UpgradeRules,
    job_fingerprint,
    plan_restore,
    renamed_manifest,
)
from rivermark.checkpoint.stores.manifest import Manifest
from rivermark.checkpoint.stores.names import file_name
from rivermark.checkpoint.stores.signing import Keyring, Trust
from rivermark.checkpoint.stores.store import LocalDirectoryStore, Store
from rivermark.checkpoint.tools.inspection import open_checkpoint_location, read_node_state, where
from rivermark.core import graph
from rivermark.core.inputend import HoldsWatermark
from rivermark.core.node import Stream
from rivermark.errors import ConfigurationError
from rivermark.sinks.base import CheckpointedSink, FileOutputSink, ReadBackSink
from rivermark.sinks.basic import Sink, SinkToList
from rivermark.sinks.side import SideOutput, put_in_place_of
from rivermark.sources.base import Source

logger = logging.getLogger(__name__)

__all__ = [
    "ReplayError",
    "ReplayPlan",
    "ReplayRun",
    "SideStore",
    "SinkDiff",
    "diff_outputs",
    "plan_replay",
    "run_replay",
]


class ReplayError(ConfigurationError):
    """A replay refused before it ran; ``option`` names what to change (``from``, ``until``, ...)."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


@dataclass
class ReplayPlan:
    """What :func:`plan_replay` checked: the graph, the live checkpoints, the restore's plan."""

    node: Stream
    live: Store
    #: the checkpoint the replay starts from, and the one it stops at (None: the input's end)
    start: Manifest
    until: Manifest | None
    upgrade: UpgradePlan
    rules: UpgradeRules
    trust_store: bool


@dataclass(frozen=True)
class ReplayRun:
    """What :func:`run_replay` wrote: the side outputs, by sink id; whether a stop cut it short."""

    sides: dict[str, SideOutput]
    #: the sinks the side outputs stand for, by sink id
    sinks: dict[str, Stream]
    stopped: bool


@dataclass(frozen=True)
class SinkDiff:
    """One sink's comparison: a unified diff (empty: the same), or why it was not compared."""

    sink: str
    diff: list[str]
    not_compared: str | None = None


class SideStore(Store):
    """Checkpoint ``start`` of ``live``, read only, under the checkpoints written to ``side``.

    Epochs up to ``start`` are read from ``live`` (``start`` and the
    checkpoints its delta chains build on); everything written (checkpoints,
    the lock, the job's description) goes to ``side``, and deleting an epoch
    of ``live`` does nothing.  Signatures are checked with this store's
    ``trust``.
    """

    def __init__(self, live: Store, start: int, side: LocalDirectoryStore) -> None:
        self.live = live
        self.start = start
        self.side = side
        #: the job's id derives from it
        self.path: Path = side.path

    def __repr__(self) -> str:
        return f"SideStore(checkpoint {self.start} of {self.live!r}, writing to {self.side!r})"

    def _at(self, epoch: int) -> Store:
        return self.live if epoch <= self.start else self.side

    def list_epochs(self) -> list[int]:
        return [self.start, *(e for e in self.side.list_epochs() if e > self.start)]

    def write_checkpoint(self, manifest: Manifest, states: dict[str, bytes]) -> None:
        if manifest.epoch <= self.start:
            raise CheckpointError(
                f"{self!r}: checkpoint {manifest.epoch} would replace one of the live location's"
            )
        self.side.write_checkpoint(manifest, states)

    def read_manifest(self, epoch: int) -> Manifest:
        return self._at(epoch).read_manifest(epoch)

    def read_state(self, epoch: int, node_id: str) -> bytes:
        return self._at(epoch).read_state(epoch, node_id)

    def read_state_entry(self, epoch: int, node_id: str, entry: dict[str, object]) -> bytes:
        return self._at(epoch).read_state_entry(epoch, node_id, entry)

    def describe(self, epoch: int) -> str:
        return self._at(epoch).describe(epoch)

    def delete(self, epoch: int) -> None:
        if epoch > self.start:
            self.side.delete(epoch)

    def lock(self) -> None:
        self.side.lock()

    def unlock(self) -> None:
        self.side.unlock()

    def write_job_info(self, info: dict[str, object]) -> None:
        self.side.write_job_info(info)

    def list_incomplete(self) -> list[Path]:
        return self.side.list_incomplete()


# ---------------------------------------------------------------- checks before running
def _open_live(location: str, trust_store: bool) -> tuple[Store, int | None]:
    """The live store (read only) and the epoch ``location`` names (None: the newest)."""
    try:
        spot, epoch = parse_savepoint_spec(location)
    except ConfigurationError:
        raise ReplayError(
            "from",
            f"{location!r}: the part after '@' must be an epoch number (DIR@42); leave it out "
            "for the newest checkpoint",
        ) from None
    try:
        live = open_checkpoint_location(spot)
    except CheckpointError as e:
        raise ReplayError("from", str(e)) from None
    live.trust = Trust(Keyring.configured(), trust_store)
    return live, epoch


def _not_retained(epoch: int, live: Store, held: list[int]) -> str:
    listed = ", ".join(map(str, held))
    return f"checkpoint {epoch} is not retained in {where(live)}; name one it holds: {listed}"


def _epochs(live: Store, start: int | None, until: int | None) -> tuple[int, int | None]:
    """The epochs to replay from and to, each retained in ``live``."""
    held = live.list_epochs()
    if not held:
        raise ReplayError("from", f"{where(live)} holds no checkpoints; name the live job's")
    start = held[-1] if start is None else start
    if start not in held:
        raise ReplayError("from", _not_retained(start, live, held))
    if until is not None and until not in held:
        raise ReplayError("until", _not_retained(until, live, held))
    if until is not None and until < start:
        raise ReplayError(
            "until",
            f"checkpoint {until} is before the checkpoint the replay starts from ({start}); "
            "give a later epoch, or 'end'",
        )
    return start, until


def _under_graph_ids(manifest: Manifest, plan: UpgradePlan) -> Manifest:
    """``manifest`` with the ids the restore gives it: legacy ids, then renames, replaced."""
    renamed, _ = renamed_manifest(manifest, {}, plan.legacy)
    return renamed_manifest(renamed, {}, plan.renames)[0]


def _set_stop(s: Source, sid: str, until: Manifest | None) -> None:
    """Make source ``s`` end where it was at checkpoint ``until`` (None: at its input's end)."""
    if until is not None and sid not in until.positions:
        raise ReplayError(
            "until",
            f"source {sid} has no position in checkpoint {until.epoch} (it is new since); "
            "use --until end",
        )
    try:
        if until is None:
            s.stop_at_input_end()
        else:
            s.stop_at(until.positions[sid])
    except ConfigurationError as e:
        other = "replay up to a checkpoint (--until EPOCH)" if until is None else "use --until end"
        raise ReplayError("until", f"source {sid}: {e}; {other}") from None


def _check_roots(node: Stream, until: Manifest | None) -> None:
    """Every root a replayable source, set to stop where the replay ends, and read only."""
    ids = graph.node_ids(node)
    roots = graph.sources_of(node)
    for n in roots:
        if not isinstance(n, Source) or not n.replayable:
            why = (
                "fed by emit()" if not isinstance(n, Source) else "a source that is not replayable"
            )
            raise ReplayError(
                "target",
                f"{ids[id(n)]} {n!r} is {why}: a replay reads its input again from a "
                "checkpoint's position, which only a replayable source can",
            )
        _set_stop(n, ids[id(n)], until)
    for n in roots:
        assert isinstance(n, Source)
        n.read_only()


def plan_replay(
    node: Stream,
    location: str,
    until: int | None,
    rules: UpgradeRules,
    trust_store: bool = False,
) -> ReplayPlan:
    """Check a replay of ``node``'s graph from ``location`` (``DIR[@EPOCH]``) until ``until``.

    ``until`` is an epoch of the same location, or None for the end of the
    input.  Raises :class:`ReplayError` (or, for a restore the upgrade rules
    refuse, :class:`CheckpointMismatchError`); writes nothing.
    """
    live, wanted = _open_live(location, trust_store)
    start_epoch, until_epoch = _epochs(live, wanted, until)
    start = live.load_manifest(start_epoch)
    plan = plan_restore(start, node, rules)
    if plan.refused:
        raise CheckpointMismatchError(plan.message(where(live)))
    later = None if until_epoch is None else _under_graph_ids(live.load_manifest(until_epoch), plan)
    _check_roots(node, later)
    return ReplayPlan(node, live, _under_graph_ids(start, plan), later, plan, rules, trust_store)


# ---------------------------------------------------------------- running
def _is_sink(n: Stream) -> bool:
    return isinstance(n, (Sink, SinkToList, CheckpointedSink)) and not isinstance(n, Source)


def _side_file(output: Path, sink_id: str) -> Path:
    """``DIR/<sink id>.txt``, the id encoded as one file name (:func:`.names.file_name`)."""
    return output / f"{file_name(sink_id)}.txt"


def _check_output(output: Path, live: Store, sinks: dict[str, Stream]) -> None:
    """Refuse an output directory that is a file, in the live location, or holds a live file."""
    if output.exists() and not output.is_dir():
        raise ReplayError("output", f"{str(output)!r} is a file; give a directory")
    if isinstance(live, LocalDirectoryStore):
        place, mine = live.path.resolve(), output.resolve()
        if mine == place or place in mine.parents:
            raise ReplayError(
                "output", f"{str(output)!r} is inside the live checkpoint location; choose another"
            )
    for sid, sink in sinks.items():
        path = sink.path if isinstance(sink, FileOutputSink) else None
        mine = _side_file(output, sid)
        if isinstance(path, str) and os.path.realpath(path) == os.path.realpath(mine):
            raise ReplayError(
                "output",
                f"{str(mine)!r} is the live output of sink {sid}; choose another directory",
            )


def _sinks_of(node: Stream) -> dict[str, Stream]:
    """The sinks of ``node``'s graph by id: every ``sink``, ``sink_to_list`` and checkpointed sink."""
    ids = graph.node_ids(node)
    return {ids[id(n)]: n for n in graph.topological(node) if _is_sink(n)}


def _replace_sinks(node: Stream, sinks: dict[str, Stream], output: Path) -> dict[str, SideOutput]:
    """Each of ``sinks`` replaced by a side output in ``output`` (a stand-in if fingerprinted)."""
    signatures = job_fingerprint(node)
    return {
        sid: put_in_place_of(sink, sid, str(_side_file(output, sid)), signatures.get(sid))
        for sid, sink in sinks.items()
    }


def _job(plan: ReplayPlan, root: Stream, store: SideStore) -> Job:
    """The job that runs the replay: no interval checkpoints, the rules of the plan."""
    rules = plan.rules
    return Job(
        root,
        checkpoint=store,
        every=None,
        background=False,
        trust_store=plan.trust_store,
        rename=dict(rules.rename),
        allow_dropped_state=rules.allow_dropped_state,
        allow_new_nodes=rules.allow_new_nodes,
        migrate=dict(rules.migrate),
    )


def _stop_watermarks(plan: ReplayPlan) -> None:
    """Each event-time node's watermark at the end of a replay up to a checkpoint: the live
    run's watermark in that checkpoint, not ``+inf`` (the windows the live run still held
    open there stay open, so the replay emits what the live run had emitted)."""
    if plan.until is None:
        return
    ids = graph.node_ids(plan.node)
    original = plan.live.load_manifest(plan.until.epoch)
    # the graph's id of each node of the checkpoint (legacy ids, then renames)
    stored = {}
    for o in original.state:
        legacy = plan.upgrade.legacy.get(o, o)
        stored[plan.upgrade.renames.get(legacy, legacy)] = o
    for n in graph.topological(plan.node):
        if not isinstance(n, HoldsWatermark):
            continue
        nid = ids[id(n)]
        if nid not in stored:  # new since: the records alone move it
            n.end_watermark = -math.inf
            continue
        state = read_node_state(plan.live, plan.until.epoch, stored[nid])
        n.end_watermark = float(state["watermarks"]["watermark"])
        logger.info(
            "replay: %s stops at the watermark of checkpoint %d (%s)",
            nid,
            plan.until.epoch,
            n.end_watermark,
        )


def run_replay(
    plan: ReplayPlan, output: str | os.PathLike[str], signals: bool = False
) -> ReplayRun:
    """Run the replay :func:`plan_replay` checked, writing the side outputs to ``output``.

    With ``signals`` (the main thread) SIGINT and SIGTERM stop it as they
    stop ``rivermark run``; the run then says it was ``stopped``.
    """
    out = Path(output)
    sinks = _sinks_of(plan.node)
    _check_output(out, plan.live, sinks)
    root = graph.sources_of(plan.node)[0]  # a root: never a sink, which leaves the graph
    out.mkdir(parents=True, exist_ok=True)
    sides = _replace_sinks(plan.node, sinks, out)
    _stop_watermarks(plan)
    try:
        with tempfile.TemporaryDirectory(prefix=".replay-checkpoints-", dir=out) as scratch:
            job = _job(
                plan, root, SideStore(plan.live, plan.start.epoch, LocalDirectoryStore(scratch))
            )
            if signals:
                job.install_signal_handlers()
            job.run()
    finally:
        for side in sides.values():
            side.close()
    return ReplayRun(sides, sinks, job.stop_requested)


# ---------------------------------------------------------------- comparing
_PARTITION_KEY = re.compile(r".+:\d+")


def _partitions_interleave(plan: ReplayPlan) -> bool:
    """Whether the replayed range reads more than one partition of a partitioned source.

    A partitioned source's position names each partition ``"topic:partition"``.
    The records of two partitions reach a sink in the order they happen to be
    read, which a replay does not repeat: their output is compared as sorted
    records even when it lies in one output partition.
    """
    assert plan.until is not None
    moved = 0
    for sid, end in plan.until.positions.items():
        begin = plan.start.positions.get(sid)
        if isinstance(end, dict) and isinstance(begin, dict):
            moved += sum(
                1
                for k, v in end.items()
                if isinstance(k, str) and _PARTITION_KEY.fullmatch(k) and begin.get(k) != v
            )
    return moved > 1


def _compare(sid: str, sink: Stream, side: SideOutput, plan: ReplayPlan) -> SinkDiff:
    if not isinstance(sink, ReadBackSink):
        return SinkDiff(
            sid,
            [],
            f"a {type(sink).__name__} cannot read back what it wrote; the outputs of "
            "sink_to_textfile and to_kafka are compared",
        )
    assert plan.until is not None
    first, last = plan.start.sinks.get(sid), plan.until.sinks.get(sid)
    if first is None or last is None:
        return SinkDiff(sid, [], "the live checkpoints hold no output of it (a sink new since)")
    try:
        live = sink.written_between(first, last)
    except (OSError, ValueError) as e:
        return SinkDiff(sid, [], f"the live output cannot be read: {e}")
    theirs = live.text.splitlines()
    mine = Path(side.path).read_text(encoding="utf-8").splitlines()
    order = ""
    if not live.ordered or _partitions_interleave(plan):
        # records of several partitions: their order between partitions is not kept
        theirs, mine, order = sorted(theirs), sorted(mine), ", sorted"
    diff = difflib.unified_diff(
        theirs,
        mine,
        fromfile=f"{live.where} (live, checkpoints {plan.start.epoch}..{plan.until.epoch}{order})",
        tofile=f"{side.path} (replay{order})",
        lineterm="",
    )
    return SinkDiff(sid, list(diff))


def diff_outputs(plan: ReplayPlan, run: ReplayRun) -> list[SinkDiff]:
    """Each side output compared with the live sink's output between the two checkpoints."""
    if plan.until is None:
        raise ReplayError("until", "comparing needs the checkpoint the live output ends at")
    return [_compare(sid, run.sinks[sid], side, plan) for sid, side in run.sides.items()]
