"""Real Apache Kafka brokers (KRaft, combined broker+controller nodes) for tests and demos.

:class:`KafkaCluster` formats storage and starts ``N`` JVMs on 127.0.0.1 with free ports and
JMX on loopback, waits until every broker is in the cluster metadata, and always tears the
JVMs down (terminate, then kill the process group; an ``atexit`` guard covers crashes of the
test process). Nodes can be stopped and started again mid-test.
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from testbed.maven import KafkaDistribution, fetch
from testbed.proxy import DelayProxy

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Listener names the test bed uses itself.
RESERVED_LISTENERS = ("PLAINTEXT", "CONTROLLER")
STORAGE_TOOL = "kafka.tools.StorageTool"
BROKER_MAIN = "kafka.Kafka"
LOG_TAIL_LINES = 60
#: ListOffsets errors of a partition whose leadership is settling (a broker just restarted).
_LEADERSHIP_IN_FLUX = frozenset(
    {
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
    }
)
#: KRaft's own authorizer (``authorizer=True``).
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
#: The principal of the test bed's PLAINTEXT and CONTROLLER listeners: a super user when
#: the authorizer is on, so set-up, scenarios and Kafka's tools keep working.
SUPER_USER = "User:ANONYMOUS"
#: The SASL_PLAINTEXT (PLAIN) listener that ``sasl_users`` adds.
SASL_LISTENER = "SASL"


class BrokerStartError(RuntimeError):
    """A broker did not come up; the message carries the tail of its log."""


#: Ports this process has handed out: a port is never handed out twice, even once it is
#: free again (a JVM that is starting has not bound it yet).
_HANDED_OUT: set[int] = set()
#: Where :func:`free_port` looks when the kernel's ephemeral range leaves room below it.
_LOW_PORT = 10000
_RANDOM = random.Random()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now and that this process has
    not handed out before.

    Ports come from below the kernel's ephemeral range: the port the kernel gives a bind to
    port 0 is one it also gives outgoing connections, so a JVM starting seconds later could
    find it taken (CI lost a 3-node cluster start to exactly that, on the JMX port).
    """
    ephemeral_low, _ = _ephemeral_range()
    if ephemeral_low - _LOW_PORT >= 1000:
        for _ in range(200):
            port = _RANDOM.randrange(_LOW_PORT, ephemeral_low)
            if port not in _HANDED_OUT and _bindable(port):
                _HANDED_OUT.add(port)
                return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def lost_port_race(error: BaseException) -> bool:
    """Whether a failed start failed because a port was taken between choice and bind."""
    return "Address already in use" in str(error)


def port_is_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file, or a note that it does not exist."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<no log at {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def java_string_hash(value: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, 32-bit wrap-around)."""
    h = 0
    data = value.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def transaction_state_partition(transactional_id: str, num_partitions: int) -> int:
    """The ``__transaction_state`` partition that owns a transactional id (Kafka's
    ``Utils.abs(hashCode) % partitions``; ``Utils.abs`` maps MIN_VALUE to 0)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


LOG4J2_XML = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <File name="file" fileName="{log_path}" append="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="org.apache.kafka.controller" level="INFO"/>
    <Root level="INFO"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
"""

LOG4J1_PROPERTIES = """log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log_path}
log4j.appender.file.Append=true
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
"""


def write_logging_config(dist: KafkaDistribution, directory: Path, log_path: Path) -> Path:
    """Write the broker's logging config (log4j2 XML for 4.x, log4j 1.2 for 3.x)."""
    if dist.uses_log4j2:
        path = directory / "log4j2.xml"
        path.write_text(LOG4J2_XML.format(log_path=log_path))
    else:
        path = directory / "log4j.properties"
        path.write_text(LOG4J1_PROPERTIES.format(log_path=log_path))
    return path


