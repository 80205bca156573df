"""Churn: sustained short transactions, bounded in time and count, stopping by themselves.

* :class:`LibrdkafkaChurn`: a confluent-kafka transactional producer in a thread, one
  transaction after another (librdkafka speaks transactions v1: AddPartitionsToTxn, EndTxn
  v<5, so the coordinator runs them as TV1 even on a 4.x broker).
* :class:`JavaChurn`: Kafka's own Java producer from the test bed's tools classpath
  (``org.apache.kafka.tools.ProducerPerformance`` with ``--transactional-id`` and
  ``--transaction-duration-ms``), which uses transaction version 2 against a 4.x broker
  (and TV1 against 3.x).

Both stop when their duration or their transaction/record budget runs out, whichever comes
first; :meth:`stop` ends them early. Start both, then ``join``/``wait`` them, to have two
producers of different transaction versions running at once::

    with LibrdkafkaChurn(bootstrap, topic, duration_s=60) as a, \
         JavaChurn(dist, bootstrap, topic, duration_s=60) as b:
        ...  # observe
    print(a.stats, b.stats)
"""

from __future__ import annotations

import logging
import re
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from confluent_kafka import KafkaError, KafkaException, Producer

from testbed.maven import KafkaDistribution
from testbed.oracles import _tools_logging_config
from testbed.scenarios import unique_id

log = logging.getLogger(__name__)

PRODUCER_PERFORMANCE = "org.apache.kafka.tools.ProducerPerformance"
#: ProducerPerformance's final summary line: "1000 records sent, 99.9 records/sec ..."
SUMMARY = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec", re.MULTILINE)


@dataclass
class ChurnStats:
    transactions_committed: int = 0
    transactions_aborted: int = 0
    records: int = 0
    errors: list[str] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0
    transactional_ids: tuple[str, ...] = ()

    @property
    def duration_s(self) -> float:
        return max(0.0, (self.ended or time.monotonic()) - self.started)


