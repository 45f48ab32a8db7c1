"""The README's demo: a job is killed with SIGKILL, resumes, and is exact.

1. writes 200,000 JSON events into ``demo-output/events.jsonl``;
2. runs ``examples/demo_app.py`` once without interruption (the reference);
3. runs it again, killing the process at random moments and restarting it
   from its checkpoint directory until it finishes;
4. compares the two output files byte for byte.
"""

from __future__ import annotations

import filecmp
import json
import os
import random
import shutil
import sys
from pathlib import Path

from rivermark.testing.crash import run_uncrashed, run_with_crashes

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
        sys.executable,
        "-m",
        "rivermark.cli",
        "run",
        f"{app}:totals",
        "--checkpoint",
        str(checkpoint),
        "--every",
        "0.2s",
    ]


def main() -> int:
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    events = OUT / "events.jsonl"
    n = int(os.environ.get("RIVERMARK_DEMO_EVENTS", "200000"))
    write_events(events, n)
    print(f"wrote {n} events to {events}")

    env = dict(os.environ, RIVERMARK_DEMO_INPUT=str(events))
    reference = OUT / "reference.jsonl"
    run_uncrashed(
        command(OUT / "ckpt-reference"), env=dict(env, RIVERMARK_DEMO_OUTPUT=str(reference))
    )
    print(f"uncrashed run wrote {reference.stat().st_size} bytes")

    crashed = OUT / "crashed.jsonl"
    report = run_with_crashes(
        command(OUT / "ckpt-crashed"),
        env=dict(env, RIVERMARK_DEMO_OUTPUT=str(crashed)),
        kills=5,
        min_delay=0.3,
        max_delay=1.5,
    )
    print(f"crashed run: {report}")
    same = filecmp.cmp(reference, crashed, shallow=False)
    print("outputs are byte-identical: exact resume" if same else "OUTPUTS DIFFER")
    # the full path of the command: it works without activating the virtualenv
    rivermark = Path(sys.executable).parent / "rivermark"
    print(f"inspect the checkpoints with: {rivermark} checkpoints list {OUT / 'ckpt-crashed'}")
    return 0 if same and report.completed else 1


if __name__ == "__main__":
    sys.exit(main())
