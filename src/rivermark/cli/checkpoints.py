"""``rivermark checkpoints list|show|export|verify|resign|prune|diff DIR``: read-only tools.

Each subcommand is a thin wrapper: the work is done by
:mod:`rivermark.checkpoint.tools.inspection` and by the small ``_do_*`` functions
here, which print.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from rivermark.checkpoint import CheckpointCorruptError
from rivermark.checkpoint.protocol.upgrade import plan_restore
from rivermark.checkpoint.tools import inspection as insp
from rivermark.cli.group import cli, damaged, no_checkpoints, open_store, print_json
from rivermark.cli.options import (
    dir_argument,
    epoch_argument,
    json_option,
    load_with_upgrades,
    logged,
    logging_options,
    trust_option,
    upgrade_options,
)

__all__ = ["checkpoints"]


def _duration_text(value: float | None) -> str:
    """``0.042 s``, or ``-`` when the checkpoint did not record it."""
    return "-" if value is None else f"{value:.3f} s"


def _do_list(directory: str, as_json: bool) -> int:
    store = open_store(directory)
    rows = insp.list_checkpoints(store)
    if as_json:
        print_json(rows)
        return 0
    if not rows:
        print("no checkpoints")
        return 0
    print(
        f"{'EPOCH':>12}  {'TIME (UTC)':<24}  {'KIND':<9}  {'END TO END':>10}  {'WRITE':>9}  "
        f"{'PAUSE':>9}  "
        f"{'STATE BYTES':>17}  {'SOURCES':>7}  RUN"
    )
    for r in rows:
        if r["error"] is not None:
            print(f"{r['epoch']:>12}  DAMAGED: {r['error']}")
        else:
            began = f"  {r['run_began']}" if r["run_began"] else ""
            print(
                f"{r['epoch']:>12}  {insp.format_time(r['time']):<24}  {r['kind']:<9}  "
                f"{_duration_text(r['duration']):>10}  {_duration_text(r['write']):>9}  "
                f"{_duration_text(r['pause']):>9}  "
                f"{r['size']:>11} bytes  {r['sources']:>7}{began}"
            )
    return 0


def _do_prune(directory: str, keep: int, dry_run: bool, as_json: bool) -> int:
    store = open_store(directory)
    if not store.list_epochs():
        return no_checkpoints(store)
    result = insp.prune_checkpoints(store, keep, dry_run)
    if as_json:
        print_json({**result, "dry_run": dry_run})
        return 0
    verb = "would delete" if dry_run else "deleted"
    gone = ", ".join(map(str, result["deleted"])) or "nothing"
    print(f"{verb} {gone}; kept {', '.join(map(str, result['kept']))}")
    return 0


def _do_show(
    directory: str,
    epoch: int | None,
    state: str | None,
    max_chars: int,
    as_json: bool,
    trust_store: bool = False,
) -> int:
    store = open_store(directory, trust_store)
    if not store.list_epochs():
        return no_checkpoints(store)
    try:
        if state is not None:
            value = insp.read_node_state(store, epoch, state)
            if as_json:
                print_json(value)
            else:
                print(insp.render_value(value, max_chars))
            return 0
        info = insp.show_checkpoint(store, epoch)
    except CheckpointCorruptError as err:
        return damaged(err)
    if as_json:
        print_json(info)
    else:
        _print_checkpoint(info)
    return 0


def _print_checkpoint(info: dict[str, Any]) -> None:
    """``rivermark checkpoints show``'s text: positions and their meaning, state, sinks."""
    print(f"checkpoint {info['epoch']} at {insp.format_time(info['time'])}")
    for sid, pos in info["positions"].items():
        value = pos["value"]
        if isinstance(value, dict):
            for part, off in sorted(value.items(), key=lambda kv: str(kv[0])):
                print(f"  position {sid}[{part}] = {off!r}")
        else:
            print(f"  position {sid} = {value!r}")
        for line in pos["meaning"]:
            print(f"    {line}")
    for nid, meta in info["state"].items():
        print(f"  state {nid}: {meta['size']} bytes sha256={meta['sha256'][:12]}")
        chain = info["chains"].get(nid)
        if chain is not None:
            print(
                f"    delta chain: base {chain['base']} ({chain['base_size']} bytes) + "
                f"{len(chain['deltas'])} delta(s) ({chain['delta_size']} bytes)"
            )
        for attr, files in info.get("rocks", {}).get(nid, {}).items():
            print(f"    {attr!r} in RocksDB: {files['files']} files, {files['bytes']:,} bytes")
    for kid, handle in info["sinks"].items():
        print(f"  sink {kid}: {handle!r}")


