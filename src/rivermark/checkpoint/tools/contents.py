"""What one checkpoint holds, read without a job: a location opened read-only, nodes' state.

:func:`open_checkpoint_location` opens a directory or URL without creating
anything; :func:`pick_epoch` chooses a checkpoint of it; :func:`read_node_state`
and :func:`read` decode nodes' state (delta chains resolved, RocksDB state
read from its files, pickled parts only from a trusted checkpoint);
:func:`state_rows` and :func:`render_value` show a state to a person.
:mod:`.inspection` builds the ``rivermark checkpoints`` answers on these.
"""

from __future__ import annotations

import os
import pprint
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rivermark.checkpoint.errors import (
    CheckpointCorruptError,
    CheckpointNotFoundError,
    NotACheckpointDirectoryError,
    UntrustedStateError,
)
from rivermark.checkpoint.state import codec
from rivermark.checkpoint.state.keyed import materialise
from rivermark.checkpoint.state.rocks.reading import read_rocks_state, rocks_key_counts
from rivermark.checkpoint.stores.manifest import Manifest
from rivermark.checkpoint.stores.signing import Keyring, Trust
from rivermark.checkpoint.stores.store import LocalDirectoryStore, Store, open_store
from rivermark.checkpoint.tools.frames import as_pandas as as_pandas_form
from rivermark.checkpoint.tools.frames import require_pandas
from rivermark.errors import ConfigurationError

__all__ = [
    "CheckpointContents",
    "chain_sizes",
    "entry_count",
    "open_checkpoint_location",
    "pick_epoch",
    "read",
    "read_node_state",
    "render_value",
    "state_rows",
    "untrusted_reason",
    "where",
]


def open_checkpoint_location(path: str | os.PathLike[str]) -> Store:
    """The store at ``path`` (a directory or URL), opened read-only.

    Raises :class:`NotACheckpointDirectoryError` when no checkpoint store is
    there; nothing is created.
    """
    hint = "pass the directory given to 'rivermark run --checkpoint'"
    if "://" in os.fspath(path):
        try:
            return open_store(path, create=False)
        except CheckpointNotFoundError as e:
            raise NotACheckpointDirectoryError(f"{e}; {hint}") from None
    p = Path(path)
    if not p.exists():
        raise NotACheckpointDirectoryError(f"no such checkpoint directory {str(p)!r}; {hint}")
    if not p.is_dir():
        raise NotACheckpointDirectoryError(
            f"{str(p)!r} is a file, not a checkpoint directory; {hint}"
        )
    if not (p / "checkpoints").is_dir():
        raise NotACheckpointDirectoryError(
            f"{str(p)!r} is not a rivermark checkpoint directory (it has no 'checkpoints' "
            f"directory); {hint}"
        )
    return LocalDirectoryStore(p, create=False)


def where(store: Store) -> str:
    """The store's location for messages: a quoted path or URL."""
    if isinstance(store, LocalDirectoryStore):
        return repr(str(store.path))
    return repr(store.location() or store)


def pick_epoch(store: Store, epoch: int | None) -> int:
    """``epoch`` if the store holds it (default: the newest); a usage error otherwise."""
    epochs = store.list_epochs()
    if not epochs:
        raise CheckpointNotFoundError(f"no checkpoints in {where(store)}")
    if epoch is None:
        return epochs[-1]
    if epoch not in epochs:
        have = ", ".join(map(str, epochs))
        raise CheckpointNotFoundError(
            f"{where(store)} has no checkpoint {epoch!r} (checkpoints: {have}); "
            "see 'rivermark checkpoints list'"
        )
    return epoch


