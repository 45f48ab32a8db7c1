"""Cutting a byte stream into delimited records, for any text codec.

:class:`Codec` says how a file in a given encoding is split: the delimiter
as bytes (without a byte-order mark), the size of one code unit (a
delimiter is only recognised at a multiple of it, so ``"\\n"`` in UTF-16
never matches the middle of another character), the byte-order marks that
may open the file, and the codec that decodes one record.  Codecs whose
encoded delimiter can occur inside another character's bytes, or that carry
a shift state from one record to the next (UTF-7, ISO-2022, HZ), are
refused with a :class:`~rivermark.errors.ConfigurationError`.

:class:`LineSplitter` looks at every byte once: a record longer than a
chunk is kept as a list of pieces and joined when its delimiter arrives, so
reading is linear in the input whatever the length of a line
(:attr:`LineSplitter.scanned` counts the bytes searched).

>>> codec = Codec.for_encoding("utf-16", "\\n", "from_textfile")
>>> skip, codec = codec.for_file(b"\\xff\\xfe")
>>> skip, codec.decoder, codec.delimiter
(2, 'utf-16-le', b'\\n\\x00')
>>> splitter = LineSplitter(codec.delimiter, codec.unit)
>>> splitter.feed("ab\\nc".encode("utf-16-le")), splitter.pending
([b'a\\x00b\\x00'], 2)
"""

from __future__ import annotations

import codecs
import sys
from dataclasses import dataclass, replace

from rivermark.errors import ConfigurationError

__all__ = ["Codec", "LineSplitter"]

#: codecs that keep a shift state across lines: one record cannot be decoded alone
_STATEFUL = ("utf-7", "hz", "iso2022")
#: multi-byte codecs whose bytes below 0x30 only ever stand for themselves
_ASCII_SAFE_MULTIBYTE = (
    "shift_jis",
    "cp932",
    "euc",
    "gb2312",
    "gbk",
    "gb18030",
    "big5",
    "cp949",
    "cp950",
    "johab",
    "shift_jis_2004",
    "shift_jisx0213",
)
_BOMS = {
    "utf-16": ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")),
    "utf-32": ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be")),
    "utf-8-sig": ((codecs.BOM_UTF8, "utf-8"),),
}
_UNITS = {"utf-16": 2, "utf-16-le": 2, "utf-16-be": 2, "utf-32": 4, "utf-32-le": 4, "utf-32-be": 4}


def _single_byte(name: str) -> bool:
    """A charmap codec (one byte per character), where any byte split is safe."""
    try:
        decode = codecs.lookup(name).decode
    except LookupError:
        return False
    # the lookup imported the codec's module; a charmap codec's has a decoding table
    module = sys.modules.get(decode.__module__ or "")
    return module is not None and hasattr(module, "decoding_table")


