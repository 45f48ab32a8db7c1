"""Signed checkpoints: the keys, the HMAC of a manifest, and what a job trusts.

A job with a key signs every manifest it writes: ``signature`` holds the key
id (the first 16 hex digits of the key's sha256; the key itself is never
written) and the HMAC-SHA256 of the manifest's canonical contents, the same
text its checksum covers, which names every state file's sha256.  So a
checkpoint that verifies was written by a holder of the key, state files
included.  See ``docs/security.md`` for what this protects and what not.

Where the keys come from (:meth:`Keyring.configured`): ``Job(checkpoint_key=
...)`` (a key, a list of keys, or the path of a key file), else the
environment: ``RIVERMARK_CHECKPOINT_KEY`` (one key) and
``RIVERMARK_CHECKPOINT_KEY_FILE`` (a file with one key a line).  The first
key signs; the others (old keys, for rotation) are accepted when verifying.

>>> ring = Keyring([b"0123456789abcdef-new", b"0123456789abcdef-old"])
>>> sig = Keyring([b"0123456789abcdef-old"]).sign("{}")
>>> ring.check("{}", sig), ring.check("{ }", sig), Keyring([b"x" * 16]).check("{}", sig)
('ok', 'bad-signature', 'foreign-signed')
>>> ring.check("{}", None)
'unsigned'
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from pathlib import Path

from rivermark.errors import ConfigurationError

__all__ = [
    "Keyring",
    "Trust",
    "check_private",
    "key_id",
    "refuse_empty",
    "KEY_ENV",
    "KEY_FILE_ENV",
    "MIN_KEY_BYTES",
]

KEY_ENV = "RIVERMARK_CHECKPOINT_KEY"
KEY_FILE_ENV = "RIVERMARK_CHECKPOINT_KEY_FILE"
#: shorter keys are refused: an HMAC is only as strong as its key
MIN_KEY_BYTES = 16


def key_id(key: bytes) -> str:
    """The id a signature names its key by (not secret: a hash of the key)."""
    return hashlib.sha256(b"rivermark-checkpoint-key:" + key).hexdigest()[:16]


def _as_key(value: object, where: str) -> bytes:
    key = value.encode() if isinstance(value, str) else value
    if not isinstance(key, bytes):
        raise ConfigurationError(
            f"{where}: a checkpoint key must be a string or bytes, got {type(value).__name__}; "
            "pass e.g. the contents of a file made with 'openssl rand -hex 32'"
        )
    key = key.strip()
    if len(key) < MIN_KEY_BYTES:
        raise ConfigurationError(
            f"{where}: a checkpoint key must be at least {MIN_KEY_BYTES} bytes, got {len(key)}; "
            "make one with 'openssl rand -hex 32'"
        )
    return key


def check_private(path: str | os.PathLike[str], what: str) -> None:
    """Refuse the secret file ``path`` when others than its owner may read or write it.

    ``what`` names where the path came from (a variable, an option).  A
    missing file is left to the reader to report.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "key"
    >>> _ = f.write_text("k" * 32); f.chmod(0o644)
    >>> check_private(f, "KEY_FILE")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    rivermark.errors.ConfigurationError: KEY_FILE: the secret file '...key' is readable by others (mode 0644); run 'chmod 600 ...key'
    >>> f.chmod(0o600); check_private(f, "KEY_FILE")
    """
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError:
        return
    if mode & 0o077:
        access = "readable" if mode & 0o044 else "writable"
        raise ConfigurationError(
            f"{what}: the secret file {os.fspath(path)!r} is {access} by others "
            f"(mode {mode:04o}); run 'chmod 600 {os.fspath(path)}'"
        )


def refuse_empty(name: str, what: str, unset: str = "") -> None:
    """One line when the variable ``name`` is set but empty: a secret that went
    missing (``X=$(cat missing-file)``), not "no secret"."""
    if name in os.environ and not os.environ[name].strip():
        raise ConfigurationError(
            f"{name} is set but empty; give it the {what}, or unset it{unset} "
            "(see docs/security.md)"
        )


def _read_key_file(path: str | os.PathLike[str], where: str) -> list[bytes]:
    check_private(path, where)
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError as e:
        raise ConfigurationError(
            f"{where}: cannot read the checkpoint key file {os.fspath(path)!r} "
            f"({e.strerror or e}); give a readable file with one key a line"
        ) from None
    keys = [_as_key(line, f"{where} {os.fspath(path)!r}") for line in lines if line.strip()]
    if not keys:
        raise ConfigurationError(
            f"{where}: the checkpoint key file {os.fspath(path)!r} holds no key; "
            "write one key a line (the first one signs)"
        )
    return keys


@dataclass(frozen=True)
class Keyring:
    """The keys a job signs with (the first) and accepts (all of them)."""

    keys: list[bytes]

    @classmethod
    def configured(cls, checkpoint_key: object = None) -> Keyring | None:
        """The keys of ``Job(checkpoint_key=...)``, else of the environment; ``None``: none."""
        where = "Job(checkpoint_key=...)"
        if isinstance(checkpoint_key, os.PathLike):
            return cls(_read_key_file(checkpoint_key, where))
        if isinstance(checkpoint_key, (list, tuple)):
            return cls([_as_key(k, where) for k in checkpoint_key]) if checkpoint_key else None
        if checkpoint_key is not None:
            return cls([_as_key(checkpoint_key, where)])
        keys: list[bytes] = []
        refuse_empty(KEY_ENV, "key", " to run without a key")
        refuse_empty(KEY_FILE_ENV, "path of the key file", " to run without a key")
        if KEY_ENV in os.environ:
            keys.append(_as_key(os.environ[KEY_ENV], KEY_ENV))
        if KEY_FILE_ENV in os.environ:
            keys.extend(_read_key_file(os.environ[KEY_FILE_ENV], KEY_FILE_ENV))
        return cls(keys) if keys else None

    def sign(self, canonical: str) -> dict[str, str]:
        """The ``signature`` field of a manifest whose canonical text is ``canonical``."""
        key = self.keys[0]
        mac = hmac.new(key, canonical.encode(), hashlib.sha256).hexdigest()
        return {"key": key_id(key), "hmac": mac}

    def check(self, canonical: str, signature: object) -> str:
        """``ok``, ``unsigned``, ``foreign-signed`` (no key of that id) or ``bad-signature``."""
        if signature is None:
            return "unsigned"
        if not isinstance(signature, dict) or not isinstance(signature.get("hmac"), str):
            return "bad-signature"
        for key in self.keys:
            if key_id(key) == signature.get("key"):
                mac = hmac.new(key, canonical.encode(), hashlib.sha256).hexdigest()
                return "ok" if hmac.compare_digest(mac, signature["hmac"]) else "bad-signature"
        return "foreign-signed"


@dataclass(frozen=True)
class Trust:
    """What a reader of a store trusts: its keys, and whether the user trusts the store.

    ``trust_store`` (``--trust-store``, ``Job(trust_store=True)``) accepts
    unsigned and foreign-signed checkpoints, and their pickled state, with a
    warning.  A checkpoint whose signature is wrong is never accepted.
    """

    keyring: Keyring | None = None
    trust_store: bool = False

    def allow_pickle(self, status: str) -> bool:
        """Whether pickled state of a checkpoint with signature ``status`` may be loaded."""
        return status == "ok" or self.trust_store
