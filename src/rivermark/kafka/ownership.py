"""Which job commits to a consumer group: a tag in the committed offsets' metadata.

A Kafka source under a job commits each durable checkpoint's position to its
consumer group with the metadata ``"rivermark job=<job id> at=<unix time>"``.
At start a source reads the group's committed offsets and refuses to run
while another job committed less than ``window`` seconds ago (two jobs on one
group would both read every partition), unless this job restores a
checkpoint that the group is not ahead of (the same job, from a moved
directory: the group holds at most its newest durable checkpoint's position).

>>> tag = owner_tag("orders-1a2b", now=1000.0)
>>> tag
'rivermark job=orders-1a2b at=1000'
>>> live_owner({("t", 0): tag}, "other-9f", {("t", 0): 5}, None, 60.0, now=1010.0)
('orders-1a2b', 't', 0, 10.0)
>>> live_owner({("t", 0): tag}, "other-9f", {("t", 0): 5}, None, 60.0, now=1100.0) is None
True
>>> live_owner({("t", 0): tag}, "other-9f", {("t", 0): 5}, {"t:0": 5}, 60.0, now=1010.0) is None
True
"""

from __future__ import annotations

import time

__all__ = ["live_owner", "owner_tag"]

TP = tuple[str, int]


def owner_tag(job_id: str | None, now: float | None = None) -> str:
    """The commit metadata naming ``job_id`` ('' without a job)."""
    if job_id is None:
        return ""
    return f"rivermark job={job_id} at={time.time() if now is None else now:.0f}"


def live_owner(
    meta: dict[TP, str],
    job_id: str,
    committed: dict[TP, int] | None,
    restored: dict[str, int] | None,
    window: float,
    now: float | None = None,
) -> tuple[str, str, int, float] | None:
    """``(other job, topic, partition, seconds ago)`` of another live job, else None.

    ``meta`` is the committed metadata per partition, ``committed`` the
    committed offsets, ``restored`` this job's restored position (None
    without a checkpoint).
    """
    now = time.time() if now is None else now
    for (t, p), tag in sorted(meta.items()):
        if not tag.startswith("rivermark "):
            continue
        fields = dict(kv.split("=", 1) for kv in tag.split()[1:] if "=" in kv)
        other = fields.get("job")
        try:
            at = float(fields.get("at", "0"))
        except ValueError:
            continue
        if other is None or other == job_id or now - at >= window:
            continue
        if restored is not None and (committed or {}).get((t, p), -1) <= restored.get(
            f"{t}:{p}", 0
        ):
            continue
        return other, t, p, max(0.0, now - at)
    return None
