"""User-given names (node, source, sink, job ids) as file and directory names.

A name reaches a file system or an object key only through
:func:`file_name`: one path component that cannot leave the directory it
is put in, whatever the name holds (``/``, ``..``, NUL, a leading dot, a
thousand characters).  The encoding:

* ``A-Z a-z 0-9 . _ -`` stay as they are (so a plain name such as
  ``counts`` or ``words-1`` is its own file name, as it always was); every
  other character is written as ``%XX`` per byte of its UTF-8 (``/`` is
  ``%2F``, ``%`` itself ``%25``), and a leading ``.`` as ``%2E``: so two
  names never share an encoding, and :func:`name_of` gives the name back;
* an encoding longer than :data:`MAX_LEN` characters (file systems allow 255
  bytes a component) is cut to its first :data:`KEEP_LEN` characters
  followed by ``~`` and 32 hex digits of the name's sha256.  ``~`` is
  never in an encoding otherwise, so a long name cannot meet a short one;
  the whole name is where the file is listed (a checkpoint's manifest maps
  each node id to its state file; a RocksDB home is found from the id).

The empty name is ``%``.

>>> file_name("counts"), file_name("clicks/per-minute"), file_name("../x")
('counts', 'clicks%2Fper-minute', '%2E.%2Fx')
>>> name_of(file_name("clicks/per-minute"))
'clicks/per-minute'
>>> long = file_name("n" * 1000)
>>> len(long), long[:3], long[KEEP_LEN]
(153, 'nnn', '~')
"""

from __future__ import annotations

import hashlib
import re
from pathlib import PurePosixPath

from rivermark.checkpoint.errors import CheckpointCorruptError

__all__ = ["file_name", "name_of", "checked_relative", "MAX_LEN", "KEEP_LEN"]

_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
#: the longest encoding used as it is (a component leaves room for suffixes
#: such as ``.<writer>.pkl.<writer>.tmp`` within the 255 bytes of a file name)
MAX_LEN = 160
#: the characters of a longer encoding kept before ``~<hash>``
KEEP_LEN = 120
_ESCAPE = re.compile(r"%[0-9A-F]{2}")


def file_name(name: str) -> str:
    """``name`` as one path component (see the module docs)."""
    if name == "":
        return "%"
    out = "".join(c if c in _SAFE else _escaped(c) for c in name)
    if out.startswith("."):
        out = "%2E" + out[1:]
    if len(out) <= MAX_LEN:
        return out
    cut = KEEP_LEN
    while "%" in out[cut - 2 : cut]:  # do not split an escape
        cut -= 1
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{out[:cut]}~{digest}"


def _escaped(c: str) -> str:
    return "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))


def name_of(encoded: str) -> str | None:
    """The name whose :func:`file_name` is ``encoded``; None for a long (hashed) one."""
    if "~" in encoded:
        return None
    if encoded == "%":
        return ""
    raw = bytearray()
    i = 0
    while i < len(encoded):
        if _ESCAPE.match(encoded, i):
            raw.append(int(encoded[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.extend(encoded[i].encode("utf-8", "surrogatepass"))
            i += 1
    return raw.decode("utf-8", "surrogatepass")


def checked_relative(node_id: str, file: str) -> str:
    """``file`` (a manifest's state entry) if it stays inside its checkpoint, else raise.

    Checkpoints of earlier versions name files such as ``state/a/b.pkl``
    (a node id with ``/`` in an object store): a path inside the checkpoint
    is read; an absolute one, or one with ``..`` or an empty part, is not.
    """
    parts = file.split("/")
    if (
        PurePosixPath(file).is_absolute()
        or "\0" in file
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise CheckpointCorruptError(
            f"state file of {node_id!r} is {file!r}, outside the checkpoint (edited or planted)"
        )
    return file
