"""A node's state in a checkpoint, and the backends that keep it.

The data encoding of state files (codec, _pandas_codec), the state frozen at a
barrier (views), keyed state in memory as deltas and columns (keyed, columns),
and keyed state larger than memory in RocksDB (rocks).
"""