@dataclass(frozen=True)
class Listener:
    """An extra client listener (besides the test bed's own PLAINTEXT one) on every node.

    ``properties`` are broker properties for this listener only; they are written with the
    ``listener.name.<name in lower case>.`` prefix, e.g. ``{"sasl.enabled.mechanisms":
    "PLAIN", "plain.sasl.jaas.config": "...", "ssl.client.auth": "required"}``.
    """

    security_protocol: str
    properties: Mapping[str, str] = field(default_factory=dict)
    #: Advertise a :class:`~testbed.proxy.DelayProxy` port instead of the listener's own,
    #: so every client of this listener can be slowed down (``KafkaCluster.set_latency``).
    via_proxy: bool = False

    def __post_init__(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"security protocol {self.security_protocol!r} is not one of "
                             f"{', '.join(SECURITY_PROTOCOLS)}")  # fmt: skip


@dataclass
class BrokerNode:
    """One combined broker+controller JVM."""

    node_id: int
    port: int
    controller_port: int
    jmx_port: int
    work_dir: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: extra listener name -> its port on this node
    listener_ports: dict[str, int] = field(default_factory=dict)
    #: extra listener name -> the port of its delay proxy (``Listener.via_proxy``)
    proxy_ports: dict[str, int] = field(default_factory=dict)
    paused: bool = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def listener_port(self, name: str) -> int:
        """The port clients use for the extra listener ``name`` (case-insensitive) on this
        node: its proxy's port when the listener goes through a delay proxy."""
        key = name.upper()
        if key in self.proxy_ports:
            return self.proxy_ports[key]
        try:
            return self.listener_ports[key]
        except KeyError:
            raise KeyError(f"node {self.node_id} has no listener {name!r}") from None

    @property
    def pid(self) -> int | None:
        """The JVM's pid while it runs."""
        return self.process.pid if self.process is not None and self.running else None

    @property
    def ports(self) -> tuple[int, ...]:
        """Every port this node listens on."""
        return (self.port, self.controller_port, self.jmx_port, *self.listener_ports.values())

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def config_path(self) -> Path:
        return self.work_dir / "server.properties"

    @property
    def log_path(self) -> Path:
        """The broker's own log (log4j)."""
        return self.work_dir / "server.log"

    @property
    def stdout_path(self) -> Path:
        """JVM stdout/stderr: crashes before logging is configured end up here."""
        return self.work_dir / "stdout.log"

    @property
    def jmx_url(self) -> str:
        return f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{self.jmx_port}/jmxrmi"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return (
            f"--- {self.log_path} ---\n{tail(self.log_path, lines)}\n"
            f"--- {self.stdout_path} ---\n{tail(self.stdout_path, 20)}"
        )


_LIVE_CLUSTERS: weakref.WeakSet[KafkaCluster] = weakref.WeakSet()


@atexit.register
def _stop_live_clusters() -> None:
    """Last line of defence against orphan JVMs when a test run dies without teardown."""
    for cluster in list(_LIVE_CLUSTERS):
        cluster.stop()


def _wait_all_threads_stopped(pid: int, timeout_s: float = 10.0) -> None:
    """SIGSTOP is delivered asynchronously: on a loaded machine a running thread may still
    answer a request for a moment. Wait until every thread of ``pid`` is stopped (Linux)."""
    tasks = Path(f"/proc/{pid}/task")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks.iterdir()]
        except (OSError, IndexError):
            return  # not Linux, or the process is gone
        if all(state in ("T", "t") for state in states):
            return
        time.sleep(0.05)
    log.warning("process %d: not every thread stopped after %.0f s", pid, timeout_s)


