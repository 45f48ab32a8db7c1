"""The manifest: the one file that makes a checkpoint exist.

``manifest.json`` in a checkpoint's directory holds::

    {
      "format": 2,
      "epoch": 42,
      "time": 1764680000.5,            # unix time the snapshot was taken
      "fingerprint": {"node-id": "Signature()", ...},
      "positions": {"source-id": <JSON position>, ...},
      "sinks": {"sink-id": <JSON handle>, ...},
      "state": {"node-id": {"file": "state/node-id.pkl", "size": 123, "sha256": "..."}},
      "chains": {"node-id": {"parent": 41, "base": 37}},   # formats 3 and 4
      "savepoint": true,               # format 4, only in a savepoint
      "run": {"started": 1764679000.0, "resumed_from": 41},   # optional: the run that wrote it
      "timing": {"duration": 0.042, "write": 0.031, "pause": 0.003},  # optional: seconds
      "counts": {"node-id": [in, out, raised, skipped, handled, late], ...},  # optional: totals
      "files": {"node-id": {"attr": {"000012.sst": {"sha256": "...", "size": 123}}}},   # format 5
      "renamed": {"total": "sum"},     # optional: renames the state went through, new -> old
      "checksum": "<sha256 of every other field>",
      "signature": {"key": "<key id>", "hmac": "<HMAC-SHA256>"}   # format 4, with a key
    }

Format 4 (this version) holds state files in the data encoding of
:mod:`rivermark.checkpoint.state.codec` (formats 1-3: one pickle each) and may be
signed (:mod:`rivermark.checkpoint.stores.signing`): ``signature`` is the HMAC of
the same canonical text the checksum covers, so it covers every state
file's sha256.  Neither ``checksum`` nor ``signature`` is part of that text.

Format 3 is written only when some node's state is a delta chain
(``rivermark.KeyedState``): its state file holds the keys changed since the
``parent`` checkpoint, and restoring it needs every file back to ``base``.
A reader that knows only formats 1 and 2 refuses it rather than misreading
a delta as a whole state.

``savepoint`` marks a checkpoint the user asked to keep (``Job.savepoint()``,
``Job.stop(savepoint=True)``): retention never deletes it and every keyed
state in it is a base, so it needs no other checkpoint.  It is part of the
text the checksum and the signature cover; a manifest without it (every
manifest written before savepoints existed) is an ordinary checkpoint.

``run`` (optional, written from format 4 on) says which run of the job
wrote the checkpoint: the unix time the run started and the epoch it
resumed from (``null``: it started without a checkpoint), so a reader can
tell where each run began (``rivermark checkpoints list``).

``timing`` (optional, format 4) is how long the checkpoint took, measured
when the manifest is serialised, the last step before the commit (the
rename).  These are the figures the live page, the checkpoint history,
Prometheus and ``rivermark checkpoints list`` show, under these names:
``duration`` is **end to end**, from the moment the sources were paused;
``write`` the durable **write** of the state files and the manifest (older
checkpoints lack it); ``pause`` how long the sources were held by then (a
background write resumes them before it writes; a blocking one holds them
throughout, so its pause is its end-to-end figure).  What follows the commit
(the sinks' commits, pruning) is in none of them.

``counts`` (optional, format 4) holds every node's records in and out,
errors (raised, skipped, handled by an ``on_error`` callable) and late
records since the job first started, as they stood at the snapshot
(checkpoints of older versions: records in and out only): a resumed job
counts on from there, so every count of its metrics carries over a restore
exactly (the records after the checkpoint are processed again and counted
again).

``files`` (format 5, only when some node keeps its keyed state in RocksDB,
:mod:`rivermark.checkpoint.state.rocks`) names, per node and state attribute,
every file of that state's RocksDB checkpoint with its sha256 and size.
The small files (marked ``"inline": true``: CURRENT, MANIFEST, OPTIONS)
are inside the node's state file; the SST files live in the store's
shared area under their sha256
(:meth:`rivermark.checkpoint.stores.store.Store.write_shared`): a file that
several checkpoints need is stored once, and retention keeps every file a
kept checkpoint names.  A manifest with ``files`` is written as format 5,
so a reader that knows only formats 1-4 refuses it rather than restoring
such a node without its state.

``renamed`` (optional) maps a node id to the id its state was stored under
before a rename (``Job(rename={"sum": "total"})`` gives ``{"total": "sum"}``);
every later checkpoint of the job carries it on, for the nodes still in the
graph.  A restore given the same rename again (a restart with the same
command) sees that it took effect; a rename whose old id the checkpoint
neither holds nor records is refused (:mod:`rivermark.checkpoint.protocol.upgrade`).
A reader that does not know the field ignores it (the checksum covers it).

It is written last, under a temporary name, fsynced and renamed into place,
so a checkpoint whose manifest is missing never existed.

Integrity.  ``checksum`` is the sha256 of the other fields serialised as
canonical JSON (sorted keys, no spaces), so an edited epoch, position, sink
handle or state entry fails :meth:`Manifest.from_json`, as does a manifest
that does not parse, lacks a field or has one of the wrong type
(:class:`~rivermark.checkpoint.errors.ManifestError`).  A ``format`` this
version does not know is refused
(:class:`~rivermark.checkpoint.errors.ManifestFormatError`).  Format 1
manifests (written before the checksum existed) are read with the schema
check only, and only when they carry no ``checksum``.  Whether the manifest
belongs to the directory it sits in (its epoch) is checked by
:meth:`rivermark.checkpoint.stores.store.Store.load_manifest`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rivermark.checkpoint.errors import ManifestError, ManifestFormatError

if TYPE_CHECKING:
    from rivermark.checkpoint.stores.signing import Keyring

logger = logging.getLogger(__name__)

__all__ = [
    "Manifest",
    "FORMAT_VERSION",
    "CHAINS_FORMAT",
    "DATA_FORMAT",
    "FILES_FORMAT",
    "READABLE_FORMATS",
    "sha256_of",
]

FORMAT_VERSION = 4
#: the first format with delta chains (``chains``); older readers refuse it
CHAINS_FORMAT = 3
#: the first format whose state files are data (:mod:`.codec`) rather than pickles
DATA_FORMAT = 4
#: the first format whose manifest names shared files (``files``: RocksDB state);
#: written only when there are any, older readers refuse it
FILES_FORMAT = 5
#: the formats this version reads (1: no checksum of its own; 3: delta chains;
#: 4: data state files, signatures; 5: shared files)
READABLE_FORMATS = (1, 2, 3, 4, 5)

_HEX64 = re.compile(r"[0-9a-f]{64}")
#: a file of a RocksDB checkpoint: no directory part, no leading dot
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_FIELDS = ("format", "epoch", "time", "fingerprint", "positions", "sinks", "state")


def sha256_of(data: bytes) -> str:
    """Hex sha256 of ``data``.

    >>> sha256_of(b"")[:8]
    'e3b0c442'
    """
    return hashlib.sha256(data).hexdigest()


def _canonical(body: dict[str, object]) -> str:
    """The text the checksum and the signature cover."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _canonical_checksum(body: dict[str, object]) -> str:
    return sha256_of(_canonical(body).encode())


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_chains(d: dict[str, Any]) -> None:
    """Format 3: ``chains`` maps a node id to its delta's parent and base epochs."""
    chains = d.get("chains")
    if not isinstance(chains, dict):
        raise ManifestError(f"manifest field 'chains' must be an object, got {chains!r}")
    for nid, link in chains.items():
        if nid not in d["state"]:
            raise ManifestError(f"manifest chain of {nid!r} has no state entry")
        if not isinstance(link, dict) or not {"parent", "base"} <= set(link):
            raise ManifestError(f"manifest chain of {nid!r} must have 'parent' and 'base'")
        parent, base = link["parent"], link["base"]
        if parent is not None and (not _is_int(parent) or not 0 < parent < d["epoch"]):
            raise ManifestError(
                f"manifest chain of {nid!r}: 'parent' must be an earlier epoch or null, "
                f"got {parent!r}"
            )
        if not _is_int(base) or base > d["epoch"] or (parent is None) != (base == d["epoch"]):
            raise ManifestError(
                f"manifest chain of {nid!r}: 'base' {base!r} does not fit parent {parent!r}"
            )


