"""The README's demo: a job is killed with SIGKILL, resumes, and is exact.

1. writes 200,000 JSON events into ``demo-output/events.jsonl``;
2. runs ``examples/demo_app.py`` once without interruption (the reference);
3. runs it again, killing the process with SIGKILL at evenly spaced points
   of its progress (event ids, not wall time, so the number of kills does
   not depend on the machine's speed) and restarting it from its checkpoint
   directory each time, until it finishes;
4. compares the two output files byte for byte.

``RIVERMARK_DEMO_KILLS`` (default 5) sets the number of kills.
"""

from __future__ import annotations

import filecmp
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

from rivermark.testing.crash import run_uncrashed, run_with_kills_at

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(os.environ.get("RIVERMARK_DEMO_DIR", "demo-output")).resolve()


def write_events(path: Path, n: int) -> None:
    rng = random.Random(7)
    users = [f"user{i:02d}" for i in range(20)]
    with path.open("w") as f:
        for i in range(n):
            amount = rng.randint(-20, 100)
            f.write(json.dumps({"id": i, "user": rng.choice(users), "amount": amount}) + "\n")


def command(checkpoint: Path) -> list[str]:
    app = str(ROOT / "examples" / "demo_app.py")
    return [
        *rivermark_argv(),
        "run",
        f"{app}:totals",
        "--checkpoint",
        str(checkpoint),
        "--every",
        "0.2s",
    ]


def rivermark_argv() -> list[str]:
    """This environment's ``rivermark`` command (its entry point script), from any directory."""
    script = Path(sys.executable).parent / "rivermark"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "rivermark"]


def rivermark_command() -> str:
    """How to call this environment's ``rivermark`` from any directory."""
    return " ".join(rivermark_argv())


def main() -> int:
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    events = OUT / "events.jsonl"
    n = int(os.environ.get("RIVERMARK_DEMO_EVENTS", "200000"))
    kills = int(os.environ.get("RIVERMARK_DEMO_KILLS", "5"))
    write_events(events, n)
    print(f"wrote {n:,} events to {events}")

    env = dict(os.environ, RIVERMARK_DEMO_INPUT=str(events))
    reference = OUT / "reference.jsonl"
    started = time.monotonic()
    run_uncrashed(
        command(OUT / "ckpt-reference"), env=dict(env, RIVERMARK_DEMO_OUTPUT=str(reference))
    )
    lines = reference.read_bytes().count(b"\n")
    print(
        f"uncrashed run: {lines:,} output lines ({reference.stat().st_size:,} bytes) "
        f"in {time.monotonic() - started:.1f} s"
    )

    crashed = OUT / "crashed.jsonl"
    # kill points spread over the events, by event id: each run gets one
    points = [n * (i + 1) // (kills + 1) for i in range(kills)]
    print(f"crashed run: killing the job with SIGKILL {kills} times, at events {points} ...")
    report = run_with_kills_at(
        command(OUT / "ckpt-crashed"),
        points,
        hold_file=OUT / "hold",
        env=dict(env, RIVERMARK_DEMO_OUTPUT=str(crashed)),
    )
    print(f"crashed run: {report.summary()} (each restart resumed from its last checkpoint)")
    same = filecmp.cmp(reference, crashed, shallow=False)
    if same and report.kills >= kills:
        print(
            f"outputs are byte-identical after {report.kills} kills: exact resume, "
            "nothing lost, nothing duplicated"
        )
    elif same:
        print(f"outputs are byte-identical, but only {report.kills} of {kills} kills happened")
    else:
        print(f"OUTPUTS DIFFER: compare {reference} and {crashed}")
    print(
        "inspect the checkpoints with:\n  "
        f"{rivermark_command()} checkpoints list {OUT / 'ckpt-crashed'}"
    )
    return 0 if same and report.completed and report.kills >= kills else 1


if __name__ == "__main__":
    sys.exit(main())
