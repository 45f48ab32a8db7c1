"""The control API's token and the address a checkpoint directory names."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rivermark.cli import main
from rivermark.errors import ConfigurationError
from rivermark.observe import control


def test_the_token_comes_from_the_variable_or_the_first_line_of_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(control.TOKEN_ENV, raising=False)
    monkeypatch.delenv(control.TOKEN_FILE_ENV, raising=False)
    assert control.control_token() is None
    secret = tmp_path / "token"
    secret.write_text("0123456789abcdef-from-a-file\nignored\n")
    secret.chmod(0o600)
    monkeypatch.setenv(control.TOKEN_FILE_ENV, str(secret))
    assert control.control_token() == "0123456789abcdef-from-a-file"
    monkeypatch.setenv(control.TOKEN_ENV, "0123456789abcdef-from-the-env")
    assert control.control_token() == "0123456789abcdef-from-the-env"


def test_a_short_token_or_an_unreadable_file_is_refused_without_showing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(control.TOKEN_ENV, "short-secret")
    with pytest.raises(ConfigurationError, match="12 characters, fewer than 16") as err:
        control.control_token()
    assert "short-secret" not in str(err.value)
    monkeypatch.delenv(control.TOKEN_ENV)
    monkeypatch.setenv(control.TOKEN_FILE_ENV, str(tmp_path / "missing"))
    with pytest.raises(ConfigurationError, match="cannot be read"):
        control.control_token()


@pytest.mark.parametrize("text", ["", "\n", "  \n0123456789abcdef-on-line-two\n"])
def test_a_token_file_without_a_token_on_its_first_line_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    # not a job that runs with control turned off: the token went missing
    monkeypatch.delenv(control.TOKEN_ENV, raising=False)
    secret = tmp_path / "token"
    secret.write_text(text)
    secret.chmod(0o600)
    monkeypatch.setenv(control.TOKEN_FILE_ENV, str(secret))
    with pytest.raises(
        ConfigurationError,
        match=re.escape(
            f"the file RIVERMARK_CONTROL_TOKEN_FILE names ({str(secret)!r}) holds no control "
            "token (its first line is empty); write the token on its first line"
        ),
    ):
        control.control_token()


def test_a_token_file_that_is_not_text_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(control.TOKEN_ENV, raising=False)
    secret = tmp_path / "token"
    secret.write_bytes(b"\xff\xfe" + b"\x00" * 40)
    secret.chmod(0o600)
    monkeypatch.setenv(control.TOKEN_FILE_ENV, str(secret))
    with pytest.raises(ConfigurationError, match=r"is not text \(UTF-8\)"):
        control.control_token()


def test_an_empty_variable_or_a_token_file_others_can_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(control.TOKEN_FILE_ENV, raising=False)
    monkeypatch.setenv(control.TOKEN_ENV, "")  # TOKEN=$(cat missing-file)
    with pytest.raises(
        ConfigurationError, match=re.escape("RIVERMARK_CONTROL_TOKEN is set but empty")
    ):
        control.control_token()
    monkeypatch.delenv(control.TOKEN_ENV)
    monkeypatch.setenv(control.TOKEN_FILE_ENV, " ")
    with pytest.raises(ConfigurationError, match="RIVERMARK_CONTROL_TOKEN_FILE is set but empty"):
        control.control_token()
    secret = tmp_path / "token"
    secret.write_text("0123456789abcdef-from-a-file\n")
    monkeypatch.setenv(control.TOKEN_FILE_ENV, str(secret))
    for mode, what in [(0o644, "readable"), (0o640, "readable"), (0o602, "writable")]:
        secret.chmod(mode)
        with pytest.raises(
            ConfigurationError,
            match=re.escape(
                f"the secret file {str(secret)!r} is {what} by others (mode {mode:04o}); "
                f"run 'chmod 600 {secret}'"
            ),
        ) as err:
            control.control_token()
        assert "from-a-file" not in str(err.value)
    secret.chmod(0o400)
    assert control.control_token() == "0123456789abcdef-from-a-file"


def test_a_directory_names_its_job_only_on_loopback(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="names no running job's control address"):
        control.resolve(str(tmp_path))
    info = tmp_path / "job.json"
    info.write_text(json.dumps({"control": "http://127.0.0.1:4567/"}))
    assert control.resolve(str(tmp_path)) == "http://127.0.0.1:4567/"
    # a writer of the store must not be able to send the token elsewhere
    info.write_text(json.dumps({"control": "http://203.0.113.9:4567/"}))
    with pytest.raises(ConfigurationError, match="not on this machine's loopback"):
        control.resolve(str(tmp_path))
    assert control.resolve("http://203.0.113.9:4567") == "http://203.0.113.9:4567/"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:99999/", "Port out of range 0-65535"),
        ("http://127.0.0.1:abc/", "Port could not be cast to integer value as 'abc'"),
        ("http://[::1/", "Invalid IPv6 URL"),
        ("http:///", "no host"),
    ],
)
def test_a_malformed_control_url_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str, why: str
) -> None:
    for command in ("stop", "savepoint"):
        assert main([command, url]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and f"{url!r} is not a control URL ({why})" in err, err
    with pytest.raises(
        ConfigurationError, match=re.escape(f"{url!r} is not a control URL ({why}); pass the")
    ):
        control.resolve(url)
    # the same address in a store's job.json is refused before any connection
    info = tmp_path / "job.json"
    info.write_text(json.dumps({"control": url, "control_run": "0" * 32}))
    with pytest.raises(
        ConfigurationError,
        match=re.escape(
            f"{str(info)!r} names the control address {url!r}, which is not a valid URL ({why})"
        ),
    ):
        control.request(str(tmp_path), "api/stop", "a-control-token-of-test-0123456789")
