"""Applications killed with their transactions open, as operators find them after a crash.

:class:`KilledProducers` runs real transactional producers (confluent-kafka) in a process of
their own, one per transactional id, each with a transaction begun and records flushed to
its partition; :meth:`KilledProducers.kill` SIGKILLs that process. Nothing ends the
transactions: their coordinators own them (``Ongoing``) until ``transaction.timeout.ms``,
and every read_committed consumer of those partitions waits at their first offset.

:func:`flink_sink_ids` names them as Flink's KafkaSink does
(``<transactionalIdPrefix>-<subtaskId>-<checkpointId>``), so a killed job's lingering set is
``KilledProducers(bootstrap, topic, flink_sink_ids("orders-sink", subtasks=3, checkpoint=7))``.

Run as ``python -m testbed.lingering '<json>'`` by :class:`KilledProducers` only.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Self

log = logging.getLogger(__name__)

READY = "READY"
#: The child exits by itself after this long if nobody killed it (a bounded test).
CHILD_LIFETIME_S = 900.0


def flink_sink_ids(prefix: str, *, subtasks: int, checkpoint: int, partitions: int) -> dict[str, int]:
    """Flink KafkaSink's transactional ids of one checkpoint, each subtask on its partition."""
    return {f"{prefix}-{subtask}-{checkpoint}": subtask % partitions for subtask in range(subtasks)}


class KilledProducers:
    """Transactional producers in a child process, killed with their transactions open."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        assignments: Mapping[str, int],
        *,
        records: int = 3,
        transaction_timeout_ms: int = 600_000,
        start_timeout_s: float = 90.0,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.assignments = dict(assignments)
        self.records = records
        self.transaction_timeout_ms = transaction_timeout_ms
        self.start_timeout_s = start_timeout_s
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> Self:
        """Start the producers and wait until every transaction is open (records flushed)."""
        spec = {
            "bootstrap": self.bootstrap_servers,
            "topic": self.topic,
            "assignments": self.assignments,
            "records": self.records,
            "transaction_timeout_ms": self.transaction_timeout_ms,
        }
        self._process = subprocess.Popen(
            [sys.executable, "-m", "testbed.lingering", json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        assert self._process.stdout is not None
        deadline = time.monotonic() + self.start_timeout_s
        seen: list[str] = []
        while time.monotonic() < deadline:
            line = self._process.stdout.readline()
            if not line:
                break
            seen.append(line.rstrip())
            if line.strip() == READY:
                return self
        self.kill()
        raise RuntimeError("the producers did not open their transactions: " + "\n".join(seen[-20:]))

    def kill(self) -> None:
        """SIGKILL: no EndTxn, no close; the transactions stay open on their coordinators."""
        proc = self._process
        if proc is None:
            return
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
        self._process = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.kill()


def _child(spec: Mapping[str, object]) -> None:
    from confluent_kafka import Producer

    assignments = spec["assignments"]
    assert isinstance(assignments, dict)
    producers = []
    for transactional_id, partition in sorted(assignments.items()):
        producer = Producer(
            {
                "bootstrap.servers": spec["bootstrap"],
                "transactional.id": transactional_id,
                "transaction.timeout.ms": spec["transaction_timeout_ms"],
                "linger.ms": 0,
                "logger": log,
            }
        )
        producer.init_transactions(60)
        producer.begin_transaction()
        for n in range(int(str(spec["records"]))):
            producer.produce(
                str(spec["topic"]), value=f"{transactional_id}:{n}".encode(), partition=partition
            )
        if producer.flush(60):
            raise TimeoutError(f"{transactional_id}: records not delivered")
        producers.append(producer)
        print(f"open {transactional_id} on partition {partition}", flush=True)
    print(READY, flush=True)
    time.sleep(CHILD_LIFETIME_S)


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