def plain_jaas_server_config(users: Mapping[str, str]) -> str:
    """The broker side PLAIN JAAS line for ``{user: password}``."""
    for user, password in users.items():
        if not user.replace("-", "").replace("_", "").isalnum() or '"' in password:
            raise ValueError(f"SASL user {user!r}: letters, digits, - and _ only; no quote "
                             "in the password")  # fmt: skip
    entries = " ".join(f'user_{user}="{password}"' for user, password in users.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {entries};"


class KafkaCluster:
    """``N`` KRaft nodes (each broker+controller) on loopback. Use as a context manager.

    ``server_properties`` override any generated property for every node (values are
    strings, as in ``server.properties``). ``extra_listeners`` adds client listeners (name ->
    security protocol, or a :class:`Listener` with per-listener properties), each on its own
    free port per node; the test bed itself keeps using the PLAINTEXT listener (readiness,
    topics, scenarios), which also stays the inter-broker listener.
    """

    def __init__(
        self,
        dist: KafkaDistribution | None = None,
        *,
        brokers: int = 1,
        work_dir: Path | None = None,
        server_properties: Mapping[str, str] | None = None,
        extra_listeners: Mapping[str, str | Listener] | None = None,
        transaction_max_timeout_ms: int | None = None,
        abort_timed_out_transaction_cleanup_interval_ms: int | None = None,
        authorizer: bool = False,
        sasl_users: Mapping[str, str] | None = None,
        super_users: tuple[str, ...] = (),
        heap: str = "512m",
        startup_timeout_s: float = 120.0,
        stop_timeout_s: float = 20.0,
    ) -> None:
        if brokers < 1:
            raise ValueError(f"brokers must be >= 1, got {brokers}")
        self.dist = dist or fetch()
        self.size = brokers
        self._own_work_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="kte-kafka-"))
        self.heap = heap
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.cluster_id = ""
        self.overrides = dict(server_properties or {})
        if transaction_max_timeout_ms is not None:
            self.overrides["transaction.max.timeout.ms"] = str(transaction_max_timeout_ms)
        if abort_timed_out_transaction_cleanup_interval_ms is not None:
            self.overrides["transaction.abort.timed.out.transaction.cleanup.interval.ms"] = str(
                abort_timed_out_transaction_cleanup_interval_ms
            )
        self.authorizer = authorizer
        self.sasl_users = dict(sasl_users or {})
        self.super_users = (SUPER_USER, *super_users)
        listeners: dict[str, str | Listener] = dict(extra_listeners or {})
        if self.sasl_users:
            if SASL_LISTENER in {name.upper() for name in listeners}:
                raise ValueError(f"sasl_users adds the listener {SASL_LISTENER}: do not give it")
            listeners[SASL_LISTENER] = Listener("SASL_PLAINTEXT", {
                "sasl.enabled.mechanisms": "PLAIN",
                "plain.sasl.jaas.config": plain_jaas_server_config(self.sasl_users),
            })  # fmt: skip
        if self.authorizer:
            self.overrides.setdefault("authorizer.class.name", STANDARD_AUTHORIZER)
            self.overrides.setdefault("super.users", ";".join(self.super_users))
        self.listeners = self._check_listeners(listeners)
        self.nodes: dict[int, BrokerNode] = {
            node_id: BrokerNode(
                node_id=node_id,
                port=free_port(),
                controller_port=free_port(),
                jmx_port=free_port(),
                work_dir=self.work_dir / f"node-{node_id}",
                listener_ports={name: free_port() for name in self.listeners},
                proxy_ports={name: free_port() for name, spec in self.listeners.items() if spec.via_proxy},
            )
            for node_id in range(1, brokers + 1)
        }
        self.proxies: dict[tuple[int, str], DelayProxy] = {
            (node.node_id, name): DelayProxy(port, node.listener_ports[name])
            for node in self.nodes.values()
            for name, port in node.proxy_ports.items()
        }
        self._admin: AdminClient | None = None

    # -- public surface -------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes.values())

    def bootstrap_for(self, listener: str) -> str:
        """Bootstrap servers of the extra listener ``listener`` (case-insensitive)."""
        return ",".join(f"127.0.0.1:{node.listener_port(listener)}" for node in self.nodes.values())

    @property
    def replication_factor(self) -> int:
        return min(3, self.size)

    @property
    def transaction_state_partitions(self) -> int:
        return int(self.properties(1)["transaction.state.log.num.partitions"])

    def node(self, node_id: int) -> BrokerNode:
        return self.nodes[node_id]

    def admin(self) -> AdminClient:
        """A shared confluent-kafka AdminClient on this cluster."""
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "logger": log})
        return self._admin

    def sasl_client_config(self, user: str) -> dict[str, str]:
        """confluent-kafka (librdkafka) settings for ``user`` on the SASL listener."""
        return {
            "bootstrap.servers": self.bootstrap_for(SASL_LISTENER),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": self._password(user),
        }

    def client_properties_file(self, user: str) -> Path:
        """A Java client properties file (``--command-config``) for ``user`` on the SASL
        listener; use it with :meth:`bootstrap_for` ``(SASL_LISTENER)``."""
        path = self.work_dir / f"client-{user}.properties"
        jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="{user}" password="{self._password(user)}";')  # fmt: skip
        path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={jaas}\n")
        return path

    def _password(self, user: str) -> str:
        try:
            return self.sasl_users[user]
        except KeyError:
            raise KeyError(f"no SASL user {user!r} on this cluster") from None

    def set_latency(self, delay_s: float, *, node_id: int | None = None,
                    listener: str | None = None) -> None:  # fmt: skip
        """Added latency per request on proxied listeners (all nodes, or one)."""
        for (proxy_node, name), proxy in self.proxies.items():
            if node_id in (None, proxy_node) and listener in (None, name, name.lower()):
                proxy.delay_s = delay_s

    def proxy(self, node_id: int, listener: str) -> DelayProxy:
        return self.proxies[(node_id, listener.upper())]

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

    def start(self) -> None:
        """Format every node, start them all, and wait until each one serves metadata."""
        _LIVE_CLUSTERS.add(self)
        started = time.monotonic()
        try:
            for proxy in self.proxies.values():
                proxy.start()
            self._format_all()
            for node in self.nodes.values():
                self._launch(node)
            self.wait_until_ready(set(self.nodes))
        except BaseException:
            self.stop()
            raise
        log.info(
            "Kafka %s cluster of %d up in %.1f s: %s",
            self.dist.version, self.size, time.monotonic() - started, self.bootstrap_servers,
        )  # fmt: skip

    def stop(self) -> None:
        """Stop every JVM (idempotent) and delete the work dir when we created it."""
        # SIGTERM all first: a node stopped last, alone, has lost its controller quorum
        # and would wait out its controlled shutdown.
        for node in self.nodes.values():
            if node.process is not None and node.process.poll() is None:
                self._continue(node)
                self._signal_group(node.process, signal.SIGTERM)
        for node in self.nodes.values():
            self._terminate(node)
        for proxy in self.proxies.values():
            proxy.stop()
        self._admin = None
        _LIVE_CLUSTERS.discard(self)
        if self._own_work_dir and self.work_dir.exists() and not os.environ.get("KTE_KEEP_LOGS"):
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def stop_broker(self, node_id: int) -> None:
        """Stop one node (its broker and controller) and wait until its port is closed."""
        self._terminate(self.nodes[node_id])

    def start_broker(self, node_id: int) -> None:
        """Restart a stopped (or killed) node and wait until it is back in the metadata."""
        node = self.nodes[node_id]
        if node.running:
            return
        self._launch(node)
        self.wait_until_ready({node_id})

    def kill_broker(self, node_id: int) -> None:
        """SIGKILL one node (no controlled shutdown, no flush) and wait until it is gone;
        :meth:`start_broker` brings it back (log recovery on start)."""
        node = self.nodes[node_id]
        proc = node.process
        if proc is None:
            return
        node.process = None
        node.paused = False
        self._signal_group(proc, signal.SIGKILL)
        proc.wait(timeout=30)
        self._wait_port_closed(node)

    def pause_broker(self, node_id: int) -> None:
        """SIGSTOP one node: its ports still accept connections (the kernel completes the
        handshake) but nothing is ever answered, until :meth:`resume_broker`."""
        node = self.nodes[node_id]
        if node.process is None or not node.running:
            raise RuntimeError(f"Kafka node {node_id} is not running")
        self._signal_group(node.process, signal.SIGSTOP)
        node.paused = True
        _wait_all_threads_stopped(node.process.pid)

    def resume_broker(self, node_id: int) -> None:
        """SIGCONT a paused node."""
        self._continue(self.nodes[node_id])

    def _continue(self, node: BrokerNode) -> None:
        if node.paused and node.process is not None:
            self._signal_group(node.process, signal.SIGCONT)
        node.paused = False

    def log_tails(self) -> str:
        return "\n".join(node.log_tail() for node in self.nodes.values())

    # -- properties and storage ---------------------------------------------------------

    def properties(self, node_id: int) -> dict[str, str]:
        """The full ``server.properties`` of a node, overrides applied."""
        node = self.nodes[node_id]
        single = self.size == 1
        extra = {name: f"127.0.0.1:{node.listener_port(name)}" for name in self.listeners}
        advertised = ",".join(
            [f"PLAINTEXT://127.0.0.1:{node.port}"]
            + [f"{name}://{address}" for name, address in extra.items()]
        )
        bound = ",".join(
            [f"PLAINTEXT://127.0.0.1:{node.port}"]
            + [f"{name}://127.0.0.1:{port}" for name, port in node.listener_ports.items()]
        )
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "listeners": f"{bound},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": advertised,
            "listener.security.protocol.map": ",".join(
                ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
                + [f"{name}:{spec.security_protocol}" for name, spec in self.listeners.items()]
            ),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(node.data_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": str(self.replication_factor),
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": str(self.replication_factor),
            "transaction.state.log.min.isr": "1" if self.size < 3 else "2",
            # Small but > 1, so coordinators spread over the brokers of a 3-node cluster.
            "transaction.state.log.num.partitions": "3" if single else "6",
            "group.initial.rebalance.delay.ms": "0",
            "default.replication.factor": str(self.replication_factor),
            "min.insync.replicas": "1",
        }
        props.update(self._quorum_properties())
        for name, spec in self.listeners.items():
            prefix = f"listener.name.{name.lower()}."
            props.update({prefix + key: value for key, value in spec.properties.items()})
        props.update(self.overrides)
        return props

    @staticmethod
    def _check_listeners(listeners: Mapping[str, str | Listener]) -> dict[str, Listener]:
        checked: dict[str, Listener] = {}
        for raw_name, spec in listeners.items():
            name = raw_name.upper()
            if not name.replace("_", "").isalnum() or name in RESERVED_LISTENERS:
                raise ValueError(f"invalid extra listener name {raw_name!r} (letters, digits, _; "
                                 f"not {' or '.join(RESERVED_LISTENERS)})")  # fmt: skip
            if name in checked:
                raise ValueError(f"listener {name} is given twice")
            checked[name] = spec if isinstance(spec, Listener) else Listener(spec)
        return checked

    def _uses_standalone_format(self) -> bool:
        """4.x single node: dynamic quorum bootstrapped with ``format --standalone``."""
        return self.size == 1 and self.dist.major >= 4

    def _quorum_properties(self) -> dict[str, str]:
        if self._uses_standalone_format():
            node = self.nodes[1]
            return {"controller.quorum.bootstrap.servers": f"127.0.0.1:{node.controller_port}"}
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes.values())
        return {"controller.quorum.voters": voters}

    def _java(self, classpath: str, *args: str) -> list[str]:
        return ["java", "-cp", classpath, *args]

    def _random_cluster_id(self) -> str:
        proc = subprocess.run(
            self._java(self.dist.broker_classpath, STORAGE_TOOL, "random-uuid"),
            capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        return proc.stdout.strip().splitlines()[-1]

    def _format_all(self) -> None:
        self.cluster_id = self.cluster_id or self._random_cluster_id()
        for node in self.nodes.values():
            node.work_dir.mkdir(parents=True, exist_ok=True)
            if node.data_dir.exists():
                continue  # formatted before: a restart keeps its data
            self._write_config(node)
            cmd = self._java(
                self.dist.broker_classpath, STORAGE_TOOL, "format",
                "-t", self.cluster_id, "-c", str(node.config_path),
            )  # fmt: skip
            if self._uses_standalone_format():
                cmd.append("--standalone")
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
            if proc.returncode != 0:
                raise BrokerStartError(
                    f"formatting node {node.node_id} failed:\n{proc.stdout}\n{proc.stderr}"
                )

    def _write_config(self, node: BrokerNode) -> None:
        lines = [f"{k}={v}" for k, v in sorted(self.properties(node.node_id).items())]
        node.config_path.write_text("\n".join(lines) + "\n")

    # -- processes ------------------------------------------------------------------------

    def _jvm_args(self, node: BrokerNode) -> list[str]:
        logging_config = write_logging_config(self.dist, node.work_dir, node.log_path)
        jmx = "-Dcom.sun.management.jmxremote"
        return [
            f"-Xmx{self.heap}",
            "-Xms64m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # C1 only: faster start-up, less CPU on 2 cores
            "-Djava.awt.headless=true",
            jmx,
            f"{jmx}.port={node.jmx_port}",
            f"{jmx}.rmi.port={node.jmx_port}",
            f"{jmx}.host=127.0.0.1",
            f"{jmx}.authenticate=false",
            f"{jmx}.ssl=false",
            "-Djava.rmi.server.hostname=127.0.0.1",
            *self.dist.logging_jvm_args(logging_config),
        ]

    def _launch(self, node: BrokerNode) -> None:
        self._write_config(node)
        cmd = ["java", *self._jvm_args(node), "-cp", self.dist.broker_classpath]
        cmd += [BROKER_MAIN, str(node.config_path)]
        log.info("starting Kafka node %d on port %d (jmx %d)", node.node_id, node.port,
                 node.jmx_port)  # fmt: skip
        out: IO[bytes]
        with node.stdout_path.open("ab") as out:
            node.process = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=node.work_dir,
            )  # fmt: skip

    def _terminate(self, node: BrokerNode) -> None:
        proc = node.process
        if proc is None:
            return
        node.process = None
        if proc.poll() is None:
            self._signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("Kafka node %d ignored SIGTERM, killing it", node.node_id)
                self._signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=10)
        # The JVM is the group leader; kill anything it left behind in its group.
        self._signal_group(proc, signal.SIGKILL)
        self._wait_port_closed(node)

    @staticmethod
    def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            log.debug("process group %d already gone", proc.pid)

    def _wait_port_closed(self, node: BrokerNode, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not any(port_is_open(p) for p in node.ports):
                return
            time.sleep(0.2)
        log.warning("ports of Kafka node %d still open after stop", node.node_id)

    # -- readiness ------------------------------------------------------------------------

    def wait_until_ready(self, node_ids: set[int]) -> None:
        """Block until every node in ``node_ids`` is a live broker in the metadata."""
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            self._check_alive(node_ids)
            live = self.live_broker_ids()
            if node_ids <= live:
                return
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"brokers {sorted(node_ids - live)} not up after {self.startup_timeout_s} s\n"
                    + "\n".join(self.nodes[n].log_tail() for n in sorted(node_ids))
                )
            time.sleep(0.5)

    def _check_alive(self, node_ids: set[int]) -> None:
        for node_id in sorted(node_ids):
            node = self.nodes[node_id]
            if not node.running:
                code = node.process.returncode if node.process else None
                raise BrokerStartError(
                    f"Kafka node {node_id} exited (code {code}) during start-up\n" + node.log_tail()
                )

    def live_broker_ids(self) -> set[int]:
        """Broker ids in the metadata, or an empty set when no broker answers."""
        try:
            md = self.admin().list_topics(timeout=2)
        except KafkaException as exc:
            log.debug("metadata not available yet: %s", exc)
            return set()
        return set(md.brokers)

    # -- topics, leaders, coordinators ------------------------------------------------------

    def create_topic(
        self,
        name: str,
        *,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
    ) -> str:
        """Create a topic and wait until every partition has a leader that answers ListOffsets
        (the metadata names a leader before the leader has loaded the partition: a reader that
        comes too soon gets NOT_LEADER_OR_FOLLOWER)."""
        rf = replication_factor or self.replication_factor
        topic = NewTopic(name, num_partitions=partitions, replication_factor=rf,
                         config=dict(config or {}))  # fmt: skip
        futures = self.admin().create_topics([topic], operation_timeout=timeout_s)
        futures[name].result(timeout=timeout_s)
        deadline = time.monotonic() + timeout_s
        while not self._all_partitions_led(name, partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name} has leaderless partitions")
            time.sleep(0.2)
        while not self._all_partitions_answer(name, partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name}: not every partition answers ListOffsets")
            time.sleep(0.2)
        return name

    def _all_partitions_answer(self, topic: str, partitions: int) -> bool:
        from confluent_kafka.admin import OffsetSpec

        wanted = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
        try:
            futures = self.admin().list_offsets(wanted, request_timeout=5)
            for future in futures.values():
                future.result(timeout=10)
        except KafkaException as exc:
            log.debug("topic %s not readable yet: %s", topic, exc)
            return False
        return True

    def _all_partitions_led(self, topic: str, partitions: int) -> bool:
        md = self.admin().list_topics(topic=topic, timeout=5)
        meta = md.topics.get(topic)
        if meta is None or meta.error is not None or len(meta.partitions) != partitions:
            return False
        return all(p.leader >= 0 for p in meta.partitions.values())

    def partition_leaders(self, topic: str) -> dict[int, int]:
        """``{partition: leader broker id}`` from the metadata (-1 when leaderless)."""
        md = self.admin().list_topics(topic=topic, timeout=10)
        meta = md.topics[topic]
        if meta.error is not None:
            raise KafkaException(meta.error)
        return {p.id: p.leader for p in meta.partitions.values()}

    def leader_of(self, topic: str, partition: int) -> int:
        return self.partition_leaders(topic)[partition]

    def coordinator_of(self, transactional_id: str) -> int:
        """The broker that coordinates ``transactional_id`` (FindCoordinator)."""
        from testbed.rawclient import RawClient

        with RawClient(self.bootstrap_servers) as raw:
            return raw.find_transaction_coordinator(transactional_id)

    def transactional_id_coordinated_by(
        self, prefix: str, *, broker_ids: set[int] | None = None, avoid: set[int] | None = None
    ) -> str:
        """A fresh transactional id whose coordinator is in ``broker_ids`` and not in ``avoid``
        (when that leaves no broker, ``avoid`` is ignored).

        Uses Kafka's id -> ``__transaction_state`` partition hash and that topic's leaders,
        so no request is sent per candidate.
        """
        self.ensure_transaction_state_topic()
        leaders = self.partition_leaders(TRANSACTION_STATE_TOPIC)
        candidates = broker_ids or set(self.nodes)
        # On a single node nothing can be avoided: take what there is.
        wanted = (candidates - (avoid or set())) or candidates
        for n in range(10_000):
            candidate = f"{prefix}-{uuid.uuid4().hex[:8]}-{n}"
            state_partition = transaction_state_partition(candidate, len(leaders))
            if leaders.get(state_partition) in wanted:
                return candidate
        raise LookupError(f"no transactional id coordinated by {sorted(wanted)}")

    def ensure_transaction_state_topic(self, timeout_s: float = 60.0) -> None:
        """Create ``__transaction_state`` (FindCoordinator does) and wait for its leaders."""
        deadline = time.monotonic() + timeout_s
        self.coordinator_of("kte-warm-up")
        while not self._all_partitions_led(TRANSACTION_STATE_TOPIC,
                                           self.transaction_state_partitions):  # fmt: skip
            if time.monotonic() > deadline:
                raise TimeoutError("__transaction_state has leaderless partitions")
            time.sleep(0.3)

    def end_offsets(self, topic: str, partition: int, timeout_s: float = 20.0) -> tuple[int, int]:
        """``(high watermark, last stable offset)`` of one partition (ListOffsets).

        A retriable error is asked again until ``timeout_s``: just after a broker restart the
        client may already know a leader epoch the broker has not applied yet
        (UNKNOWN_LEADER_EPOCH), or the leader may still be moving back."""
        from confluent_kafka import IsolationLevel
        from confluent_kafka.admin import OffsetSpec

        admin = self.admin()
        tp = TopicPartition(topic, partition)
        deadline = time.monotonic() + timeout_s
        result: list[int] = []
        for isolation in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
            while True:
                futures = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=isolation)
                try:
                    result.append(int(futures[tp].result(timeout=10).offset))
                    break
                except KafkaException as e:
                    error = e.args[0]
                    transient = error.retriable() or error.code() in _LEADERSHIP_IN_FLUX
                    if not transient or time.monotonic() > deadline:
                        raise
                    time.sleep(0.3)
        return result[0], result[1]

    def __iter__(self) -> Iterator[BrokerNode]:
        return iter(self.nodes.values())
