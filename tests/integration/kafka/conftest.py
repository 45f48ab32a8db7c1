from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import rivermark.kafka  # noqa: F401  (registers from_kafka & co.)
from rivermark.testing.kafka_broker import KafkaBroker, create_topic, start_broker, stop_broker


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = start_broker(tmp_path_factory.mktemp("kafka") / "broker")
    try:
        yield broker
    finally:
        stop_broker(broker)


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