def _check_files(d: dict[str, Any]) -> None:
    """``files`` (format 5): node id -> attribute -> file name -> ``{"sha256", "size"}``."""
    if "files" not in d:
        return
    files = d["files"]
    if d["format"] < FILES_FORMAT or not isinstance(files, dict) or not files:
        raise ManifestError(
            f"manifest field 'files' must be a non-empty object (format {FILES_FORMAT}), "
            f"got {str(files)[:200]} in format {d['format']}"
        )
    for nid, attrs in files.items():
        if nid not in d["state"]:
            raise ManifestError(f"manifest files of {nid!r} have no state entry")
        if not isinstance(attrs, dict) or not attrs:
            raise ManifestError(f"manifest files of {nid!r} must be an object, got {attrs!r}")
        for attr, names in attrs.items():
            if not isinstance(names, dict) or not names:
                raise ManifestError(
                    f"manifest files of {nid!r}/{attr!r} must be an object, got {names!r}"
                )
            for name, info in names.items():
                _check_file_entry(f"{nid}/{attr}/{name}", name, info)


def _check_file_entry(where: str, name: object, info: Any) -> None:
    if not isinstance(name, str) or not _FILE_NAME.fullmatch(name):
        raise ManifestError(f"manifest file {where!r}: not a plain file name")
    ok = isinstance(info, dict) and set(info) - {"inline"} == {"sha256", "size"}
    ok = ok and info.get("inline", True) is True
    ok = ok and isinstance(info["sha256"], str) and bool(_HEX64.fullmatch(info["sha256"]))
    ok = ok and _is_int(info["size"]) and info["size"] >= 0
    if not ok:
        raise ManifestError(
            f'manifest file {where!r} must be {{"sha256": <64 hex>, "size": <bytes>}} '
            f'(and "inline": true for a file inside the state file), got {info!r}'
        )