#: how ``verify`` names each problem
_PROBLEM = {
    "damaged": "DAMAGED",
    "unsigned": "UNSIGNED",
    "foreign-signed": "FOREIGN-SIGNED",
    "bad-signature": "BAD SIGNATURE",
    "untrusted": "UNTRUSTED",
}


def _verify_line(r: dict[str, Any]) -> str:
    if r.get("superseded"):
        what = "savepoint" if r["savepoint"] else "checkpoint"
        then = (
            "a savepoint is never pruned: delete it, or re-sign it with "
            "'rivermark checkpoints resign' while its key is still among the old keys"
            if r["savepoint"]
            else "it goes when pruned"
        )
        return (
            f"{r['epoch']:>12}  {_PROBLEM[r['problem']]} (older than every signed checkpoint: "
            f"a {what} from before the key was set or rotated, never resumed from with the "
            f"key; not a failure; {then})"
        )
    if not r["ok"]:
        return f"{r['epoch']:>12}  {_PROBLEM[r['problem']]}: {r['error']}"
    sig = {"ok": ", signed", "unchecked": ", signed (not checked: no key)"}
    return f"{r['epoch']:>12}  ok{sig.get(r['signature'], '')}"


def _do_verify(
    directory: str, epoch: int | None, as_json: bool, trust_store: bool = False, deep: bool = False
) -> int:
    store = open_store(directory, trust_store)
    results = insp.verify_checkpoints(store, epoch, deep)
    if not results:
        return no_checkpoints(store)
    failed = any(not (r["ok"] or r["superseded"]) for r in results)
    if as_json:
        print_json(results)
        return 1 if failed else 0
    for r in results:
        print(_verify_line(r))
    if epoch is None:
        for leftover in sorted(store.list_incomplete()):
            if leftover.name.isdigit():
                print(
                    f"{int(leftover.name):>12}  not a checkpoint: {leftover} has no manifest "
                    "(a torn write, or put there by hand); a run skips its number and deletes "
                    "it after its next checkpoint"
                )
        good = [r["epoch"] for r in results if r["ok"]]
        # a job skips what fails its checks, and stops at state it may not or cannot read
        first = next((r for r in reversed(results) if r["ok"] or r.get("refused")), None)
        if first is not None and not first["ok"]:
            print(
                f"{len(good)} of {len(results)} verify; a job refuses to start at "
                f"{first['epoch']} (see its line)"
            )
        elif good:
            print(f"{len(good)} of {len(results)} verify; a job resumes from {good[-1]}")
        else:
            print(
                f"none of {len(results)} verifies; a job refuses to start (restore a good "
                "copy, or run with --from-scratch)"
            )
    if store.trust.keyring is None and any(r["signature"] == "unsigned" for r in results):
        print(
            "checkpoints are not signed: set RIVERMARK_CHECKPOINT_KEY to sign them "
            "(see docs/security.md)"
        )
    return 1 if failed else 0


def _do_diff(directory: str, a: int | None, b: int | None, as_json: bool) -> int:
    store = open_store(directory)
    if not store.list_epochs():
        return no_checkpoints(store)
    try:
        d = insp.diff_checkpoints(store, a, b)
    except CheckpointCorruptError as err:
        return damaged(err)
    if as_json:
        print_json(d)
        return 0
    print(f"diff {d['from']} -> {d['to']}")
    for sid in d["positions"]:
        print(f"  position {sid}: {d['moved'][sid]['text']}")
    for nid, sizes in d["state"].items():
        print(f"  state {nid}: {_state_change(sizes, d['entries'][nid])}")
    for kid, (ha, hb) in d["sinks"].items():
        print(f"  sink {kid}: {ha!r} -> {hb!r}")
    if d["fingerprint_differs"]:
        print("  graph fingerprint differs")
    return 0


def _state_change(sizes: list[int | None], entries: list[int | None]) -> str:
    """A node's state from one checkpoint to another, for a person.

    >>> _state_change([9471, 14471], [2000, 3000])
    'grew by 1,000 entries (2,000 -> 3,000), 9471 -> 14471 bytes'
    >>> _state_change([16, 16], [None, None])
    '16 -> 16 bytes (contents differ)'
    >>> _state_change([None, 20], [None, 0])
    'new in the later checkpoint, 20 bytes'
    """
    (sa, sb), (ka, kb) = sizes, entries
    if sa is None:
        return f"new in the later checkpoint, {sb} bytes"
    if sb is None:
        return f"gone from the later checkpoint (was {sa} bytes)"
    if ka is None or kb is None or ka == kb:
        same = f"{ka:,} entries, " if ka is not None and ka == kb else ""
        return f"{same}{sa} -> {sb} bytes (contents differ)"
    how = "grew" if kb > ka else "shrank"
    return f"{how} by {abs(kb - ka):,} entries ({ka:,} -> {kb:,}), {sa} -> {sb} bytes"


