"""Kafka's own tools as ground truth: ``kafka-transactions.sh`` (TransactionsCommand) and
JmxTool, run as subprocesses on the fetched classpath, with their output parsed.

Each call starts a JVM (a few seconds on a small machine): ask for what you need at once.
"""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path

from testbed.maven import KafkaDistribution

log = logging.getLogger(__name__)

TRANSACTIONS_COMMAND = "org.apache.kafka.tools.TransactionsCommand"
JMX_TOOL = "org.apache.kafka.tools.JmxTool"
LATE_TRANSACTIONS_MBEAN = "kafka.server:type=ReplicaManager,name=PartitionsWithLateTransactionsCount"
TOOL_TIMEOUT_S = 120.0

TOOLS_LOG4J2_XML = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders><Console name="stderr" target="SYSTEM_ERR">
    <PatternLayout pattern="[%d] %p %m (%c)%n"/></Console></Appenders>
  <Loggers><Root level="WARN"><AppenderRef ref="stderr"/></Root></Loggers>
</Configuration>
"""
TOOLS_LOG4J1_PROPERTIES = """log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


class ToolError(RuntimeError):
    """A Kafka tool exited non-zero; the message carries its output."""


def lso_lag_mbean(topic: str, partition: int) -> str:
    return f"kafka.cluster:type=Partition,name=LastStableOffsetLag,topic={topic},partition={partition}"