def _check_savepoint(d: dict[str, Any]) -> None:
    """``savepoint`` (format 4, optional) is ``true`` and its keyed states are bases."""
    if "savepoint" not in d:
        return
    if d["format"] < DATA_FORMAT or d["savepoint"] is not True:
        raise ManifestError(
            f"manifest field 'savepoint' must be true (format {DATA_FORMAT}), "
            f"got {d['savepoint']!r} in format {d['format']}"
        )
    for nid, link in d.get("chains", {}).items():
        if link["parent"] is not None:
            raise ManifestError(
                f"manifest of savepoint {d['epoch']}: the state of {nid!r} is a delta on "
                f"checkpoint {link['parent']!r}; a savepoint holds a base of every state"
            )


def _check_run(d: dict[str, Any]) -> None:
    """``run`` (optional) is ``{"started": number, "resumed_from": epoch or null}``."""
    if "run" not in d:
        return
    run = d["run"]
    ok = isinstance(run, dict) and set(run) == {"started", "resumed_from"}
    ok = ok and isinstance(run["started"], (int, float)) and not isinstance(run["started"], bool)
    resumed = run.get("resumed_from") if isinstance(run, dict) else None
    ok = ok and (resumed is None or (_is_int(resumed) and 0 <= resumed < d["epoch"]))
    if not ok:
        raise ManifestError(
            'manifest field \'run\' must be {"started": <time>, "resumed_from": '
            f"<an earlier epoch> or null}}, got {run!r}"
        )


def _check_renamed(d: dict[str, object]) -> None:
    """``renamed`` (optional) maps node ids to node ids: ``{"new-id": "old-id"}``."""
    renamed = d.get("renamed", {})
    ok = isinstance(renamed, dict) and all(
        isinstance(k, str) and isinstance(v, str) and k and v for k, v in renamed.items()
    )
    if not ok:
        raise ManifestError(
            f'manifest field \'renamed\' must be {{"new-id": "old-id", ...}}, got {renamed!r}'
        )


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_timing(d: dict[str, Any]) -> None:
    """``timing`` (optional) is ``{"duration": seconds, "pause": seconds}``, and since
    the write is timed apart also ``"write": seconds``."""
    if "timing" not in d:
        return
    t = d["timing"]
    ok = isinstance(t, dict) and set(t) in ({"duration", "pause"}, {"duration", "pause", "write"})
    if not (ok and all(_is_number(v) and v >= 0 for v in t.values())):
        raise ManifestError(
            'manifest field \'timing\' must be {"duration": <seconds>, "pause": <seconds>, '
            '"write": <seconds>}, '
            f"got {t!r}"
        )


def _check_counts(d: dict[str, object]) -> None:
    """``counts`` (optional) maps node ids to ``[records in, records out]``, and since
    format 4's second form also errors raised, skipped, handled and late records."""
    if "counts" not in d:
        return
    counts = d["counts"]
    ok = isinstance(counts, dict) and all(
        isinstance(v, list) and len(v) in (2, 6) and all(_is_int(x) and x >= 0 for x in v)
        for v in counts.values()
    )
    if not ok:
        raise ManifestError(
            "manifest field 'counts' must map node ids to [<records in>, <records out>] or "
            "[<in>, <out>, <errors raised>, <skipped>, <handled>, <late records>], "
            f"got {str(counts)[:200]}"
        )


