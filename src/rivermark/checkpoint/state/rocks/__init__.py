"""Keyed state larger than memory: RocksDB databases checkpointed incrementally.

``Job(state="rocksdb")`` keeps the :class:`rivermark.KeyedState` of the
job's nodes in RocksDB (:mod:`.mapping`) in a local state directory
(:mod:`.local`); at each barrier a RocksDB checkpoint is taken and only the
files the store does not hold yet are uploaded (:mod:`.backend`).  Every
write goes through :mod:`.writes`, which never lets a stalled RocksDB
write hold the process (a full disk).  See
"Keyed state in RocksDB" in ``docs/checkpointing.md``.
"""

from __future__ import annotations

from rivermark.checkpoint.state.rocks.backend import StateBackend as StateBackend
from rivermark.checkpoint.state.rocks.mapping import RocksKeyedState as RocksKeyedState

__all__ = ["StateBackend", "RocksKeyedState"]
