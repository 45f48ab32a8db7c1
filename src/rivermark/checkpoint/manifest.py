"""The manifest: the one file that makes a checkpoint exist.

``manifest.json`` in a checkpoint's directory holds::

    {
      "format": 1,
      "epoch": 42,
      "time": 1764680000.5,            # unix time the snapshot was taken
      "fingerprint": {"node-id": "Signature()", ...},
      "positions": {"source-id": <JSON position>, ...},
      "sinks": {"sink-id": <JSON handle>, ...},
      "state": {"node-id": {"file": "state/node-id.pkl", "size": 123, "sha256": "..."}}
    }

It is written last, under a temporary name, fsynced and renamed into place,
so a checkpoint whose manifest is missing or does not parse never existed.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["Manifest", "FORMAT_VERSION", "sha256_of"]

FORMAT_VERSION = 1


def sha256_of(data: bytes) -> str:
    """Hex sha256 of ``data``.

    >>> sha256_of(b"")[:8]
    'e3b0c442'
    """
    return hashlib.sha256(data).hexdigest()


@dataclass
class Manifest:
    """What one checkpoint holds (see the module docs for the JSON layout).

    >>> m = Manifest(epoch=3, time=0.0, fingerprint={}, positions={"s": 7})
    >>> Manifest.from_json(m.to_json()).positions
    {'s': 7}
    """

    epoch: int
    time: float
    fingerprint: dict[str, str]
    positions: dict[str, Any] = field(default_factory=dict)
    sinks: dict[str, Any] = field(default_factory=dict)
    state: dict[str, dict[str, Any]] = field(default_factory=dict)
    format: int = FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": self.format,
                "epoch": self.epoch,
                "time": self.time,
                "fingerprint": self.fingerprint,
                "positions": self.positions,
                "sinks": self.sinks,
                "state": self.state,
            },
            indent=2,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        d = json.loads(text)
        if not isinstance(d, dict) or "epoch" not in d:
            raise ValueError("not a rivermark manifest")
        return cls(
            epoch=int(d["epoch"]),
            time=float(d["time"]),
            fingerprint=dict(d["fingerprint"]),
            positions=dict(d.get("positions", {})),
            sinks=dict(d.get("sinks", {})),
            state=dict(d.get("state", {})),
            format=int(d.get("format", FORMAT_VERSION)),
        )

    @property
    def total_size(self) -> int:
        return sum(int(s["size"]) for s in self.state.values())
