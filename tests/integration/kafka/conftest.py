from __future__ import annotations

import gc
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import rivermark.kafka  # noqa: F401  (registers from_kafka & co.)
from rivermark.testing.kafka_broker import KafkaBroker, create_topic, start_broker, stop_broker

_HERE = Path(__file__).parent


@pytest.fixture(scope="module")  # what module fixtures use; its life: FolderServices
def kafka_broker(
    tmp_path_factory: pytest.TempPathFactory,
    folder_services: Any,  # tests/integration/conftest.py's FolderServices
) -> KafkaBroker:
    """One broker for the tests of this folder a pytest worker runs, stopped after the last.

    They run one after the other on that worker (tests/conftest.py), in one
    or two groups.
    """
    return folder_services.get(
        _HERE, "kafka", lambda: start_broker(tmp_path_factory.mktemp("kafka") / "broker"), _stop
    )


def _stop(broker: KafkaBroker) -> None:
    # clients the tests left to the garbage collector (in reference cycles)
    # go while the broker still answers, instead of reconnecting to a
    # stopped one for the rest of the session, logging each attempt
    gc.collect()
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