def chain_sizes(store: Store, epoch: int, node: str) -> dict[str, object]:
    """The delta chain of ``node`` at ``epoch``: its base and every delta, with sizes.

    ``{"base": epoch, "base_size": bytes, "deltas": [[epoch, bytes], ...],
    "delta_size": bytes}`` (deltas oldest first, ``epoch``'s own last).
    """
    m = store.load_manifest(epoch)
    deltas: list[list[int]] = []
    e: int | None = epoch
    while e is not None:
        me = m if e == epoch else store.load_manifest(e)
        link = me.chains.get(node)
        size = int(me.state[node]["size"])
        if link is None or link["parent"] is None:
            deltas.reverse()
            return {
                "base": e,
                "base_size": size,
                "deltas": deltas,
                "delta_size": sum(d[1] for d in deltas),
            }
        deltas.append([e, size])
        e = link["parent"]
    raise CheckpointCorruptError(f"checkpoint {epoch}: the chain of {node!r} has no base")


def untrusted_reason(store: Store, epoch: int, node: str, status: str) -> str:
    """Why the pickled state of ``node`` is not loaded, and the remedy."""
    return (
        f"checkpoint {epoch} in {where(store)}: the state of {node!r} holds pickled objects "
        f"(an older rivermark's state, or objects of the app's own classes) and unpickling "
        f"runs code, but the checkpoint is {status}; set the job's checkpoint key "
        "(RIVERMARK_CHECKPOINT_KEY or RIVERMARK_CHECKPOINT_KEY_FILE) to read signed "
        "checkpoints, or pass --trust-store if you trust whoever can write the store"
    )


def read_node_state(store: Store, epoch: int | None, node: str, as_pandas: bool = False) -> Any:
    """The decoded state of ``node`` in checkpoint ``epoch`` (default: the newest).

    Pickled parts are loaded only from a checkpoint whose signature verified
    with the store's keys, or when the store is trusted (``store.trust``);
    otherwise :class:`~rivermark.checkpoint.errors.UntrustedStateError` is
    raised before any of it is unpickled.  With ``as_pandas``, in the pandas
    form of :mod:`.frames` where that fits.
    """
    e = pick_epoch(store, epoch)
    m: Manifest = store.load_manifest(e)
    if node not in m.state:
        known = sorted(m.state)
        raise ConfigurationError(
            f"checkpoint {e} has no state for node {node!r}; nodes with state: "
            f"{', '.join(known) if known else '(none)'}"
        )
    # a delta chain's blobs, or RocksDB state's state file: each checked against its manifest
    chains = store.load_chains(e)[1] if node in m.chains or node in m.files else {}
    if as_pandas:
        require_pandas("the pandas form of a node's state")
        return as_pandas_form(*_decoded_keyed(store, e, m, node, chains))
    return _decoded(store, e, m, node, chains)


def _decoded(store: Store, e: int, m: Manifest, node: str, chains: dict[str, list[bytes]]) -> Any:
    """The state of ``node`` in checkpoint ``e`` (``chains``: its delta chain's blobs)."""
    return _decoded_keyed(store, e, m, node, chains)[0]


def _decoded_keyed(
    store: Store, e: int, m: Manifest, node: str, chains: dict[str, list[bytes]]
) -> tuple[object, set[str]]:
    """:func:`_decoded`, and the names of its keyed state's parts (a delta chain's content)."""
    allow = store.trust.allow_pickle(m.signature_status)
    why = untrusted_reason(store, e, node, m.signature_status)
    try:
        if node in m.files:  # RocksDB state: its files opened read-only, each checked
            return read_rocks_state(store, m, node, chains[node][-1], allow_pickle=allow, what=why)
        if node in m.chains:
            rest, content = materialise(chains[node], allow_pickle=allow, what=why)
            return {**rest, **content}, set(content)
        return codec.loads(store.read_state(e, node), allow_pickle=allow, what=why), set()
    except CheckpointCorruptError:
        raise
    except (ValueError, ImportError, AttributeError, EOFError, TypeError) as err:
        # a class that is not importable here, a damaged file
        raise CheckpointCorruptError(
            f"checkpoint {e}: the state of {node!r} does not decode here "
            f"({type(err).__name__}: {err}); if it holds objects of the app's classes, "
            "run this where the job's code is importable"
        ) from err


