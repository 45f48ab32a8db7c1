"""A partitioned job's stable process identity: its static ``group.instance.id``.

With static group membership (KIP-345) a consumer that leaves and joins again
under the same ``group.instance.id`` within ``session.timeout.ms`` gets its
partitions back without a rebalance: the group keeps its assignment while it
is away.  For that the identity must be the same for the process that comes
back, and different for every process that runs at the same time.

The derived identity is ``<host>-<slot>``: the host name, and the lowest slot
number that no other live process of the same job (same ``group.id`` and
checkpoint location) holds on this host.  A slot is held with ``flock`` on a
file under the temporary directory, which the kernel releases when its holder
dies (SIGKILL included), so a process started again after a crash takes the
slot, and the identity, of the one that died.  Processes on other hosts have
other host names.  Where this does not fit (containers whose host name
changes on restart, two hosts with one name), pass the identity yourself:
``PartitionedJob(..., instance_id="orders-3")`` or ``group.instance.id`` in
the consumer parameters (e.g. a StatefulSet pod's ordinal).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import tempfile

__all__ = ["InstanceSlot"]


class InstanceSlot:
    """The slot this process holds among the processes of one job on this host.

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> a, b = InstanceSlot("g", "/ckpt", d), InstanceSlot("g", "/ckpt", d)
    >>> a.acquire(host="h"), b.acquire(host="h")
    ('h-0', 'h-1')
    >>> a.release(); InstanceSlot("g", "/ckpt", d).acquire(host="h")
    'h-0'
    """

    def __init__(self, group: str, location: str, directory: str | None = None) -> None:
        digest = hashlib.sha256(f"{group}\0{location}".encode()).hexdigest()[:16]
        base = directory or os.path.join(tempfile.gettempdir(), f"rivermark-{os.getuid()}")
        self.directory = os.path.join(base, "instances", digest)
        self._fd: int | None = None

    def acquire(self, host: str | None = None) -> str:
        """Hold the lowest free slot; the identity ``<host>-<slot>``."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        slot = 0
        while True:
            fd = os.open(
                os.path.join(self.directory, f"{slot}.lock"), os.O_RDWR | os.O_CREAT, 0o600
            )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                slot += 1
                continue
            self._fd = fd
            return f"{host or socket.gethostname()}-{slot}"

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