def _do_diff_against(directory: str, target: str, opts: dict[str, Any], as_json: bool) -> int:
    store = open_store(directory)
    node, rules = load_with_upgrades(target, opts)
    manifest = None
    for e in reversed(store.list_epochs()):
        try:
            manifest = store.load_chains(e)[0]
            break
        except CheckpointCorruptError as err:
            print(f"rivermark: skipping damaged checkpoint {e}: {err}", file=sys.stderr)
    if manifest is None:
        return no_checkpoints(store)
    plan = plan_restore(manifest, node, rules)
    ok = not plan.refused
    if as_json:
        print_json(
            {
                "epoch": plan.epoch,
                "restore": "would start" if ok else "refused",
                "nodes": [d.as_dict() for d in plan.decisions],
            }
        )
    else:
        print(f"checkpoint {plan.epoch} of {insp.where(store)} into {target}:")
        for d in plan.decisions:
            print(f"  {d.action}: {d.node}: {d.detail}")
        print("the restore would start" if ok else "the restore would be refused")
    return 0 if ok else 2


@cli.group("checkpoints")
@logging_options
def checkpoints() -> None:
    """Inspect a checkpoint directory (no job needs to be running on it)."""


@checkpoints.command("list")
@dir_argument
@json_option
@logged
def list_command(directory: str, as_json: bool) -> int:
    """List the checkpoints in DIR: epoch, time, state size, sources."""
    return _do_list(directory, as_json)


@checkpoints.command("show")
@dir_argument
@epoch_argument
@click.option(
    "--state",
    metavar="NODE",
    help="Print the state of node NODE (decoded, pretty-printed); node ids are listed "
    "by 'show' without --state.",
)
@click.option(
    "--max-chars",
    type=click.IntRange(min=0),
    default=2000,
    show_default=True,
    help="Cut the printed state after this many characters (0: never).",
)
@trust_option
@json_option
@logged
def show_command(
    directory: str,
    epoch: int | None,
    state: str | None,
    max_chars: int,
    trust_store: bool,
    as_json: bool,
) -> int:
    """Describe checkpoint EPOCH of DIR (default: the newest).

    Prints each source's position with its meaning (file, line and bytes
    left; Kafka topic, partition and offset), the state files and the sink
    handles.
    """
    return _do_show(directory, epoch, state, max_chars, as_json, trust_store)


def _jsonable(value: Any) -> Any:
    """A value of a state row as JSON has it: numpy scalars as numbers, times as ISO text."""
    # optional: numpy scalars have .item() and .shape, other values do not
    item = getattr(value, "item", None)
    # optional: only a numpy scalar has a shape (of ())
    if callable(item) and getattr(value, "shape", None) == ():
        return item()
    # optional: dates and times have .isoformat(), other values do not
    iso = getattr(value, "isoformat", None)
    if callable(iso):
        return iso()
    return repr(value)


def _do_export(
    directory: str, node: str, epoch: int | None, fmt: str, output: str | None, trust: bool
) -> int:
    store = open_store(directory, trust)
    if not store.list_epochs():
        return no_checkpoints(store)
    if fmt == "parquet" and output is None:
        raise click.UsageError("--format parquet writes a file: give --output FILE")
    try:
        rows = insp.state_rows(insp.read_node_state(store, epoch, node, as_pandas=True))
    except CheckpointCorruptError as err:
        return damaged(err)
    if fmt == "jsonl":
        lines = "".join(json.dumps(r, default=_jsonable) + "\n" for r in rows)
        if output is None:
            sys.stdout.write(lines)
        else:
            Path(output).write_text(lines, encoding="utf-8")
        return 0
    import pandas as pd

    try:
        pd.DataFrame(rows).to_parquet(output, index=False)
    except ImportError:
        raise click.UsageError(
            "--format parquet needs pyarrow: pip install pyarrow, or use --format jsonl"
        ) from None
    except (TypeError, ValueError) as e:  # pyarrow cannot type a column of mixed values
        raise click.UsageError(
            f"the state of {node!r} does not fit a parquet table ({e}); use --format jsonl"
        ) from None
    return 0


@checkpoints.command("export")
@dir_argument
@click.argument("node", metavar="NODE")
@click.option("--epoch", type=int, default=None, help="The checkpoint (default: the newest).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "parquet"]),
    default="jsonl",
    show_default=True,
    help="One JSON object a line, or a parquet file (needs pyarrow).",
)
@click.option("--output", "-o", metavar="FILE", help="Write to FILE (jsonl: default stdout).")
@trust_option
@logged
def export_command(
    directory: str,
    node: str,
    epoch: int | None,
    fmt: str,
    output: str | None,
    trust_store: bool,
) -> int:
    """Write the state of NODE in a checkpoint of DIR as rows, for people and notebooks.

    A keyed or accumulated mapping gives one row per key (key, value), a
    list one per item (index, value), a DataFrame groupby aggregation the
    rows of its value by key (a mean, variance or deviation: its running
    parts, as 'sum.x', 'count.x' columns).
    Reads the store only; pickled state only as 'show --state' does.
    """
    return _do_export(directory, node, epoch, fmt, output, trust_store)