@dataclass(frozen=True)
class CheckpointContents:
    """What one checkpoint holds, decoded: see :func:`read`."""

    epoch: int
    #: node id -> the node's state as its ``get_state()`` returned it, delta
    #: chains resolved: keyed state and DataFrame aggregations as pandas where
    #: that fits (``as_pandas=True``), else keyed state as plain dicts
    state: dict[str, Any]
    #: source id -> position
    positions: dict[str, Any]
    #: sink id -> handle
    sinks: dict[str, Any]


def read(
    location: str | os.PathLike[str] | Store,
    epoch: int | None = None,
    *,
    as_pandas: bool = True,
    checkpoint_key: object = None,
    trust_store: bool = False,
) -> CheckpointContents:
    """The state of every node and the positions in a checkpoint, as Python objects.

    ``location`` is a checkpoint directory, a store URL or a
    :class:`~rivermark.checkpoint.Store`.  Without ``epoch``, the newest
    checkpoint that verifies (a damaged newer one is skipped, as a restore
    does).  Nothing is written.  Pickled state is loaded only from a checkpoint
    signed with ``checkpoint_key`` (default: the job's environment variables)
    or with ``trust_store=True`` (see ``docs/security.md``).

    With ``as_pandas=True`` (needs pandas) keyed state is a ``pd.Series``
    (scalar values) or ``pd.DataFrame`` (records) indexed by key, and a
    running DataFrame groupby aggregation is the value it emits (or, for a
    mean, variance or standard deviation, its running parts) indexed by the
    group keys, wherever that form gives back exactly the same state (see
    :mod:`.frames`); with ``as_pandas=False`` every state is what the node's
    ``get_state()`` returned, keyed state as dicts.  :func:`write_savepoint`
    takes either.

    >>> import tempfile
    >>> from rivermark import Stream
    >>> from rivermark.checkpoint import Job
    >>> d = tempfile.mkdtemp()
    >>> source = Stream.from_iterable([1, 2, 3], name="numbers")
    >>> _ = source.accumulate(lambda a, x: a + x, start=0, name="sum").sink_to_list()
    >>> Job(source, checkpoint=d, every=None).run()
    >>> contents = read(d)
    >>> contents.state["sum"], contents.positions["numbers"]
    ({'state': 6}, 3)
    """
    if as_pandas:
        require_pandas("read(as_pandas=True)")
    if isinstance(location, Store):
        store = location
    else:
        store = open_checkpoint_location(location)
        store.trust = Trust(Keyring.configured(checkpoint_key), bool(trust_store))
    if epoch is not None:
        picked = [pick_epoch(store, epoch)]
    else:
        picked = list(reversed(store.list_epochs()))
        if not picked:
            raise CheckpointNotFoundError(f"no checkpoints in {where(store)}")
    damaged: list[str] = []
    for e in picked:
        try:
            m, chains = store.load_chains(e)
        except CheckpointCorruptError as err:
            if epoch is not None:
                raise
            damaged.append(str(err))
            continue
        state = {nid: _decoded_keyed(store, e, m, nid, chains) for nid in m.state}
        shown = {
            nid: as_pandas_form(value, keyed) if as_pandas else value
            for nid, (value, keyed) in state.items()
        }
        return CheckpointContents(e, shown, dict(m.positions), dict(m.sinks))
    raise CheckpointCorruptError(f"no checkpoint in {where(store)} verifies: " + "; ".join(damaged))


