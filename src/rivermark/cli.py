"""The ``rivermark`` command: run an app as a checkpointed job, inspect checkpoints.

``rivermark run path/to/app.py:name --checkpoint DIR [--every 2s] [--keep N]``
imports the script, takes the graph that the module-level variable ``name``
belongs to and runs it as a :class:`rivermark.checkpoint.Job`.  It exits 0
once every source is exhausted and the final checkpoint is written; SIGTERM
and Ctrl-C stop it gracefully (final checkpoint, exit 0).

``rivermark checkpoints list|show|verify|diff DIR [EPOCH [EPOCH2]]`` lists,
describes, verifies (exit 1 if any checkpoint is damaged) and compares
checkpoints; they are read-only (``rivermark.checkpoint.inspect``).
``--from-scratch`` starts over explicitly (``docs/checkpointing.md``).

>>> import tempfile
>>> main(["checkpoints", "list", tempfile.mkdtemp()])
2
"""

from __future__ import annotations

import argparse
import logging
import sys

from ._app import load_app, parse_every
from .checkpoint import Job, inspect
from .errors import RivermarkError

logger = logging.getLogger(__name__)

__all__ = ["main"]


def _cmd_run(args: argparse.Namespace) -> int:
    node = load_app(args.target)
    job = Job(
        node,
        checkpoint=args.checkpoint,
        every=parse_every(args.every),
        keep=args.keep,
        from_scratch=args.from_scratch,
    )
    job.install_signal_handlers()
    job.run()
    return 0


def _cmd_checkpoints(args: argparse.Namespace) -> int:
    if args.action == "diff":
        report = inspect.diff_checkpoints(args.dir, args.epoch, args.epoch2)
    elif args.action == "show":
        report = inspect.show_checkpoint(args.dir, args.epoch)
    elif args.action == "verify":
        report = inspect.verify_checkpoints(args.dir, args.epoch)
    else:
        report = inspect.list_checkpoints(args.dir)
    for line in report.out:
        print(line)
    for line in report.err:
        print(f"rivermark: {line}", file=sys.stderr)
    return report.status


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rivermark", description="rivermark stream jobs")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run path/to/app.py:name as a checkpointed job")
    run.add_argument("target", help="path/to/app.py:name")
    run.add_argument(
        "--checkpoint", required=True, help="checkpoint directory or URL (s3://bucket/prefix)"
    )
    run.add_argument(
        "--every",
        default="2s",
        help="checkpoint interval (e.g. 2s, 200ms; 0 or none: only at start and end)",
    )
    run.add_argument("--keep", type=int, default=10, help="checkpoints to keep")
    run.add_argument(
        "--from-scratch",
        action="store_true",
        help="set every checkpoint aside and start over, sinks included (empties output files)",
    )
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
        msg = str(e)
        print(msg if msg.startswith("rivermark") else f"rivermark: {msg}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        logger.debug("rivermark failed", exc_info=True)
        print(f"rivermark: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
