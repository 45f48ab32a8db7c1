"""A checkpointed job with Dask work, run as a separate process by the crash test.

usage: python crash_job.py SCHEDULER_ADDRESS WORKDIR N_ITEMS

Every 5 records the job takes a checkpoint by the barrier protocol: wait until
nothing is in flight (``gather.flush()``), then write the source position,
the scattered accumulate's state (fetched from the cluster) and the output so
far to ``checkpoint.pkl`` (temporary file, fsync, rename, fsync directory).
On start it resumes from that file.  At the end it writes ``result.txt``.
"""

from __future__ import annotations

import os
import pickle
import sys
import time

from distributed import Client

from rivermark import Stream


def square_slow(x: int) -> int:
    time.sleep(0.005)
    return x * x


def add(a: int, b: int) -> int:
    return a + b


def write_atomically(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main() -> None:
    address, workdir, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ckpt = os.path.join(workdir, "checkpoint.pkl")
    client = Client(address)
    source = Stream()
    acc = source.scatter(client=client).map(square_slow).accumulate(add, start=0, name="acc")
    g = acc.gather(max_inflight=8)
    out = g.sink_to_list()
    pos = 0
    if os.path.exists(ckpt):
        with open(ckpt, "rb") as f:
            saved = pickle.load(f)
        pos = saved["position"]
        acc.set_state(saved["acc"])
        out[:] = saved["out"]
    for i in range(pos, n):
        source.emit(i)
        if (i + 1) % 5 == 0 or i + 1 == n:
            g.flush(timeout=60)
            state = {"position": i + 1, "acc": acc.get_state(), "out": list(out)}
            write_atomically(ckpt, pickle.dumps(state))
    g.flush(timeout=60)
    write_atomically(os.path.join(workdir, "result.txt"), "".join(f"{v}\n" for v in out).encode())
    client.close()


if __name__ == "__main__":
    main()