def state_rows(state: Any) -> list[dict[str, Any]]:
    """A node's decoded state as rows, for ``rivermark checkpoints export``.

    The state's one container (a keyed state, an accumulated dict or list,
    a Series or DataFrame: a DataFrame aggregation in its pandas form, see
    :mod:`.frames`) gives one row per entry: ``{"key", "value"}`` for a
    mapping or a Series whose index has no name, the index's and the
    values' names for one that has (``{"name": "a", "x": 4}``), the columns
    (and the index) for a DataFrame, columns of two levels joined by a dot
    (``sum.x``); ``{"index", "value"}`` for a sequence; a state of several
    parts gives one row per part.

    >>> state_rows({"state": {"river": 2, "mark": 1}})
    [{'key': 'river', 'value': 2}, {'key': 'mark', 'value': 1}]
    >>> state_rows({"buffer": [7, 8], "count": 2})
    [{'key': 'buffer', 'value': [7, 8]}, {'key': 'count', 'value': 2}]
    >>> import pandas as pd
    >>> state_rows(pd.Series([4, 8], index=pd.Index(["a", "b"], name="name"), name="x"))
    [{'name': 'a', 'x': 4}, {'name': 'b', 'x': 8}]
    """
    import pandas as pd

    value = state
    if isinstance(state, dict):
        sized = [
            v for v in state.values() if isinstance(v, (*_CONTAINERS, pd.DataFrame, pd.Series))
        ]
        if len(sized) == 1 and len(state) == 1:
            value = sized[0]
    if isinstance(value, pd.Series):
        if all(n is None for n in value.index.names):
            value = value.to_dict()
        else:
            value = value.rename("value" if value.name is None else value.name).to_frame()
    if isinstance(value, pd.DataFrame):
        frame = value.reset_index()
        if isinstance(frame.columns, pd.MultiIndex):
            frame.columns = [".".join(str(p) for p in col if p != "") for col in frame.columns]
        rows: list[dict[str, Any]] = frame.to_dict(orient="records")
        return rows
    if isinstance(value, dict):
        return [{"key": k, "value": v} for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [{"index": i, "value": v} for i, v in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        return [{"index": i, "value": v} for i, v in enumerate(sorted(value, key=repr))]
    return [{"value": value}]


def render_value(value: object, max_chars: int = 2000) -> str:
    """``value`` pretty-printed, cut to ``max_chars`` characters with a note saying so.

    >>> render_value(list(range(1000)), max_chars=20)
    '[0,\\n 1,\\n 2,\\n 3,\\n 4,\\n... (5869 more characters)'
    """
    text = pprint.pformat(value, width=100, sort_dicts=True)
    if max_chars > 0 and len(text) > max_chars:
        return text[:max_chars] + f"... ({len(text) - max_chars} more characters)"
    return text


#: state files larger than this are not decoded to count their entries in a diff
_COUNT_ENTRIES_UP_TO = 64 << 20
_CONTAINERS = (dict, list, tuple, set, frozenset)


def entry_count(store: Store, epoch: int, m: Manifest, node: str) -> int | None:
    """How many entries (keys, items) the state of ``node`` holds, if that says something.

    The count is that of the state's one container (the dictionary of a
    keyed node, an accumulate's dict, a window's list); ``None`` when the
    state has none or several, is too large to decode here, or holds
    pickled parts that this reader may not load (nothing is unpickled to
    count).  A mapping in RocksDB counts the keys its state file says it
    holds (its files are not read).
    """
    info = m.state.get(node)
    if info is None or int(info.get("size", 0)) > _COUNT_ENTRIES_UP_TO:
        return None
    try:
        if node in m.files:
            rest, counts = rocks_key_counts(store.read_state(epoch, node))
            sized = [v for v in rest.values() if isinstance(v, _CONTAINERS)]
            return next(iter(counts.values())) if len(counts) == 1 and not sized else None
        chains = store.load_chains(epoch)[1] if node in m.chains else {}
        value = _decoded(store, epoch, m, node, chains)
    except (CheckpointCorruptError, UntrustedStateError, ConfigurationError):
        return None
    if isinstance(value, dict):
        sized = [v for v in value.values() if isinstance(v, _CONTAINERS)]
        value = sized[0] if len(sized) == 1 else None
    return len(value) if isinstance(value, _CONTAINERS) else None
