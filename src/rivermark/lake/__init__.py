"""Exactly-once files where people query them: Parquet datasets and Delta Lake tables.

``Stream.to_parquet`` (:mod:`.parquet`) and ``Stream.to_delta`` (:mod:`.delta`)
write under a root that is a local directory or an fsspec URL (``s3://``);
:mod:`.files` holds what both share: the location, in-progress and published
files, the per-sink lease, Hive partition names and the records-to-Arrow step.
They take part in a job's checkpoints like ``to_kafka`` does, and hold a lease
on their output, which is why they live above the checkpoint package and not
among the plain sinks.
"""

from __future__ import annotations

from rivermark.lake import delta as delta
from rivermark.lake import parquet as parquet