def _check_schema(d: dict[str, Any]) -> None:
    """Raise :class:`ManifestError` naming the first missing or mistyped field."""
    for key in _FIELDS:
        if key not in d:
            raise ManifestError(f"manifest has no {key!r} field")
    if not _is_int(d["epoch"]) or d["epoch"] < 0:
        raise ManifestError(f"manifest field 'epoch' must be an integer >= 0, got {d['epoch']!r}")
    if not (_is_int(d["time"]) or isinstance(d["time"], float)):
        raise ManifestError(f"manifest field 'time' must be a number, got {d['time']!r}")
    for key in ("fingerprint", "positions", "sinks", "state"):
        if not isinstance(d[key], dict):
            raise ManifestError(
                f"manifest field {key!r} must be an object, got {type(d[key]).__name__}"
            )
    for nid, sig in d["fingerprint"].items():
        if not isinstance(sig, str):
            raise ManifestError(f"manifest fingerprint of {nid!r} must be a string, got {sig!r}")
    for nid, info in d["state"].items():
        _check_state_entry(nid, info)


def _check_state_entry(nid: str, info: object) -> None:
    """Raise :class:`ManifestError` if a node's entry in the manifest's ``state`` is malformed."""
    if not isinstance(info, dict):
        raise ManifestError(f"manifest state entry {nid!r} must be an object, got {info!r}")
    for key in ("file", "size", "sha256"):
        if key not in info:
            raise ManifestError(f"manifest state entry {nid!r} has no {key!r}")
    if not isinstance(info["file"], str) or not info["file"]:
        raise ManifestError(
            f"manifest state entry {nid!r}: 'file' must be a name, got {info['file']!r}"
        )
    if not _is_int(info["size"]) or info["size"] < 0:
        raise ManifestError(
            f"manifest state entry {nid!r}: 'size' must be an integer >= 0, got {info['size']!r}"
        )
    if not isinstance(info["sha256"], str) or not _HEX64.fullmatch(info["sha256"]):
        raise ManifestError(
            f"manifest state entry {nid!r}: 'sha256' must be 64 hex digits, got {info['sha256']!r}"
        )


def _parsed(text: str | bytes) -> object:
    """The JSON value of a manifest's text (:class:`ManifestError` if it is none)."""
    try:
        return json.loads(text)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise ManifestError(f"manifest is not valid JSON ({e})") from None
    except RecursionError:  # arrays or objects nested deeper than Python's stack
        raise ManifestError("manifest is JSON nested too deeply to be one") from None


