"""Services of the integration tests.

A real S3 API server (moto) for the whole session and a fresh bucket per
test; and :class:`FolderServices`, which starts a service the tests of one
folder share (the Kafka broker, the Dask cluster) and stops it after the
worker's last test of that folder.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from rivermark.testing.s3_server import S3Server, start_s3_server

T = TypeVar("T")


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


class FolderServices:
    """Services shared by the tests of one folder, each stopped after the last of them.

    The tests of such a folder run one after the other on one pytest worker
    (tests/conftest.py).  An idle broker or cluster keeps using processor
    time the rest of the run needs, so it does not live until the session
    ends: the hooks below stop it once the worker's next test lies outside
    its folder (after that test's own fixtures are torn down), or when the
    session ends early.
    """

    def __init__(self) -> None:
        #: name -> (folder, the service, how to stop it), in the order started
        self._running: dict[str, tuple[Path, object, Callable[[object], None]]] = {}

    def get(self, folder: Path, name: str, start: Callable[[], T], stop: Callable[[T], None]) -> T:
        """The service ``name`` of ``folder``, started by ``start()`` when it is not running."""
        if name not in self._running:
            self._running[name] = (folder, start(), stop)  # type: ignore[arg-type]
        return self._running[name][1]  # type: ignore[return-value]

    def stop_outside(self, path: Path | None) -> None:
        """Stop, newest first, the services whose folder does not hold ``path`` (None: all)."""
        for name in reversed(list(self._running)):
            folder, service, stop = self._running[name]
            if path is None or folder not in path.parents:
                del self._running[name]
                stop(service)


_folder_services = FolderServices()


@pytest.fixture(scope="session")
def folder_services() -> FolderServices:
    return _folder_services


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    _folder_services.stop_outside(None if nextitem is None else nextitem.path)


def pytest_sessionfinish() -> None:
    _folder_services.stop_outside(None)  # a session cut short
