"""Writing a savepoint from Python objects: the other half of :func:`~.inspection.read`.

:func:`write_savepoint` writes the state of a graph's nodes, the positions
of its sources and the handles of its checkpointed sinks as one savepoint in
an empty location, so that a job starts from it with
``Job(..., from_savepoint=LOCATION)`` (``rivermark run --from-savepoint``):
to bootstrap a job's state from a batch computation, to correct one key's
value, or to move a source's position.

What it writes is what a job writes at ``Job.savepoint()``: a format 4
manifest marked ``savepoint``, signed with the store's key when one is
configured, and one state file per node in the data encoding of
:mod:`.codec`, each serialised by the job's own views
(:func:`.views.view_of`: a :class:`rivermark.KeyedState` as a base of its
delta chain, anything else whole).  The fingerprint is the graph's
(:func:`.upgrade.job_fingerprint`), so the restore checks the savepoint
against the job's graph as it checks any checkpoint.

Before anything is written, every id is checked against the graph: a state
for a node that is not one of its stateful nodes, a position for a node
that is not a source, a handle for one that is not a checkpointed sink is
refused (:class:`~rivermark.errors.ConfigurationError`, one line naming the
id and the ids the graph has), and so is a state that cannot fit the node
(see :func:`check_fits`), and so is a position its source would not resume
at as meant (inside a line of a text file, past the end of an iterable:
:meth:`~rivermark.sources.base.Source.check_position`).  A location that
holds checkpoints is refused:
a savepoint is never mixed into a job's checkpoints.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from rivermark.checkpoint.protocol.upgrade import job_fingerprint
from rivermark.checkpoint.state.keyed import Chains, KeyedView
from rivermark.checkpoint.state.views import StateView, unpicklable_part, view_of
from rivermark.checkpoint.stores.manifest import Manifest
from rivermark.checkpoint.stores.signing import Keyring, Trust
from rivermark.checkpoint.stores.store import Store, open_store
from rivermark.checkpoint.tools.frames import TakesPandasForm, is_pandas, keyed_dict
from rivermark.core import graph
from rivermark.core.node import Stream
from rivermark.errors import ConfigurationError
from rivermark.sinks.base import CheckpointedSink
from rivermark.sources.base import Source
from rivermark.state import KeyedState, KeyedStore

logger = logging.getLogger(__name__)

__all__ = ["write_savepoint", "check_fits"]

_WHAT = "write_savepoint"


def write_savepoint(
    location: str | os.PathLike[str] | Store,
    graph_node: Stream,
    *,
    state: Mapping[str, Any] | None = None,
    positions: Mapping[str, Any] | None = None,
    sinks: Mapping[str, Any] | None = None,
    epoch: int = 1,
    checkpoint_key: Any = None,
) -> int:
    """Write a savepoint of ``graph_node``'s graph into the empty ``location``; return its epoch.

    ``state`` maps a stateful node's id to its state as its ``get_state()``
    returns it, or as :func:`~.inspection.read` gives it in either form
    (keyed state as a pandas Series or DataFrame, or as a dict; a running
    DataFrame groupby aggregation as its pandas form); ``positions`` maps a
    source's id to its position, ``sinks`` a checkpointed sink's id to its
    handle.  A node left out starts empty, a
    source from its beginning, a sink without a handle.  ``location`` is a
    directory, a store URL (``s3://bucket/prefix``) or a
    :class:`~rivermark.checkpoint.Store` (which signs with its own
    ``trust``); it must hold no checkpoint.  ``checkpoint_key`` signs the
    savepoint as ``Job(checkpoint_key=...)`` does (default:
    ``RIVERMARK_CHECKPOINT_KEY`` / ``RIVERMARK_CHECKPOINT_KEY_FILE``).  Nothing of the graph is changed.

    >>> import tempfile
    >>> from rivermark import Stream
    >>> from rivermark.checkpoint import Job, read
    >>> def build(items):
    ...     source = Stream.from_iterable(items, name="numbers")
    ...     return source, source.accumulate(lambda a, x: a + x, start=0, name="sum").sink_to_list()
    >>> source, totals = build([1, 2, 3, 4])
    >>> sp = tempfile.mkdtemp()
    >>> write_savepoint(sp, source, state={"sum": {"state": 100}}, positions={"numbers": 2})
    1
    >>> Job(source, checkpoint=tempfile.mkdtemp(), every=None, from_savepoint=sp).run()
    >>> totals
    [103, 107]
    """
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
        raise ConfigurationError(f"{_WHAT}: epoch must be an integer >= 1, got {epoch!r}")
    nodes = _graph_ids(graph_node)
    states = _checked_states(nodes, state)
    manifest = Manifest(
        epoch=epoch,
        time=time.time(),
        fingerprint=job_fingerprint(graph_node),
        positions=_checked_positions(nodes, positions),
        sinks=_checked_json(nodes, sinks, CheckpointedSink, "handle", "checkpointed sink"),
        savepoint=True,
    )
    store = _open_empty(location, checkpoint_key)
    store.lock()
    try:
        _refuse_checkpoints(store)
        chains = Chains(store)
        views = {nid: _view(chains, nid, value, epoch) for nid, value in states.items()}
        manifest.chains = {
            nid: chains.link(v) for nid, v in views.items() if isinstance(v, KeyedView)
        }
        # serialised as Job._write serialises a barrier's views
        store.write_checkpoint(manifest, {nid: v.serialise() for nid, v in views.items()})
        written = store.load_chains(epoch)[0]  # read back and verified, signature included
    finally:
        store.unlock()
    logger.info(
        "savepoint %d written to %r: the state of %d nodes, %d positions (%s)",
        epoch,
        store,
        len(views),
        len(manifest.positions),
        written.signature_status,
    )
    return epoch


def _graph_ids(node: Stream) -> dict[str, Stream]:
    """Id -> node of every node of ``node``'s graph, as the job names them."""
    if not isinstance(node, Stream):
        raise ConfigurationError(
            f"{_WHAT}: the graph must be given by one of its nodes (the job's source), got {node!r}"
        )
    ids = graph.node_ids(node)
    return {ids[id(n)]: n for n in graph.topological(node)}


def _stateful(nodes: Mapping[str, Stream]) -> dict[str, Stream]:
    """The nodes whose state a checkpoint holds (as ``Job.stateful``)."""
    return {nid: n for nid, n in nodes.items() if n.is_stateful and not isinstance(n, Source)}


def _unknown(nid: str, what: str, kind: str, known: list[str]) -> ConfigurationError:
    return ConfigurationError(
        f"{_WHAT}: {what} given for {nid!r}, which is not a {kind} of the graph; its "
        f"{kind}s: {', '.join(sorted(known)) or '(none)'}"
    )


def _checked_states(
    nodes: Mapping[str, Stream], given: Mapping[str, object] | None
) -> dict[str, object]:
    """``given`` checked against the graph's stateful nodes, keyed state as the nodes keep it."""
    stateful = _stateful(nodes)
    out: dict[str, Any] = {}
    for nid, value in (given or {}).items():
        node = stateful.get(nid)
        if node is None:
            raise _unknown(nid, "a state", "stateful node", list(stateful))
        if is_pandas(value) and isinstance(node, TakesPandasForm):
            try:  # a DataFrame aggregation's, as read() gives it
                value = node.state_from_pandas(value)
            except ConfigurationError as e:
                raise ConfigurationError(f"{_WHAT}: the state of {nid!r}: {e}") from None
        check_fits(nid, node, value)
        out[nid] = _keyed_as_in(node, value)
    return out


def _view(chains: Chains, nid: str, value: object, epoch: int) -> StateView:
    """The view a savepoint takes of ``value`` (a base of keyed state); one line if it cannot."""
    try:
        return view_of(chains, nid, value, epoch, 0, base=True)
    except Exception as e:
        where, bad = unpicklable_part(value)
        raise ConfigurationError(
            f"{_WHAT}: the state of {nid!r} cannot be written: {where} is a "
            f"{type(bad).__module__}.{type(bad).__qualname__} ({type(e).__name__}: {e}); "
            "give numbers, strings, containers or dataclasses"
        ) from e


def _keyed_as_in(node: Stream, value: object) -> object:
    """``value`` with a ``KeyedState`` (a copy) wherever the node keeps one.

    :func:`~.inspection.read` gives keyed state as a pandas Series or
    DataFrame, or as a plain dict; a job keeps it in a ``KeyedState`` and
    writes it as a delta chain, so the restore hands the node a
    ``KeyedState`` again.
    """
    if not isinstance(value, dict):
        return value
    fresh = _own_state(node)
    keyed = {a for a, v in fresh.items() if isinstance(v, KeyedStore)} if fresh else set()
    out: dict[str, Any] = {}
    for a, v in value.items():
        if a in keyed and is_pandas(v):
            v = keyed_dict(v)
        keep = isinstance(v, Mapping) and (a in keyed or isinstance(v, KeyedStore))
        out[a] = KeyedState(v) if keep else v
    return out


def _own_state(node: Stream) -> dict[str, object] | None:
    """The node's ``get_state()`` now, when it is a dict (what its state must look like)."""
    try:
        fresh = node.get_state()
    except Exception:  # a node that cannot say before it runs: nothing to compare with
        return None
    return fresh if isinstance(fresh, dict) else None


def check_fits(nid: str, node: Stream, value: object) -> None:
    """Refuse (one line) a ``value`` that the restore's ``set_state`` of ``node`` cannot take.

    What is checked costs nothing and changes nothing: a node whose
    ``get_state()`` is a dict is given a dict (or ``None``, which a node
    with its own ``set_state`` may take) holding none of the keys it does not
    keep; a node with the default ``get_state`` and ``set_state`` (its state
    attributes) gets every one of them.  The rest of the value is the node's
    ``set_state`` to judge when the job starts.
    """
    fresh = _own_state(node)
    if fresh is None:
        return
    keys = ", ".join(map(repr, fresh)) or "none"
    own_restore = type(node).set_state is not Stream.set_state
    # the default set_state takes every attribute the default get_state gives
    default_state = not own_restore and type(node).get_state is Stream.get_state
    if not isinstance(value, Mapping):
        if value is None and own_restore:
            return
        raise ConfigurationError(
            f"{_WHAT}: the state of {nid!r} {node!r} must be a dict with the keys {keys} (what "
            f"its get_state() returns), got {type(value).__name__} {_short(value)}"
        )
    unknown = [k for k in value if k not in fresh]
    missing = [k for k in fresh if k not in value] if default_state else []
    if unknown or missing:
        wrong = f"has no key {missing[0]!r}" if missing else f"has a key {unknown[0]!r}"
        raise ConfigurationError(
            f"{_WHAT}: the state of {nid!r} {node!r} {wrong}; the node keeps the keys {keys} "
            "(what its get_state() returns)"
        )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _checked_json(
    nodes: Mapping[str, Stream],
    given: Mapping[str, object] | None,
    cls: type,
    what: str,
    kind: str,
) -> dict[str, object]:
    """``given`` (positions or sink handles) for nodes that are ``cls``, each JSON."""
    allowed = [nid for nid, n in nodes.items() if isinstance(n, cls)]
    out: dict[str, Any] = {}
    for nid, value in (given or {}).items():
        if nid not in allowed:
            raise _unknown(nid, f"a {what}", kind, allowed)
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ConfigurationError(
                f"{_WHAT}: the {what} of {nid!r} must be JSON (numbers, strings, lists, dicts), "
                f"got {_short(value)} ({e})"
            ) from None
        out[nid] = value
    return out


def _checked_positions(
    nodes: Mapping[str, Stream], given: Mapping[str, object] | None
) -> dict[str, object]:
    """``given`` positions, each JSON, for a source of the graph that can resume there.

    Each source checks its position where it can without side effects (a
    text file's offset is where a line starts, an iterable's index is not
    past its end: :meth:`~rivermark.sources.base.Source.check_position`).
    """
    positions = _checked_json(nodes, given, Source, "position", "source")
    for sid, position in positions.items():
        source = nodes[sid]
        assert isinstance(source, Source)
        try:
            source.check_position(position)
        except ConfigurationError as e:
            raise ConfigurationError(f"{_WHAT}: the position of {sid!r}: {e}") from None
    return positions


def _open_empty(location: str | os.PathLike[str] | Store, checkpoint_key: object) -> Store:
    """The store at ``location`` (created if need be), with the key it signs with."""
    if isinstance(location, Store):
        return location
    store = open_store(location, create=True)
    store.trust = Trust(Keyring.configured(checkpoint_key))
    return store


def _refuse_checkpoints(store: Store) -> None:
    """One line if ``store`` holds checkpoints (complete or torn)."""
    epochs = store.list_epochs()
    if epochs or store.list_incomplete():
        held = ", ".join(map(str, epochs)) or "torn ones"
        raise ConfigurationError(
            f"{_WHAT}: {store!r} already holds checkpoints ({held}); write a savepoint into a "
            "new, empty location (it is never mixed into a job's checkpoints), then start the "
            "job from it with from_savepoint"
        )
