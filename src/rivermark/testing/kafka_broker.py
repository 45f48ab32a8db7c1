"""A real, single-node Apache Kafka broker for rivermark's integration tests.

The broker is Apache Kafka 4.1.1 in KRaft combined mode (one JVM that is both
broker and controller), listening on 127.0.0.1 only.  Nothing here downloads a
Kafka distribution: the bash script ``scripts/kafka/broker`` fetches the
broker's jars from Maven Central with ``mvn`` (through ``scripts/kafka/pom.xml``)
into a cache outside the repository, ``$RIVERMARK_KAFKA_CACHE`` or
``~/.cache/rivermark/kafka-4.1.1``, and runs them with the machine's Java 17.

Everything a broker owns lives in the directory handed to :func:`start_broker`:
``server.properties``, ``data/`` (the KRaft metadata and topic logs),
``broker.log``, ``pid`` and ``bootstrap``.  Starting again on a directory that
already holds a configuration reuses its ports and its data, which is what
:func:`restart_broker` relies on: clients configured with the old bootstrap
address reconnect to the same broker, with every committed record intact.

Typical use in a pytest fixture::

    broker = start_broker(tmp_path / "kafka")
    try:
        create_topic(broker.bootstrap, "events", partitions=4)
        ...
        broker = restart_broker(broker)
        ...
    finally:
        stop_broker(broker)

The broker is configured for tests on one node: replication factors and min ISR
of 1 for the internal topics (so transactions and consumer groups work), no
initial rebalance delay, topics auto-created with one partition, and
``transaction.max.timeout.ms=900000``.

The topic helpers use ``confluent_kafka.admin.AdminClient``; confluent-kafka is
imported only when they are called, so importing this module costs nothing.

Environment:

``RIVERMARK_KAFKA_SCRIPT``
    path of the broker script, instead of ``scripts/kafka/broker`` in this
    repository.
``RIVERMARK_KAFKA_CACHE``, ``RIVERMARK_KAFKA_HEAP``, ``RIVERMARK_KAFKA_JVM_OPTS``,
``RIVERMARK_KAFKA_START_TIMEOUT``, ``RIVERMARK_KAFKA_STOP_TIMEOUT``
    read by the script itself (see its header).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

__all__ = [
    "KafkaBroker",
    "KafkaBrokerError",
    "add_partitions",
    "broker_script",
    "create_topic",
    "fetch_broker",
    "missing_prerequisites",
    "restart_broker",
    "start_broker",
    "stop_broker",
]

SCRIPT_ENV = "RIVERMARK_KAFKA_SCRIPT"

# Generous: the first start may download about 40 MB of jars with mvn.
_START_TIMEOUT_S = 900.0
_STOP_TIMEOUT_S = 120.0


class KafkaBrokerError(RuntimeError):
    """The broker script failed, or the broker did not do what was asked."""


@dataclass(frozen=True)
class KafkaBroker:
    """Handle on a broker started by :func:`start_broker`.

    ``bootstrap`` is ``host:port`` for the clients' ``bootstrap.servers``;
    ``directory`` holds the broker's configuration, data and log.
    """

    bootstrap: str
    directory: Path

    @property
    def pid(self) -> int | None:
        """Process id of the broker's JVM, or None when it is not recorded."""
        try:
            return int((self.directory / "pid").read_text().strip())
        except (OSError, ValueError):
            return None


