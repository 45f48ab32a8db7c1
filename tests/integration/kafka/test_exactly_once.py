from __future__ import annotations

import json
import random
import re
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from rivermark.testing import wait_for

from .helpers import consume_all, kill_runs, produce, run_in_thread, start_script

pytestmark = pytest.mark.kafka

SCRIPT = Path(__file__).with_name("eos_job.py")
N = 100_000  # as the acceptance criterion says
KEYS = 50


def test_read_committed_sees_each_result_once_across_sigkills(
    bootstrap: str, new_topic: Callable[..., str], group: str, tmp_path: Path
) -> None:
    inp, out = new_topic(partitions=4, prefix="in"), new_topic(partitions=1, prefix="out")
    records = [json.dumps({"k": i % KEYS, "i": i}) for i in range(N)]
    for p in range(4):
        produce(bootstrap, inp, records[p::4], partition=p)
    args = [bootstrap, inp, out, group, str(tmp_path / "ckpt")]
    log = tmp_path / "runs.log"
    rnd = random.Random(4)
    # faults at every point of the protocol, then random SIGKILLs
    kill_runs(SCRIPT, args, log, rnd, kills=10, alive=(1.2, 2.0), fault_timeout=60)
    # the last run goes until all output is committed
    proc = start_script(SCRIPT, args, None, log)

    def all_committed() -> bool:
        assert proc.poll() is None, log.read_text()[-3000:]
        got = consume_all(bootstrap, out, expected=N, timeout=10, committed_only=True)
        return len(got) >= N

    try:
        wait_for(all_committed, 120, f"{N} committed results", interval=1.0)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    text = log.read_text()
    msgs = consume_all(bootstrap, out, expected=N, timeout=30, committed_only=True)
    results = Counter(tuple(json.loads(m.value())) for m in msgs)
    expected = Counter((str(k), c) for k in range(KEYS) for c in range(1, N // KEYS + 1))
    dup = {r: n for r, n in results.items() if n > 1}
    assert not dup, f"duplicates: {list(dup.items())[:5]}"
    missing = expected - results
    assert not missing, f"missing {sum(missing.values())}: {list(missing)[:5]}"
    assert results == expected
    # the crash between a durable manifest and the transaction's commit was rolled forward
    rolled = [int(n) for n in re.findall(r"rolling forward: producing its (\d+) records", text)]
    assert rolled and max(rolled) > 0, text[-3000:]
    # and the kills landed in the middle of the work: the runs made progress one by one
    assert "after-manifest" in text


def test_a_producer_fenced_before_its_first_write_fails_the_job_instead_of_hanging(
    bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    # The fence is noticed by the producer's poll (not by a commit): the sink
    # must fail then, or the barrier waits for acknowledgements forever.
    import contextlib
    import threading

    import confluent_kafka as ck

    from rivermark import Stream
    from rivermark.checkpoint import Job
    from rivermark.checkpoint.errors import JobFailedError
    from rivermark.kafka import KafkaFencedError
    from rivermark.testing import wait_for

    out = new_topic(partitions=1, prefix="out")
    root = Stream(name="manual")
    sink = root.to_kafka(out, {"bootstrap.servers": bootstrap}, exactly_once=True, name="out")
    # no interval checkpoint: the first to notice the fence is the producer's poll
    job = Job(root, checkpoint=str(tmp_path / "ckpt"), every=None)
    thread, failure = run_in_thread(job)
    # the start checkpoint committed, the next transaction open
    wait_for(lambda: sink.committed_epoch == 1 and sink._in_txn, timeout=90)
    fencer = ck.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": sink.transactional_id}
    )
    fencer.init_transactions(60)
    for i in range(20):
        if sink.failure is not None:
            break
        root.emit(json.dumps({"i": i}))

    # a checkpoint asked for now must not wait for those records' acknowledgements
    def ask_checkpoint() -> None:
        with contextlib.suppress(Exception):  # it fails with the job
            job.checkpoint()

    threading.Thread(target=ask_checkpoint, daemon=True).start()
    thread.join(timeout=120)
    assert not thread.is_alive(), "the job went on with a fenced producer"
    assert failure and isinstance(failure[0], JobFailedError), failure
    cause = failure[0].__cause__
    assert isinstance(cause, KafkaFencedError), repr(cause)
    assert sink.transactional_id in str(cause) and "fenced" in str(cause)
    assert consume_all(bootstrap, out, timeout=5, committed_only=True) == []
