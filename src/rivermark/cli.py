"""The ``rivermark`` command: run an app as a checkpointed job, inspect checkpoints.

``rivermark run path/to/app.py:name --checkpoint DIR [--every 2s] [--keep N]``
imports the script, takes the graph that the module-level variable ``name``
belongs to and runs it as a :class:`rivermark.checkpoint.Job`.  It exits 0
once every source is exhausted and the final checkpoint is written; SIGTERM
and Ctrl-C stop it gracefully (final checkpoint, exit 0).

``rivermark checkpoints list|show|verify|diff DIR [EPOCH [EPOCH2]]`` lists,
describes, verifies (exit 1 if any checkpoint is damaged) and compares
checkpoints.

>>> import tempfile
>>> main(["checkpoints", "list", tempfile.mkdtemp()])
no checkpoints
0
"""

from __future__ import annotations

import argparse
import logging
import runpy
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .checkpoint import CheckpointCorruptError, CheckpointNotFoundError, Job, Manifest
from .checkpoint.store import open_store
from .core.node import Stream
from .errors import RivermarkError

logger = logging.getLogger(__name__)

__all__ = ["main"]


def _load_node(target: str) -> Stream:
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise SystemExit(f"rivermark run: expected path/to/app.py:name, got {target!r}")
    if not Path(path).exists():
        raise SystemExit(f"rivermark run: no such file {path!r}")
    sys.path.insert(0, str(Path(path).resolve().parent))
    namespace = runpy.run_path(path, run_name="__rivermark_app__")
    node = namespace.get(name)
    if not isinstance(node, Stream):
        raise SystemExit(
            f"rivermark run: {name!r} in {path!r} must be a stream node, got {node!r}; "
            "name a module-level variable that holds a node of the graph"
        )
    return node


def _cmd_run(args: argparse.Namespace) -> int:
    node = _load_node(args.target)
    every: Any = None if args.every in ("none", "None", "0") else args.every
    job = Job(node, checkpoint=args.checkpoint, every=every, keep=args.keep)

    def on_signal(signum: int, frame: Any) -> None:
        logger.warning("signal %d: stopping with a final checkpoint", signum)
        threading.Thread(target=job.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    job.run()
    return 0


def _fmt_time(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def _positions(m: Manifest) -> list[str]:
    lines = []
    for sid, pos in sorted(m.positions.items()):
        if isinstance(pos, dict):
            for part, off in sorted(pos.items(), key=lambda kv: str(kv[0])):
                lines.append(f"  position {sid}[{part}] = {off!r}")
        else:
            lines.append(f"  position {sid} = {pos!r}")
    return lines


def _cmd_checkpoints(args: argparse.Namespace) -> int:
    try:
        store = open_store(args.dir, create=False)
    except CheckpointNotFoundError as missing:
        print(missing, file=sys.stderr)
        return 1
    epochs = store.list_epochs()
    if args.action == "list":
        if not epochs:
            print("no checkpoints")
        for e in epochs:
            try:
                m = store.read_manifest(e)
                print(f"{e:>12}  {_fmt_time(m.time)}  {m.total_size:>10} bytes")
            except (OSError, ValueError) as err:
                print(f"{e:>12}  unreadable manifest ({err})")
        return 0
    if args.action == "verify":
        bad = 0
        for e in epochs if args.epoch is None else [args.epoch]:
            try:
                store.verify(e)
                print(f"{e:>12}  ok")
            except CheckpointCorruptError as err:
                bad += 1
                print(f"{e:>12}  DAMAGED: {err}")
        return 1 if bad else 0
    if not epochs:
        print("no checkpoints", file=sys.stderr)
        return 1
    if args.action == "show":
        e = epochs[-1] if args.epoch is None else args.epoch
        m = store.read_manifest(e)
        print(f"checkpoint {e} at {_fmt_time(m.time)}")
        print("\n".join(_positions(m)))
        for nid, info in sorted(m.state.items()):
            print(f"  state {nid}: {info['size']} bytes sha256={info['sha256'][:12]}")
        for kid, handle in sorted(m.sinks.items()):
            print(f"  sink {kid}: {handle!r}")
        return 0
    # diff
    a = args.epoch if args.epoch is not None else (epochs[-2] if len(epochs) > 1 else epochs[-1])
    b = args.epoch2 if args.epoch2 is not None else epochs[-1]
    ma, mb = store.read_manifest(a), store.read_manifest(b)
    print(f"diff {a} -> {b}")
    for sid in sorted(set(ma.positions) | set(mb.positions)):
        pa, pb = ma.positions.get(sid), mb.positions.get(sid)
        if pa != pb:
            print(f"  position {sid}: {pa!r} -> {pb!r}")
    for nid in sorted(set(ma.state) | set(mb.state)):
        sa, sb = ma.state.get(nid), mb.state.get(nid)
        if sa != sb:
            size_a = sa["size"] if sa else None
            size_b = sb["size"] if sb else None
            print(f"  state {nid}: {size_a} -> {size_b} bytes (checksum differs)")
    for kid in sorted(set(ma.sinks) | set(mb.sinks)):
        if ma.sinks.get(kid) != mb.sinks.get(kid):
            print(f"  sink {kid}: {ma.sinks.get(kid)!r} -> {mb.sinks.get(kid)!r}")
    if ma.fingerprint != mb.fingerprint:
        print("  graph fingerprint differs")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rivermark", description="rivermark stream jobs")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run path/to/app.py:name as a checkpointed job")
    run.add_argument("target", help="path/to/app.py:name")
    run.add_argument(
        "--checkpoint", required=True, help="checkpoint directory or URL (s3://bucket/prefix)"
    )
    run.add_argument("--every", default="2s", help="checkpoint interval (e.g. 2s, 200ms, none)")
    run.add_argument("--keep", type=int, default=10, help="checkpoints to keep")
    run.set_defaults(func=_cmd_run)
    ck = sub.add_parser("checkpoints", help="inspect a checkpoint directory")
    ck.add_argument("action", choices=["list", "show", "verify", "diff"])
    ck.add_argument("dir", help="checkpoint directory or URL")
    ck.add_argument("epoch", nargs="?", type=int)
    ck.add_argument("epoch2", nargs="?", type=int)
    ck.set_defaults(func=_cmd_checkpoints)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rivermark`` command; returns the exit status."""
    args = _parser().parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO if args.verbose else logging.WARNING,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    try:
        return int(args.func(args))
    except RivermarkError as e:
        print(f"rivermark: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