@dataclass
class Manifest:
    """What one checkpoint holds (see the module docs for the JSON layout).

    >>> m = Manifest(epoch=3, time=0.0, fingerprint={}, positions={"s": 7})
    >>> Manifest.from_json(m.to_json()).positions
    {'s': 7}
    >>> Manifest.from_json(m.to_json().replace('"s": 7', '"s": 8'))
    Traceback (most recent call last):
    ...
    rivermark.checkpoint.errors.ManifestError: manifest checksum mismatch: ...
    """

    epoch: int
    time: float
    fingerprint: dict[str, str]
    positions: dict[str, Any] = field(default_factory=dict)
    sinks: dict[str, Any] = field(default_factory=dict)
    state: dict[str, dict[str, Any]] = field(default_factory=dict)
    format: int = FORMAT_VERSION
    #: node id -> ``{"parent": epoch | None, "base": epoch}`` for state written
    #: as a delta on top of ``parent``'s (``None``: a base); see ``KeyedState``
    chains: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: ``{"key": key id, "hmac": hex}`` of a signed manifest (see :mod:`.signing`)
    signature: dict[str, Any] | None = None
    #: a checkpoint the user asked for: never pruned, every keyed state a base
    savepoint: bool = False
    #: ``{"started": unix time, "resumed_from": epoch | None}`` of the run that wrote it
    run: dict[str, Any] | None = None
    #: ``{"duration": s, "pause": s}`` up to the commit (see the module docs)
    timing: dict[str, float] | None = None
    #: node id -> ``[records in, records out]`` since the job first started
    counts: dict[str, list[int]] | None = None
    #: node id -> attribute -> file name -> ``{"sha256", "size"}`` (RocksDB state,
    #: format 5); filled while the checkpoint is written, before the manifest
    files: dict[str, dict[str, dict[str, dict[str, Any]]]] = field(default_factory=dict)
    #: node id -> the id its state was stored under before a rename (carried on)
    renamed: dict[str, str] = field(default_factory=dict)
    #: called when the manifest is serialised, gives ``timing`` (the job sets it)
    timer: Callable[[], dict[str, float]] | None = field(default=None, repr=False, compare=False)
    #: the canonical text the checksum (and signature) of a parsed manifest cover
    canonical: str = field(default="", repr=False, compare=False)
    #: set by the store that loaded it: ``ok``, ``unsigned``, ``foreign-signed``,
    #: ``bad-signature``, or ``unchecked`` (signed, and the reader has no key)
    signature_status: str = field(default="unsigned", compare=False)

    def _body(self) -> dict[str, object]:
        raw: dict[str, Any] = {
            "format": FILES_FORMAT if self.files else FORMAT_VERSION,
            "epoch": self.epoch,
            "time": self.time,
            "fingerprint": self.fingerprint,
            "positions": self.positions,
            "sinks": self.sinks,
            "state": self.state,
        }
        raw["chains"] = self.chains
        if self.savepoint:
            # only when set: an ordinary checkpoint's text is what it always was
            raw["savepoint"] = True
        if self.run is not None:
            raw["run"] = self.run
        if self.timing is not None:
            raw["timing"] = self.timing
        if self.counts is not None:
            raw["counts"] = self.counts
        if self.files:
            raw["files"] = self.files
        if self.renamed:
            raw["renamed"] = self.renamed
        # what a reader will see (string keys, lists for tuples): the checksum
        # is taken over that, so it matches after a round trip
        body: dict[str, Any] = json.loads(json.dumps(raw))
        return body

    def to_json(self, keyring: Keyring | None = None) -> str:
        """The manifest as JSON, always in the current format, with its checksum.

        With a ``keyring`` it is signed with the keyring's first key.  With a
        ``timer``, ``timing`` is taken now.
        """
        if self.timer is not None:
            self.timing = {k: round(v, 6) for k, v in self.timer().items()}
        body = self._body()
        canonical = _canonical(body)
        body["checksum"] = sha256_of(canonical.encode())
        if keyring is not None:
            body["signature"] = keyring.sign(canonical)
        return json.dumps(body, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        """Parse and check a manifest; raise :class:`ManifestError` if it is damaged."""
        d = _parsed(text)
        if not isinstance(d, dict):
            raise ManifestError(f"manifest must be a JSON object, got {type(d).__name__}")
        fmt = d.get("format")
        if not _is_int(fmt):
            raise ManifestError(f"manifest field 'format' must be an integer, got {fmt!r}")
        if fmt not in READABLE_FORMATS:
            raise ManifestFormatError(
                f"manifest format {fmt!r} is not one this version of rivermark reads "
                f"({', '.join(map(str, READABLE_FORMATS))}); it was written by a newer "
                "rivermark (upgrade to resume from it) or is damaged"
            )
        checksum = d.pop("checksum", None)
        signature = d.pop("signature", None)
        if signature is not None and fmt < DATA_FORMAT:
            raise ManifestError(f"manifest format {fmt} cannot carry a 'signature'")
        if fmt >= 2 and checksum is None:
            raise ManifestError("manifest has no 'checksum' field")
        _check_schema(d)
        if fmt >= CHAINS_FORMAT:
            _check_chains(d)
        _check_savepoint(d)
        _check_run(d)
        _check_timing(d)
        _check_counts(d)
        _check_files(d)
        _check_renamed(d)
        if checksum is not None:
            actual = _canonical_checksum(d)
            if checksum != actual:
                raise ManifestError(
                    f"manifest checksum mismatch: it records {str(checksum)[:16]!r}..., its "
                    f"content hashes to {actual[:16]!r}... (edited or damaged)"
                )
        else:
            logger.info("manifest of epoch %s is format 1: no checksum to verify", d["epoch"])
        return cls(
            epoch=d["epoch"],
            time=float(d["time"]),
            fingerprint=dict(d["fingerprint"]),
            positions=dict(d["positions"]),
            sinks=dict(d["sinks"]),
            state={k: dict(v) for k, v in d["state"].items()},
            format=fmt,
            chains={k: dict(v) for k, v in d.get("chains", {}).items()},
            signature=signature,
            savepoint=d.get("savepoint", False),
            run=dict(d["run"]) if "run" in d else None,
            timing=dict(d["timing"]) if "timing" in d else None,
            counts={k: list(v) for k, v in d["counts"].items()} if "counts" in d else None,
            files=d.get("files", {}),
            renamed=dict(d.get("renamed", {})),
            canonical=_canonical(d),
        )

    @property
    def total_size(self) -> int:
        return sum(int(s["size"]) for s in self.state.values())

    def shared_files(self) -> dict[str, int]:
        """Every shared file this checkpoint needs: sha256 -> size (see ``files``).

        A file marked ``inline`` is inside the node's state file, not shared.
        """
        return {
            info["sha256"]: int(info["size"])
            for attrs in self.files.values()
            for names in attrs.values()
            for info in names.values()
            if not info.get("inline")
        }
