"""A real S3 API server (moto) for the whole session, and a fresh bucket per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rivermark.testing.s3_server import S3Server, start_s3_server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = start_s3_server()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The AWS variables of the server, set in this process and returned for subprocesses."""
    env = s3_server.env()
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(key, raising=False)
    return env


@pytest.fixture
def bucket(s3_server: S3Server, s3_env: dict[str, str]) -> str:
    """A new, empty bucket on the session's S3 server."""
    return s3_server.new_bucket()