def _tools_logging_config(dist: KafkaDistribution) -> Path:
    """A WARN-to-stderr logging config for the tools, so stdout carries only their output."""
    if dist.uses_log4j2:
        path = dist.home / "tools-log4j2.xml"
        text = TOOLS_LOG4J2_XML
    else:
        path = dist.home / "tools-log4j.properties"
        text = TOOLS_LOG4J1_PROPERTIES
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def run_tool(dist: KafkaDistribution, main_class: str, args: list[str],
             *, timeout_s: float = TOOL_TIMEOUT_S) -> str:  # fmt: skip
    """Run a Kafka tool's main class; return its stdout or raise :class:`ToolError`."""
    cmd = [
        "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        *dist.logging_jvm_args(_tools_logging_config(dist)),
        "-cp", dist.tools_classpath, main_class, *args,
    ]  # fmt: skip
    log.debug("running %s %s", main_class, " ".join(args))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise ToolError(
            f"{main_class} {' '.join(args)} exited {proc.returncode}:\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    if proc.stderr.strip():
        log.debug("%s stderr: %s", main_class, proc.stderr.strip()[-2000:])
    return proc.stdout


def parse_table(text: str) -> list[dict[str, str]]:
    """Parse the tab-separated, space-padded tables TransactionsCommand prints (header
    line first). Empty cells (a transaction without partitions) stay empty strings."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = _cells(lines[0])
    rows = []
    for line in lines[1:]:
        cells = _cells(line)
        cells += [""] * (len(header) - len(cells))
        rows.append(dict(zip(header, cells, strict=False)))
    return rows


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.rstrip("\t\n").split("\t")]


# -- TransactionsCommand ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListedTxn:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class DescribedTxn:
    coordinator: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int | None
    partitions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PartitionProducer:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    current_txn_start_offset: int | None


@dataclass(frozen=True, slots=True)
class HangingTxn:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp_ms: int
    duration_min: int


def _opt_int(value: str) -> int | None:
    return None if value in ("", "None", "-1", "-") else int(value)


class TransactionsCommand:
    """``kafka-transactions.sh`` against one cluster."""

    def __init__(self, dist: KafkaDistribution, bootstrap_servers: str,
                 *, command_config: Path | None = None) -> None:  # fmt: skip
        """``command_config``: a client properties file (SASL, TLS), e.g. from
        ``KafkaCluster.client_properties_file(user)``, to run the tool as that principal."""
        self.dist = dist
        self.bootstrap_servers = bootstrap_servers
        self.command_config = command_config

    def run(self, *args: str) -> str:
        config = [] if self.command_config is None else ["--command-config",
                                                          str(self.command_config)]  # fmt: skip
        return run_tool(self.dist, TRANSACTIONS_COMMAND,
                        ["--bootstrap-server", self.bootstrap_servers, *config, *args])  # fmt: skip

    def list_transactions(self) -> list[ListedTxn]:
        return [
            ListedTxn(
                transactional_id=row["TransactionalId"],
                coordinator=int(row["Coordinator"]),
                producer_id=int(row["ProducerId"]),
                state=row["TransactionState"],
            )
            for row in parse_table(self.run("list"))
        ]

    def describe(self, transactional_id: str) -> DescribedTxn:
        row = parse_table(self.run("describe", "--transactional-id", transactional_id))[0]
        partitions = row.get("TopicPartitions", "")
        return DescribedTxn(
            coordinator=int(row["CoordinatorId"]),
            transactional_id=row["TransactionalId"],
            producer_id=int(row["ProducerId"]),
            producer_epoch=int(row["ProducerEpoch"]),
            state=row["TransactionState"],
            timeout_ms=int(row["TransactionTimeoutMs"]),
            start_time_ms=_opt_int(row["CurrentTransactionStartTimeMs"]),
            partitions=tuple(p for p in partitions.split(",") if p),
        )

    def describe_producers(self, topic: str, partition: int) -> list[PartitionProducer]:
        out = self.run("describe-producers", "--topic", topic, "--partition", str(partition))
        return [
            PartitionProducer(
                producer_id=int(row["ProducerId"]),
                producer_epoch=int(row["ProducerEpoch"]),
                coordinator_epoch=int(row["LatestCoordinatorEpoch"]),
                last_sequence=int(row["LastSequence"]),
                last_timestamp_ms=int(row["LastTimestamp"]),
                current_txn_start_offset=_opt_int(row["CurrentTransactionStartOffset"]),
            )
            for row in parse_table(out)
        ]

    def find_hanging(
        self,
        *,
        topic: str | None = None,
        partition: int | None = None,
        broker_id: int | None = None,
        max_transaction_timeout_min: int | None = None,
    ) -> list[HangingTxn]:
        args = ["find-hanging"]
        if topic is not None:
            args += ["--topic", topic]
        if partition is not None:
            args += ["--partition", str(partition)]
        if broker_id is not None:
            args += ["--broker-id", str(broker_id)]
        if max_transaction_timeout_min is not None:
            args += ["--max-transaction-timeout", str(max_transaction_timeout_min)]
        return [
            HangingTxn(
                topic=row["Topic"],
                partition=int(row["Partition"]),
                producer_id=int(row["ProducerId"]),
                producer_epoch=int(row["ProducerEpoch"]),
                coordinator_epoch=int(row["CoordinatorEpoch"]),
                start_offset=int(row["StartOffset"]),
                last_timestamp_ms=int(row["LastTimestamp"]),
                duration_min=int(row["Duration(min)"]),
            )
            for row in parse_table(self.run(*args))
        ]

    def force_terminate(self, transactional_id: str) -> str:
        """Admin.forceTerminateTransaction (4.1+): fence the id's producer and abort its open
        transaction, 2PC or not (needs Write on the transactional id)."""
        return self.run("forceTerminateTransaction", "--transactionalId", transactional_id)

    def abort(self, topic: str, partition: int, start_offset: int) -> str:
        """Abort the open transaction starting at ``start_offset`` (WriteTxnMarkers)."""
        return self.run("abort", "--topic", topic, "--partition", str(partition),
                        "--start-offset", str(start_offset))  # fmt: skip


# -- JmxTool ------------------------------------------------------------------------------


class JmxTool:
    """Read MBean attributes of one broker once (``JmxTool --one-time true``)."""

    def __init__(self, dist: KafkaDistribution, jmx_port: int) -> None:
        self.dist = dist
        self.jmx_url = f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{jmx_port}/jmxrmi"

    def read(self, *object_names: str, attribute: str = "Value") -> dict[str, float]:
        """``{object name: value}`` for each MBean; a missing MBean is left out."""
        args = ["--jmx-url", self.jmx_url, "--one-time", "true", "--report-format", "csv",
                "--attributes", attribute]  # fmt: skip
        for name in object_names:
            args += ["--object-name", name]
        output = run_tool(self.dist, JMX_TOOL, args)
        values = parse_jmx_csv(output, attribute)
        if len(values) < len(object_names):
            log.info("JmxTool at %s: not every MBean was read:\n%s", self.jmx_url, output)
        return values

    def late_transactions(self) -> int:
        """PartitionsWithLateTransactionsCount: this broker's leader partitions with a late
        transaction (Kafka registers the gauge at start-up, so it is always there)."""
        values = self.read(LATE_TRANSACTIONS_MBEAN)
        if LATE_TRANSACTIONS_MBEAN not in values:
            raise ToolError(f"JmxTool at {self.jmx_url} did not report {LATE_TRANSACTIONS_MBEAN}")
        return int(values[LATE_TRANSACTIONS_MBEAN])

    def lso_lag(self, topic: str, partition: int) -> int | None:
        """LastStableOffsetLag of a partition this broker leads (None: no such gauge)."""
        name = lso_lag_mbean(topic, partition)
        value = self.read(name).get(name)
        return None if value is None else int(value)


def parse_jmx_csv(text: str, attribute: str = "Value") -> dict[str, float]:
    """Parse JmxTool's csv report of one sample: one ``<object name>:<attribute>,"<value>"``
    line per attribute (plus a ``time`` line). The object name itself holds unquoted
    commas, so only the last comma separates the value. Missing MBeans are not printed."""
    suffix = f":{attribute}"
    result: dict[str, float] = {}
    for line in text.splitlines():
        key, _, value = line.rpartition(",")
        value = value.strip().strip('"')
        if key.endswith(suffix) and value not in ("", "null"):
            result[key.removesuffix(suffix)] = float(value)
    return result
