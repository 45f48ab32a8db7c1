from __future__ import annotations

import gc
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

import rivermark.kafka  # noqa: F401  (registers from_kafka & co.)
from rivermark.testing.kafka_broker import KafkaBroker, create_topic, start_broker, stop_broker

_HERE = Path(__file__).parent
#: the pytest worker's broker, started by the first test that needs it
_broker: KafkaBroker | None = None


@pytest.fixture(scope="module")  # what module fixtures use; its life: below
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> KafkaBroker:
    """One broker for the tests of this folder a pytest worker runs, stopped after the last.

    They run one after the other on that worker (tests/conftest.py), in one
    or two groups; an idle broker keeps using processor time the rest of the
    run needs, so it does not live on until the session ends.
    """
    global _broker
    if _broker is None:
        _broker = start_broker(tmp_path_factory.mktemp("kafka") / "broker")
    return _broker


def _stop() -> None:
    global _broker
    broker, _broker = _broker, None
    if broker is not None:
        # clients the tests left to the garbage collector (in reference cycles)
        # go while the broker still answers, instead of reconnecting to a
        # stopped one for the rest of the session, logging each attempt
        gc.collect()
        stop_broker(broker)


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if nextitem is None or _HERE not in nextitem.path.parents:
        _stop()  # the worker's last test of this folder (for now)


def pytest_sessionfinish() -> None:
    _stop()  # a session cut short


@pytest.fixture
def bootstrap(kafka_broker: KafkaBroker) -> str:
    return kafka_broker.bootstrap


@pytest.fixture
def new_topic(bootstrap: str) -> Callable[..., str]:
    def make(partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        create_topic(bootstrap, name, partitions=partitions)
        return name

    return make


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:12]}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.kafka)


collect_ignore = ["fault_app.py", "group_app.py", "eventtime_eos_app.py", "table_bootstrap_app.py"]