@dataclass(frozen=True)
class Codec:
    """How records of one encoding are cut and decoded (see the module docs)."""

    name: str
    text_delimiter: str
    #: the codec that decodes one record (endianness fixed, no BOM handling)
    decoder: str
    delimiter: bytes
    unit: int
    #: (mark, decoder) pairs a file may open with; the mark is not part of a record
    boms: tuple[tuple[bytes, str], ...] = ()

    @classmethod
    def for_encoding(cls, encoding: str, delimiter: str, node: str) -> Codec:
        try:
            info = codecs.lookup(encoding)
        except (LookupError, TypeError):
            raise ConfigurationError(
                f"{node}: unknown encoding {encoding!r}; pass a text codec such as 'utf-8'"
            ) from None
        name = info.name
        boms = _BOMS.get(name, ())
        native = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
        if name == "utf-32":
            native = native.replace("16", "32")
        decoder = native if name in ("utf-16", "utf-32") else "utf-8" if boms else name
        if name in ("utf-8", "ascii") or boms or name in _UNITS:
            unit = _UNITS.get(name, 1)
        elif _single_byte(name) or (
            name.startswith(_ASCII_SAFE_MULTIBYTE) and all(ord(c) < 0x30 for c in delimiter)
        ):
            unit = 1
        else:
            why = (
                "it carries a shift state from one line to the next"
                if name.startswith(_STATEFUL)
                else f"its bytes for {delimiter!r} can occur inside other characters"
            )
            raise ConfigurationError(
                f"{node}: cannot split {encoding!r} text into records: {why}; convert the "
                "file to UTF-8 (e.g. iconv -t utf-8) or pass delimiter='\\n' with a codec "
                "that keeps it one byte"
            )
        try:
            encoded = delimiter.encode(decoder)
        except (UnicodeError, LookupError) as e:
            raise ConfigurationError(
                f"{node}: delimiter {delimiter!r} cannot be written in {encoding!r} ({e}); "
                "pass a delimiter the encoding has"
            ) from None
        return cls(name, delimiter, decoder, encoded, unit, boms)

    def for_file(self, head: bytes) -> tuple[int, Codec]:
        """The length of the byte-order mark a file opens with (0 if none), and its codec.

        ``head`` holds the file's first bytes; the codec returned decodes
        records in the byte order the mark names.
        """
        for mark, decoder in self.boms:
            if head.startswith(mark):
                delimiter = self.text_delimiter.encode(decoder)
                return len(mark), replace(self, decoder=decoder, delimiter=delimiter, boms=())
        return 0, replace(self, boms=())

    @property
    def bom_length(self) -> int:
        """The longest byte-order mark this codec may open a file with (0 if none)."""
        return max((len(mark) for mark, _ in self.boms), default=0)


class LineSplitter:
    """Cut fed bytes into records (without their delimiter); the rest is pending."""

    def __init__(self, delimiter: bytes, unit: int = 1) -> None:
        self.delimiter = delimiter
        self.unit = unit
        self._parts: list[bytes] = []
        #: bytes held for a record whose delimiter has not arrived
        self.pending = 0
        #: the last ``len(delimiter) - 1`` pending bytes, where a delimiter may begin
        self._edge = b""
        #: bytes searched for a delimiter so far (each input byte about once)
        self.scanned = 0

    def _find(self, data: bytes, start: int, base: int) -> int:
        """First delimiter in ``data`` from ``start`` at a code-unit boundary (``base`` offset)."""
        i = data.find(self.delimiter, start)
        while i >= 0 and (base + i) % self.unit:
            i = data.find(self.delimiter, i + 1)
        self.scanned += (len(data) if i < 0 else i + len(self.delimiter)) - start
        return i

    def feed(self, chunk: bytes) -> list[bytes]:
        """The records that ``chunk`` completes, in order."""
        if not self._parts and self.unit == 1:  # the common case, at C speed
            pieces = chunk.split(self.delimiter)
            self.scanned += len(chunk)
            rest = pieces.pop()
            if rest:
                self._hold(rest)
            return pieces
        out: list[bytes] = []
        k = len(self.delimiter)
        if self._parts:
            window = self._edge + chunk
            i = self._find(window, 0, self.pending - len(self._edge))
            if i < 0:
                self._hold(chunk)
                return out
            end = i + k - len(self._edge)
            record = b"".join(self._parts) + chunk[:end]
            out.append(record[:-k])
            self._parts, self.pending, self._edge = [], 0, b""
            chunk = chunk[end:]
        if self.unit == 1:
            pieces = chunk.split(self.delimiter)
            self.scanned += len(chunk)
            rest = pieces.pop()
            out.extend(pieces)
        else:
            start = 0
            while (i := self._find(chunk, start, 0)) >= 0:
                # records start at unit boundaries, so alignment is relative to the chunk
                out.append(chunk[start:i])
                start = i + k
            rest = chunk[start:]
        if rest:
            self._hold(rest)
        return out

    def _hold(self, data: bytes) -> None:
        self._parts.append(data)
        self.pending += len(data)
        k = len(self.delimiter) - 1
        if k:
            self._edge = (self._edge + data)[-k:]

    def take_pending(self) -> bytes:
        """The pending bytes (a record without its delimiter), which are then dropped."""
        data = b"".join(self._parts)
        self._parts, self.pending, self._edge = [], 0, b""
        return data