class LibrdkafkaChurn:
    """A confluent-kafka transactional producer committing short transactions in a loop.

    Each transaction writes ``records_per_transaction`` records round-robin over
    ``partitions`` (all of the topic's when None), stays open ``transaction_duration_s``, and
    commits (every ``abort_every``-th aborts, when set). Runs at most ``duration_s`` and at
    most ``max_transactions``.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        duration_s: float = 60.0,
        max_transactions: int = 100_000,
        records_per_transaction: int = 3,
        transaction_duration_s: float = 0.05,
        pause_s: float = 0.05,
        partitions: tuple[int, ...] = (0,),
        abort_every: int = 0,
        transactional_id: str | None = None,
        client_config: Mapping[str, object] | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.duration_s = duration_s
        self.max_transactions = max_transactions
        self.records_per_transaction = records_per_transaction
        self.transaction_duration_s = transaction_duration_s
        self.pause_s = pause_s
        self.partitions = partitions
        self.abort_every = abort_every
        self.transactional_id = transactional_id or unique_id("kte-churn-rdkafka")
        self.client_config = dict(client_config or {})
        self.stats = ChurnStats(transactional_ids=(self.transactional_id,))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="churn-librdkafka", daemon=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Self:
        self.stats.started = time.monotonic()
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout_s: float | None = None) -> ChurnStats:
        """Wait until it stopped by itself (or ``timeout_s``)."""
        self._thread.join(timeout=self.duration_s + 60 if timeout_s is None else timeout_s)
        return self.stats

    def stop(self) -> ChurnStats:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        return self.stats

    def _run(self) -> None:
        config: dict[str, object] = {
            "bootstrap.servers": self.bootstrap_servers,
            "transactional.id": self.transactional_id,
            "transaction.timeout.ms": 60_000,
            "linger.ms": 5,
            "logger": log,
            **self.client_config,
        }
        end = self.stats.started + self.duration_s
        try:
            producer = Producer(config)
            producer.init_transactions(30)
            n = 0
            while (not self._stop.is_set() and time.monotonic() < end
                   and n < self.max_transactions):  # fmt: skip
                n += 1
                self._one(producer, n)
                self._stop.wait(self.pause_s)
        except KafkaException as exc:
            self.stats.errors.append(str(exc))
            log.warning("librdkafka churn %s stopped: %s", self.transactional_id, exc)
        finally:
            self.stats.ended = time.monotonic()

    def _one(self, producer: Producer, n: int) -> None:
        producer.begin_transaction()
        for i in range(self.records_per_transaction):
            partition = self.partitions[(n + i) % len(self.partitions)]
            producer.produce(self.topic, value=b"churn", partition=partition)
        producer.flush(30)
        if self.transaction_duration_s:
            time.sleep(self.transaction_duration_s)
        try:
            if self.abort_every and n % self.abort_every == 0:
                producer.abort_transaction(30)
                self.stats.transactions_aborted += 1
            else:
                producer.commit_transaction(30)
                self.stats.transactions_committed += 1
            self.stats.records += self.records_per_transaction
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.txn_requires_abort():
                producer.abort_transaction(30)
                self.stats.transactions_aborted += 1
                self.stats.errors.append(str(exc))
            else:
                raise


class JavaChurn:
    """Kafka's ProducerPerformance as a transactional churn producer (a subprocess).

    ``throughput`` records/s, a commit every ``transaction_duration_ms``, stopping after
    ``num_records`` (default: enough for ``duration_s``) or after ``duration_s`` plus a
    grace period (then it is terminated). ``client_properties`` is a ``--command-config``
    file (e.g. SASL), with ``bootstrap_servers`` of that listener.
    """

    def __init__(
        self,
        dist: KafkaDistribution,
        bootstrap_servers: str,
        topic: str,
        *,
        duration_s: float = 60.0,
        throughput: int = 50,
        transaction_duration_ms: int = 200,
        num_records: int | None = None,
        record_size: int = 100,
        transactional_id: str | None = None,
        client_properties: Path | None = None,
        work_dir: Path | None = None,
    ) -> None:
        self.dist = dist
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.duration_s = duration_s
        self.throughput = throughput
        self.transaction_duration_ms = transaction_duration_ms
        self.num_records = num_records or max(1, int(throughput * duration_s))
        self.record_size = record_size
        self.transactional_id = transactional_id or unique_id("kte-churn-java")
        self.client_properties = client_properties
        self.work_dir = work_dir
        self.stats = ChurnStats(transactional_ids=(self.transactional_id,))
        self.output = ""
        self._process: subprocess.Popen[str] | None = None
        self._out: IO[str] | None = None

    def command(self) -> list[str]:
        cmd = [
            "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            *self.dist.logging_jvm_args(_tools_logging_config(self.dist)),
            "-cp", self.dist.tools_classpath, PRODUCER_PERFORMANCE,
            "--bootstrap-server", self.bootstrap_servers,
            "--topic", self.topic,
            "--num-records", str(self.num_records),
            "--throughput", str(self.throughput),
            "--record-size", str(self.record_size),
            "--transactional-id", self.transactional_id,
            "--transaction-duration-ms", str(self.transaction_duration_ms),
            "--reporting-interval", "10000",
            "--command-property", "acks=all", "linger.ms=5",
        ]  # fmt: skip
        if self.client_properties is not None:
            cmd += ["--command-config", str(self.client_properties)]
        return cmd

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Self:
        import tempfile

        self.stats.started = time.monotonic()
        out_dir = self.work_dir or Path(tempfile.gettempdir())
        self._out = (out_dir / f"{self.transactional_id}.log").open("w+")
        self._process = subprocess.Popen(
            self.command(), stdout=self._out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, text=True, start_new_session=True,
        )  # fmt: skip
        return self

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def wait(self, timeout_s: float | None = None) -> ChurnStats:
        """Wait until it finished by itself (bounded: ``duration_s`` + 120 s of JVM start
        and slack on a loaded machine, then it is stopped)."""
        if self._process is None:
            return self.stats
        try:
            self._process.wait(timeout=self.duration_s + 120 if timeout_s is None else timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("ProducerPerformance %s overran, stopping it", self.transactional_id)
        return self.stop()

    def stop(self) -> ChurnStats:
        proc = self._process
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
            self._process = None
            self.stats.ended = time.monotonic()
            self._collect(proc.returncode)
        return self.stats

    def _collect(self, returncode: int | None) -> None:
        if self._out is None:
            return
        self._out.seek(0)
        self.output = self._out.read()
        path = Path(self._out.name)
        self._out.close()
        self._out = None
        path.unlink(missing_ok=True)
        sent = SUMMARY.findall(self.output)
        if sent:
            # ProducerPerformance does not print its commit count: read the epoch (TV2 bumps
            # it at every commit) with DescribeTransactions when the count matters.
            self.stats.records = int(sent[-1][0])
        if returncode not in (0, None) or "Exception" in self.output:
            self.stats.errors.append(f"exit {returncode}: {self.output[-2000:]}")


__all__ = ["ChurnStats", "JavaChurn", "LibrdkafkaChurn"]