def broker_script() -> Path:
    """Path of the bash script that fetches, starts and stops the broker."""
    override = os.environ.get(SCRIPT_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return Path(__file__).resolve().parents[3] / "scripts" / "kafka" / "broker"


def _run_script(args: list[str], timeout: float) -> str:
    script = broker_script()
    if not script.is_file():
        raise KafkaBrokerError(
            f"Kafka broker script not found at {script}; set {SCRIPT_ENV} to its path"
        )
    command = ["bash", str(script), *args]
    try:
        completed = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise KafkaBrokerError(f"{' '.join(command)} did not finish within {timeout:.0f}s") from exc
    if completed.returncode != 0:
        detail = (completed.stderr or completed.stdout).strip()
        raise KafkaBrokerError(
            f"{' '.join(command)} exited with status {completed.returncode}:\n{detail}"
        )
    return completed.stdout


def missing_prerequisites() -> list[str]:
    """What is missing to run a broker here (empty when all is present).

    Meant for skipping integration tests with a clear reason.  It checks for
    the script, a ``java`` executable, ``mvn`` (only while the jar cache is
    still empty) and the confluent-kafka package.  Java's version is checked
    by the script when it starts the broker.
    """
    missing: list[str] = []
    if not broker_script().is_file():
        missing.append(f"broker script {broker_script()}")
    java_home = os.environ.get("JAVA_HOME")
    has_java = shutil.which("java") is not None or (
        java_home is not None and (Path(java_home) / "bin" / "java").is_file()
    )
    if not has_java:
        missing.append("java (install Java 17)")
    if shutil.which(os.environ.get("MVN", "mvn")) is None and not _jars_cached():
        missing.append("mvn (needed once to fetch the Kafka jars)")
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        missing.append("the confluent-kafka Python package")
    return missing


def _jars_cached() -> bool:
    cache = os.environ.get("RIVERMARK_KAFKA_CACHE")
    root = Path(cache) if cache else Path.home() / ".cache" / "rivermark" / "kafka-4.1.1"
    return (root / "libs" / ".rivermark-complete").is_file()


def fetch_broker() -> None:
    """Download the broker's jars into the cache unless they are there."""
    _run_script(["fetch"], timeout=_START_TIMEOUT_S)


def start_broker(directory: Path) -> KafkaBroker:
    """Start a broker whose state lives in ``directory`` and wait until it is ready.

    A fresh directory gets two free loopback ports (broker and controller), a
    new configuration and freshly formatted KRaft storage; a directory used
    before keeps its ports and data.  If a broker already runs there, its
    handle is returned.
    """
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    output = _run_script(["start", str(directory)], timeout=_START_TIMEOUT_S)
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines or ":" not in lines[-1]:
        raise KafkaBrokerError(f"broker script printed no bootstrap address: {output!r}")
    return KafkaBroker(bootstrap=lines[-1], directory=directory)


def stop_broker(broker: KafkaBroker) -> None:
    """Stop the broker (SIGTERM, then SIGKILL after the script's timeout).

    Stopping a broker that is not running does nothing.
    """
    _run_script(["stop", str(broker.directory)], timeout=_STOP_TIMEOUT_S)


def restart_broker(broker: KafkaBroker) -> KafkaBroker:
    """Stop the broker and start it again on the same ports and data."""
    stop_broker(broker)
    restarted = start_broker(broker.directory)
    if restarted.bootstrap != broker.bootstrap:
        raise KafkaBrokerError(f"broker came back on {restarted.bootstrap}, not {broker.bootstrap}")
    return restarted


# ---------------------------------------------------------------- topics


def _admin(bootstrap: str) -> AdminClient:
    from confluent_kafka.admin import AdminClient

    return AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "rivermark-testing",
            # Metadata look-ups must not create the topic they ask about.
            "allow.auto.create.topics": False,
        }
    )


def _wait_for_partitions(admin: AdminClient, name: str, expected: int, timeout: float) -> None:
    """Wait until the metadata shows ``expected`` partitions, each with a leader."""
    deadline = time.monotonic() + timeout
    seen = "no metadata"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise KafkaBrokerError(
                f"topic {name!r} did not get {expected} partitions with leaders "
                f"within {timeout:.0f}s ({seen})"
            )
        try:
            metadata = admin.list_topics(topic=name, timeout=min(5.0, remaining))
        except Exception as exc:  # KafkaException: transient while the broker settles
            seen = str(exc)
        else:
            topic = metadata.topics.get(name)
            if topic is not None and topic.error is None:
                ready = [p for p in topic.partitions.values() if p.error is None and p.leader >= 0]
                seen = f"{len(ready)} of {len(topic.partitions)} partitions ready"
                if len(topic.partitions) == expected and len(ready) == expected:
                    return
                if len(topic.partitions) > expected:  # partitions never shrink
                    raise KafkaBrokerError(
                        f"topic {name!r} has {len(topic.partitions)} partitions, not {expected}"
                    )
            elif topic is not None:
                seen = str(topic.error)
        time.sleep(0.1)


def _outcome(future: Any, timeout: float) -> Exception | None:
    """Wait for an admin future; return its exception instead of raising it.

    A raised exception's traceback references the frames that hold the
    AdminClient; kept, it forms a cycle that keeps the client (and its
    background threads, which log every failed reconnect once the broker is
    down) alive until the next garbage collection.
    """
    try:
        future.result(timeout=timeout)
    except Exception as exc:
        # The traceback leads back (through f_back) to the caller's frame.
        return exc.with_traceback(None)
    return None


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int,
    *,
    replication_factor: int = 1,
    config: dict[str, str] | None = None,
    exist_ok: bool = False,
    timeout: float = 30.0,
) -> None:
    """Create topic ``name`` with ``partitions`` partitions and wait until usable.

    With ``exist_ok`` an existing topic is accepted as long as it has exactly
    ``partitions`` partitions.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, not {partitions}")
    admin = _admin(bootstrap)
    new_topic = NewTopic(
        name,
        num_partitions=partitions,
        replication_factor=replication_factor,
        config=dict(config or {}),
    )
    failure = _outcome(admin.create_topics([new_topic], operation_timeout=timeout)[name], timeout)
    if failure is not None:
        error = failure.args[0] if isinstance(failure, KafkaException) and failure.args else None
        already = isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS
        if not (already and exist_ok):
            del admin
            raise KafkaBrokerError(f"creating topic {name!r} failed: {failure}")
    _wait_for_partitions(admin, name, partitions, timeout)


def add_partitions(bootstrap: str, name: str, total: int, *, timeout: float = 30.0) -> None:
    """Grow topic ``name`` to ``total`` partitions and wait until all have leaders."""
    from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]

    admin = _admin(bootstrap)
    future = admin.create_partitions([NewPartitions(name, total)], operation_timeout=timeout)[name]
    failure = _outcome(future, timeout)
    if failure is not None:
        del admin, future
        raise KafkaBrokerError(f"growing topic {name!r} to {total} partitions failed: {failure}")
    _wait_for_partitions(admin, name, total, timeout)