@checkpoints.command("verify")
@dir_argument
@epoch_argument
@trust_option
@json_option
@click.option(
    "--deep",
    is_flag=True,
    help="Also read every shared file of RocksDB state and check its sha256 "
    "(by default its size, as a job's start does).",
)
@logged
def verify_command(
    directory: str, epoch: int | None, trust_store: bool, as_json: bool, deep: bool
) -> int:
    """Verify every checkpoint in DIR (or EPOCH); exit 1 if one fails.

    Checks checksums and, with the job's checkpoint key in the environment
    (RIVERMARK_CHECKPOINT_KEY, RIVERMARK_CHECKPOINT_KEY_FILE), signatures:
    unsigned, foreign-signed and bad-signature checkpoints fail.  State holding
    pickled objects fails unless its checkpoint's signature verified or
    --trust-store is given: loading it would run code.
    """
    return _do_verify(directory, epoch, as_json, trust_store, deep)


@checkpoints.command("resign")
@dir_argument
@click.option("--dry-run", is_flag=True, help="Say what would be re-signed; change nothing.")
@trust_option
@json_option
@logged
def resign_command(directory: str, dry_run: bool, trust_store: bool, as_json: bool) -> int:
    """Sign with the new key every checkpoint of DIR that an old key signed (a key rotation).

    Reads the keys as a job does (RIVERMARK_CHECKPOINT_KEY_FILE: the new key
    first, the old ones after it).  Savepoints, which pruning never deletes,
    are re-signed too, so the old key can be dropped; with --trust-store,
    unsigned checkpoints (from before the key was set) are signed as well.
    Refused while a job runs on DIR.  Exit 1 if a checkpoint was left as it
    is because it does not verify.
    """
    store = open_store(directory, trust_store)
    if not store.list_epochs():
        return no_checkpoints(store)
    rows = insp.resign_checkpoints(store, dry_run)
    if as_json:
        print_json({"checkpoints": rows, "dry_run": dry_run})
    else:
        verb = "would re-sign" if dry_run else "re-signed"
        for r in rows:
            if r["action"] == "resigned":
                print(f"{r['epoch']:>12}  {verb} (was {r['was']})")
            elif r["action"] == "kept":
                print(f"{r['epoch']:>12}  already signed with the new key")
            else:
                print(f"{r['epoch']:>12}  left as it is: {r['error']}")
    return 1 if any(r["action"] == "refused" for r in rows) else 0


@checkpoints.command("prune")
@dir_argument
@click.option(
    "--keep",
    type=click.IntRange(min=1),
    required=True,
    help="How many of the newest checkpoints to keep.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be deleted; delete nothing.")
@json_option
@logged
def prune_command(directory: str, keep: int, dry_run: bool, as_json: bool) -> int:
    """Delete all but the newest --keep checkpoints of DIR.

    A checkpoint that a kept one builds on (the base and deltas of its keyed
    state) is kept too, so every checkpoint left restores.  Refused while a
    job runs on DIR: a running job prunes to its own keep= itself.
    """
    return _do_prune(directory, keep, dry_run, as_json)


@checkpoints.command("diff")
@dir_argument
@epoch_argument
@click.argument("epoch2", type=int, required=False)
@click.option(
    "--against",
    metavar="APP.py:NAME",
    help="Instead: say what restoring the newest checkpoint into that app's graph would do "
    "(kept, renamed, dropped, added, migrated, refused; exit 2 if refused), without running it.",
)
@upgrade_options
@json_option
@logged
def diff_command(
    directory: str,
    epoch: int | None,
    epoch2: int | None,
    against: str | None,
    as_json: bool,
    **rules: object,
) -> int:
    """Compare checkpoints EPOCH and EPOCH2 of DIR (default: the last two).

    With --against APP.py:NAME (and the upgrade options of 'rivermark run'),
    print what a restore of the newest checkpoint that verifies into the
    app's graph would do, one line per node; exit 0 if it would start, 2 if
    it would be refused.  Migrations are Python and come from the app's own
    Job: a changed node shows as refused here.
    """
    if against is not None:
        if epoch is not None:
            raise click.UsageError("--against compares the newest checkpoint: give no EPOCH")
        return _do_diff_against(directory, against, rules, as_json)
    return _do_diff(directory, epoch, epoch2, as_json)
