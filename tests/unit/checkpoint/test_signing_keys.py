"""Where a job's checkpoint keys come from, and which are refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rivermark.checkpoint.stores.signing import KEY_ENV, KEY_FILE_ENV, Keyring, key_id
from rivermark.errors import ConfigurationError

KEY = "0123456789abcdef-the-key"


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)


@pytest.mark.parametrize("value", ["", "  \n"], ids=["empty", "blank"])
@pytest.mark.parametrize("name", [KEY_ENV, KEY_FILE_ENV])
def test_a_variable_set_but_empty_is_refused_not_taken_for_no_key(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    assert Keyring.configured() is None
    monkeypatch.setenv(name, value)  # what KEY=$(cat missing-file) gives
    with pytest.raises(
        ConfigurationError, match=re.escape(f"{name} is set but empty; give it the ")
    ) as err:
        Keyring.configured()
    assert "or unset it to run without a key" in str(err.value)


def test_a_key_file_others_can_read_or_write_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = tmp_path / "keys"
    keys.write_text(f"{KEY}\n")
    for mode, what in [(0o644, "readable"), (0o604, "readable"), (0o620, "writable")]:
        keys.chmod(mode)
        for where, configured in [
            (KEY_FILE_ENV, lambda: monkeypatch.setenv(KEY_FILE_ENV, str(keys))),
            ("Job(checkpoint_key=...)", lambda: monkeypatch.delenv(KEY_FILE_ENV)),
        ]:
            configured()
            arg = keys if where.startswith("Job") else None
            with pytest.raises(
                ConfigurationError,
                match=re.escape(
                    f"{where}: the secret file {str(keys)!r} is {what} by others "
                    f"(mode {mode:04o}); run 'chmod 600 {keys}'"
                ),
            ) as err:
                Keyring.configured(arg)
            assert KEY not in str(err.value)
    keys.chmod(0o600)
    ring = Keyring.configured(keys)
    assert ring is not None and [key_id(k) for k in ring.keys] == [key_id(KEY.encode())]
