"""The config model: one declaration per section, its defaults in the dataclass.

The YAML file (``load_config``), the daemon's flags (``--web.listen-address``) and the
operator's connection flags (``--bootstrap-server``, ``--command-config``,
``--request-timeout``) are all read by the sections declared here.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from exporter.config.groups import (
    BUILTIN_RULES,
    AttributionRule,
    GroupsConfig,
    parse_attribution,
    parse_groups,
)
from exporter.config.history import HistoryConfig, parse_history_section
from exporter.config.keys import (
    ENV_REF,
    INVALID,
    Choice,
    ConfigError,
    Duration,
    Flag,
    Integer,
    Items,
    Key,
    Kind,
    Nested,
    Parsed,
    Patterns,
    Reader,
    Section,
    StringMap,
    Text,
    Where,
    text_problem,
    type_name,
)
from exporter.config.remediation import RemediationConfig, parse_remediation
from exporter.config.yamlfile import read_yaml
from exporter.model import PipelineSettings

DEFAULT_LISTEN_ADDRESS = ":9851"
DEFAULT_CLUSTER_LABEL = "kafka_cluster"
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
LSO_LAG_SERIES = ("nonzero", "open", "all")
#: librdkafka's maximum socket.timeout.ms: a longer request timeout fails every request.
MAX_REQUEST_TIMEOUT_MS = 300_000

#: librdkafka properties that carry secrets: never logged, never exported, never quoted in a
#: message, and refused as literals in the file unless ``allow_literal_secrets: true``.
SECRET_PROPERTIES = frozenset(
    {
        "sasl.password",
        "sasl.oauthbearer.client.secret",
        "ssl.key.password",
        "sasl.oauthbearer.config",
    }
)
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
#: Not available: the confluent-kafka wheels' librdkafka is built without Kerberos, and
#: kafka-python needs the separate ``gssapi`` package.
UNSUPPORTED_SASL_MECHANISMS = {
    "GSSAPI": "the confluent-kafka wheel's librdkafka is built "
    "without Kerberos support (PLAIN, SCRAM and OAUTHBEARER work)"
}
#: What OAUTHBEARER needs: kafka-python gets its tokens by the OIDC client-credentials grant.
OAUTHBEARER_OIDC_PROPERTIES = (
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.token.endpoint.url",
)
#: librdkafka properties the exporter understands and maps to both client libraries.
KAFKA_PROPERTIES = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "sasl.kerberos.service.name",
        "sasl.kerberos.principal",
        "sasl.kerberos.keytab",
        "sasl.oauthbearer.method",
        "sasl.oauthbearer.client.id",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.token.endpoint.url",
        "sasl.oauthbearer.scope",
        "sasl.oauthbearer.config",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "client.id",
    }
)
#: The largest secret file read (a Kubernetes Secret is at most 1 MiB).
_MAX_SECRET_FILE_BYTES = 1 << 20


# --- addresses ----------------------------------------------------------------------------------

#: A host is a DNS name or an IPv4 address (ASCII: an internationalised name is written in
#: its xn-- form), or an IPv6 address in brackets.
_HOST_PORT = re.compile(
    r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+(?:%[A-Za-z0-9._-]+)?)\]|(?P<host>[A-Za-z0-9._-]*)):(?P<port>[0-9]{1,5})$"
)


def split_host_port(address: str) -> tuple[str, int] | None:
    """``host:port``, ``:port`` or ``[ipv6]:port`` to (host without brackets, port); None when
    it is none of these."""
    m = _HOST_PORT.match(address.strip())
    if m is None or int(m.group("port")) > 65535:
        return None
    if m.group("v6") is not None:
        try:
            ipaddress.IPv6Address(m.group("v6").split("%", 1)[0])
        except ValueError:
            return None
        return m.group("v6"), int(m.group("port"))
    return m.group("host"), int(m.group("port"))


#: Paths the HTTP server answers itself: the telemetry path must be none of them, or one of
#: the two would be unreachable (the probes are answered first).
RESERVED_PATHS = ("/", "/healthz", "/readyz")


def _telemetry_path_problem(path: str) -> str | None:
    if path in RESERVED_PATHS:
        return f"is answered by the exporter itself (reserved: {', '.join(RESERVED_PATHS)})"
    return None


def _listen_address_problem(address: str) -> str | None:
    if split_host_port(address) is None:
        return "is not HOST:PORT, :PORT or [IPV6]:PORT (port 0-65535)"
    return None


def _bootstrap_problem(servers: str) -> str | None:
    parts = [s.strip() for s in servers.split(",")]
    bad = [p for p in parts if not p or (hp := split_host_port(p)) is None or not hp[0] or hp[1] == 0]
    if bad:
        return "must be HOST:PORT[,HOST:PORT...] (IPv6 as [ADDRESS]:PORT)"
    return None


# --- sections -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WebConfig:
    listen_address: str = DEFAULT_LISTEN_ADDRESS
    telemetry_path: str = "/metrics"
    #: Prometheus exporter-toolkit web config file: TLS and basic auth (exporter.daemon.web).
    config_file: str | None = None
    #: A connection must deliver its TLS handshake and request head within this time.
    read_timeout_ms: int = 5000
    #: Threads that answer requests (a scrape renders on one of them).
    workers: int = 4

    @property
    def host_port(self) -> tuple[str, int]:
        """(host, port) to bind: ``:9851`` binds every IPv4 address, ``[::]:9851`` every
        address, ``[::1]:9851`` IPv6 loopback."""
        split = split_host_port(self.listen_address)
        assert split is not None, "validated by the config model"
        host, port = split
        return (host or "0.0.0.0", port)

    @property
    def is_ipv6(self) -> bool:
        return ":" in self.host_port[0]


@dataclass(frozen=True)
class LogConfig:
    level: str = "info"
    format: str = "text"


_SPARK_MASTER = r"local(\[(\*|[0-9]+)(,[0-9]+)?\])?|spark://.+|yarn|k8s://.+"


@dataclass(frozen=True)
class SparkConfig:
    """Where the pipeline runs: embedded local mode, a cluster master, or Spark Connect.

    Supervision (``exporter.daemon.pipeline``): every pipeline call has a deadline
    (``pipeline_timeout_ms``, or derived from the shortest cluster interval when ``None``);
    the session is restarted with back-off when it dies or hangs; ``/healthz`` answers 503
    when pipeline runs have failed for ``unhealthy_after_intervals`` intervals in a row.
    """

    #: Spark's memory manager refuses a driver heap below 1.5 x its 300 MiB reserve.
    MIN_DRIVER_MEMORY_MB: ClassVar[int] = 512
    #: A 64-bit JVM on Linux cannot reserve a heap beyond half of its 128 TiB address space
    #: (``-Xmx128t``: "Could not reserve enough space"; larger: "Invalid maximum heap size").
    MAX_DRIVER_MEMORY_MB: ClassVar[int] = 64 << 20
    #: ``local[N]`` and ``local[N,F]``: at most this many threads and task failures.
    MAX_LOCAL_THREADS: ClassVar[int] = 1024

    master: str = "local[2]"
    connect_url: str | None = None
    app_name: str = "kafka-txn-exporter"
    local_dir: str | None = None
    driver_memory: str = "512m"
    conf: Mapping[str, str] = field(default_factory=dict)
    #: Loopback port of a Spark Connect endpoint inside the embedded driver (the CLI's warm
    #: engine); ``None`` or 0: no endpoint.
    connect_server_port: int | None = None
    #: A class archive of the embedded driver's JVM (``kafka-txn-exporter class-archive``):
    #: mapped at start when the file exists, for a faster start; ``None``: none.
    class_archive: str | None = None
    pipeline_timeout_ms: int | None = None
    start_timeout_ms: int = 180_000
    unhealthy_after_intervals: int = 3
    #: /healthz answers 503 once this many starts of Spark failed in a row.
    unhealthy_after_failed_starts: int = 3

    @property
    def redacted_connect_url(self) -> str | None:
        """The Connect URL without its parameters (``/;token=...`` carries credentials)."""
        return None if self.connect_url is None else redact_connect_url(self.connect_url)

    def __repr__(self) -> str:  # keep a Connect token out of logs and tracebacks
        return (
            f"SparkConfig(master={self.master!r}, connect_url={self.redacted_connect_url!r}, "
            f"app_name={self.app_name!r}, driver_memory={self.driver_memory!r})"
        )


def redact_connect_url(url: str) -> str:
    return url.split("/;", 1)[0].split(";", 1)[0]


#: Spark settings whose name does not say they hold a secret, but which do.
SPARK_SECRET_SETTINGS = frozenset(
    {
        "spark.hadoop.fs.adl.oauth2.credential",
        "spark.hadoop.dfs.adls.oauth2.credential",
        "spark.hadoop.fs.s3.awsAccessKeyId",
        "spark.hadoop.fs.s3n.awsAccessKeyId",
    }
)
#: Spark settings under these prefixes hold secrets (Azure SAS tokens per container).
SPARK_SECRET_PREFIXES = ("spark.hadoop.fs.azure.sas.",)
_SECRET_WORDS = ("secret", "password", "passwd", "token")


def is_secret_spark_setting(name: str) -> bool:
    """Whether a Spark setting holds a secret: a part of its name (between dots, dashes or
    underscores) holds secret, password or token, or is or ends with "key" (``access.key``,
    ``secretKey``, ``fs.azure.account.key.<account>``, ``apikey``; not ``keytab``,
    ``keyStore``, ``keyLength``), or it is in :data:`SPARK_SECRET_SETTINGS` or under
    :data:`SPARK_SECRET_PREFIXES`. Such a setting never goes on a command line
    (``exporter.pipeline.session``) and is refused as a literal in the file."""
    if name in SPARK_SECRET_SETTINGS or name.startswith(SPARK_SECRET_PREFIXES):
        return True
    parts = re.split(r"[._-]", name.lower())
    return any(word in part for part in parts for word in _SECRET_WORDS) or any(
        part.endswith("key") for part in parts
    )


#: Kafka's legal topic name characters: an allow pattern made only of them is a name.
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(frozen=True)
class TopicFilter:
    allow: tuple[str, ...] = (".*",)
    deny: tuple[str, ...] = ()

    def compiled(self) -> tuple[list[re.Pattern[str]], list[re.Pattern[str]]]:
        return [re.compile(p) for p in self.allow], [re.compile(p) for p in self.deny]

    def matcher(self) -> Callable[[str], bool]:
        allow, deny = self.compiled()

        def matches(topic: str) -> bool:
            return any(p.fullmatch(topic) for p in allow) and not any(p.fullmatch(topic) for p in deny)

        return matches

    def named_topics(self) -> tuple[str, ...]:
        """Allowed patterns that are plain topic names (``orders``, ``billing.v1``): topics the
        operator named, so one missing from the metadata is worth asking about."""
        matches = self.matcher()
        return tuple(sorted({p for p in self.allow if _TOPIC_NAME.fullmatch(p) and matches(p)}))


@dataclass(frozen=True)
class ClusterConfig:
    name: str
    bootstrap_servers: str
    interval_ms: int = 30_000
    request_timeout_ms: int = 10_000
    topics: TopicFilter = field(default_factory=TopicFilter)
    #: Read the record batch at each open transaction's start offset for its start time.
    read_batch_timestamps: bool = True
    #: librdkafka properties (security etc.), secrets already resolved.
    kafka: Mapping[str, str] = field(default_factory=dict)
    #: The consumer-group family (docs/groups.md); off unless configured.
    groups: GroupsConfig = field(default_factory=GroupsConfig)
    #: Guarded auto-remediation (docs/runbook.md); off unless configured.
    remediation: RemediationConfig = field(default_factory=RemediationConfig)

    def redacted_kafka(self) -> dict[str, str]:
        return {k: ("<redacted>" if k in SECRET_PROPERTIES else v) for k, v in self.kafka.items()}

    def __repr__(self) -> str:  # keep secrets out of logs and tracebacks
        return (
            f"ClusterConfig(name={self.name!r}, bootstrap_servers={self.bootstrap_servers!r}, "
            f"interval_ms={self.interval_ms}, kafka={self.redacted_kafka()!r})"
        )


@dataclass(frozen=True)
class CollectionConfig:
    """How the daemon shares its collection threads and Kafka connections among the clusters
    (exporter.daemon.rounds): bounded whatever the number of clusters."""

    #: Clusters collected at once (each uses up to 8 more threads for its stages).
    workers: int = 8
    #: Clusters whose Kafka clients stay open between cycles (the most recently collected);
    #: the others' clients are closed after each collection (no thread, no socket while idle).
    clients_kept_open: int = 16


@dataclass(frozen=True)
class Config:
    clusters: tuple[ClusterConfig, ...]
    web: WebConfig = field(default_factory=WebConfig)
    log: LogConfig = field(default_factory=LogConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    #: The label that carries the Kafka cluster's name on every series. ``cluster`` belongs to
    #: the Kubernetes cluster in kube-prometheus setups, as in Grafana's Kafka mixin.
    cluster_label: str = DEFAULT_CLUSTER_LABEL
    #: Secrets written literally in the file are refused unless this is true.
    allow_literal_secrets: bool = False
    #: The transaction history (docs/history.md); None: off.
    history: HistoryConfig | None = None
    #: Where each cluster's pipeline memory is kept across restarts (confirmations, markers
    #: pending and blocked-consumer clocks); None: in the process only.
    state_dir: str | None = None
    #: Transactional id -> application rules (docs/groups.md), the built-ins by default.
    attribution: tuple[AttributionRule, ...] = BUILTIN_RULES
    #: A directory of cluster files (one cluster per ``*.yml`` / ``*.yaml``), read with the
    #: file and again on SIGHUP; their clusters follow those of ``clusters``.
    cluster_files: str | None = None
    collection: CollectionConfig = field(default_factory=CollectionConfig)


# --- the Kafka client properties ------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaProperties(Kind):
    """librdkafka properties as values (``kafka``) or as files holding the value
    (``kafka_files``)."""

    from_files: bool = False
    json_types: frozenset[str] = frozenset({"object"})

    def read(self, r: Reader, raw: object, where: Where, name: str) -> object:
        inner = where.child(name)
        d = r.mapping(raw, inner, where.key(name), None)
        props: dict[str, str] = {}
        for key, value in d.items():
            path = inner.key(key)
            secret = key in SECRET_PROPERTIES
            if key not in KAFKA_PROPERTIES:
                r.problem(path, f"unsupported property (allowed: {', '.join(sorted(KAFKA_PROPERTIES))})")
                continue
            if isinstance(value, bool) or not isinstance(value, str | int):
                kind = "a file name" if self.from_files else "a string or a number"
                r.problem(path, f"must be {kind}, got {type_name(value)}")
                continue
            if self.from_files:
                r.from_env.add(where.child("kafka").key(key))  # never quoted, as secrets
                content = _read_secret_file(r, path, r.base_dir / str(value))
                if content is not None and text_problem(content):
                    r.problem(path, f"the file's content {text_problem(content)}")
                elif content is not None:
                    props[key] = content
                continue
            literal = not (isinstance(value, str) and ENV_REF.match(value))
            if secret and literal and not r.allow_literal_secrets:
                r.problem(
                    path,
                    'a literal secret in the file is refused: write "${ENV_VAR}" '
                    "or use kafka_files (or set allow_literal_secrets: true)",
                )
                continue
            resolved = r.resolve(value, path)
            if resolved is INVALID:
                continue
            unusable = text_problem(str(resolved))
            if unusable is not None:
                r.problem(path, unusable)
                continue
            props[key] = str(resolved)
        return props


def _read_secret_file(r: Reader, path: str, file_path: Path) -> str | None:
    try:
        with file_path.open("rb") as f:
            data = f.read(_MAX_SECRET_FILE_BYTES + 1)
    except OSError as e:
        r.problem(path, f"cannot read {file_path}: {e.strerror}")
        return None
    except ValueError:  # e.g. an embedded NUL byte in the name
        r.problem(path, "is not a usable file name")
        return None
    if len(data) > _MAX_SECRET_FILE_BYTES:
        r.problem(path, f"{file_path} is larger than 1 MiB")
        return None
    try:
        return data.decode().strip()
    except UnicodeDecodeError:
        r.problem(path, f"{file_path} is not UTF-8 text")
        return None


def check_kafka_properties(
    r: Reader, props: dict[str, str], where: Where, *, incomplete: bool = False
) -> None:
    """Security settings that go together, as both client libraries need them.
    ``incomplete``: some properties were refused already; do not call them missing."""
    if "sasl.mechanisms" in props:  # librdkafka alias
        props.setdefault("sasl.mechanism", props.pop("sasl.mechanisms"))
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        path = where.key("security.protocol")
        r.problem(
            path,
            f"{r.show(path, protocol)} is not allowed (allowed: {', '.join(SECURITY_PROTOCOLS)})",
        )
    mechanism = props.get("sasl.mechanism")
    if not protocol.startswith("SASL"):
        return
    if mechanism is None:
        r.problem(
            where.key("sasl.mechanism"), f"required with {protocol} (allowed: {', '.join(SASL_MECHANISMS)})"
        )
    elif mechanism in UNSUPPORTED_SASL_MECHANISMS:
        r.problem(
            where.key("sasl.mechanism"),
            f"{mechanism} is not supported: {UNSUPPORTED_SASL_MECHANISMS[mechanism]}",
        )
    elif mechanism not in SASL_MECHANISMS:
        r.problem(
            where.key("sasl.mechanism"),
            f"{r.show(where.key('sasl.mechanism'), mechanism)} is not allowed "
            f"(allowed: {', '.join(SASL_MECHANISMS)})",
        )
    if incomplete:
        return
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and not (
        props.get("sasl.username") and props.get("sasl.password")
    ):
        r.problem(where.label, f"sasl.username and sasl.password are required for {mechanism}")
    if mechanism == "OAUTHBEARER":
        method = props.get("sasl.oauthbearer.method", "default").lower()
        if method != "oidc":
            r.problem(
                where.key("sasl.oauthbearer.method"),
                "OAUTHBEARER needs sasl.oauthbearer.method: oidc (the client-credentials "
                f"grant) with {', '.join(OAUTHBEARER_OIDC_PROPERTIES)}",
            )
        missing = [k for k in OAUTHBEARER_OIDC_PROPERTIES if not props.get(k)]
        if missing:
            r.problem(where.label, f"OAUTHBEARER (oidc) needs {', '.join(missing)}")
        url = props.get("sasl.oauthbearer.token.endpoint.url", "")
        if url and not re.match(r"^https?://[^\s/]+", url):
            r.problem(where.key("sasl.oauthbearer.token.endpoint.url"), "must be an http:// or https:// URL")


def _check_cluster(r: Reader, values: dict[str, Any], where: Where) -> None:
    props = dict(values.pop("kafka_files", {}))
    props = {**values.get("kafka", {}), **props}
    kafka_where = where.child("kafka")
    # A known property that was refused (a literal secret, a bad value) is not "missing".
    refused = tuple(
        f"{w.key(k)}:" for w in (kafka_where, where.child("kafka_files")) for k in KAFKA_PROPERTIES
    )
    incomplete = any(p.startswith(refused) for p in r.problems)
    check_kafka_properties(r, props, kafka_where, incomplete=incomplete)
    values["kafka"] = props
    if "bootstrap_servers" in values:
        values["bootstrap_servers"] = ",".join(s.strip() for s in values["bootstrap_servers"].split(","))
    interval = values.get("interval_ms", CLUSTER.default("interval_ms"))
    timeout = values.get("request_timeout_ms", CLUSTER.default("request_timeout_ms"))
    keys = (where.key("interval") + ":", where.key("request_timeout") + ":")
    already = any(p.startswith(keys) for p in r.problems)
    if r.scheduled and not already and timeout >= interval:
        r.problem(where.key("request_timeout"), "must be shorter than the interval")


def _check_spark(r: Reader, values: dict[str, Any], where: Where) -> None:
    _check_driver_memory(r, values.get("driver_memory"), where.key("driver_memory"))
    _check_local_master(r, values.get("master"), where.key("master"))
    port = values.get("connect_server_port")
    if isinstance(port, int) and port and not 1024 <= port <= 65535:
        r.problem(where.key("connect_server_port"), f"{port} is not a port in 1024-65535 (0: off)")
    url = values.get("connect_url")
    if url is None:
        return
    if isinstance(port, int) and port:
        r.problem(
            where.key("connect_server_port"),
            "only for the embedded Spark; with connect_url the exporter starts no JVM",
        )
    path = where.key("connect_url")
    if not url.startswith("sc://") or len(url) <= len("sc://"):
        r.problem(path, f"{r.show(path, redact_connect_url(url))} must be a Spark Connect URL sc://HOST:PORT")
    elif ";token=" in url and path not in r.from_env and not r.allow_literal_secrets:
        r.problem(
            path,
            'a literal token in the file is refused: write "${ENV_VAR}" (or set allow_literal_secrets: true)',
        )


_JVM_SIZE_MB = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1 << 20}


def _check_driver_memory(r: Reader, memory: object, path: str) -> None:
    if not isinstance(memory, str) or (m := re.fullmatch(r"([0-9]+)([kmgt])", memory)) is None:
        return
    mb = int(m.group(1)) * _JVM_SIZE_MB[m.group(2)]
    if mb < SparkConfig.MIN_DRIVER_MEMORY_MB:
        r.problem(
            path,
            f"{memory!r} is below the minimum {SparkConfig.MIN_DRIVER_MEMORY_MB}m "
            "(Spark reserves 300 MiB of the driver heap and refuses to start below "
            "1.5 times that)",
        )
    elif mb > SparkConfig.MAX_DRIVER_MEMORY_MB:
        r.problem(
            path,
            f"{_short(memory)} is above the maximum {SparkConfig.MAX_DRIVER_MEMORY_MB >> 20}t "
            "(a 64-bit JVM cannot reserve a larger heap)",
        )


_LOCAL_MASTER = re.compile(r"local\[([0-9]+|\*)(?:,([0-9]+))?\]")


def _check_local_master(r: Reader, master: object, path: str) -> None:
    """``local[N]`` and ``local[N,F]``: Spark refuses 0 threads and numbers beyond an int."""
    if not isinstance(master, str) or (m := _LOCAL_MASTER.fullmatch(master)) is None:
        return
    top = SparkConfig.MAX_LOCAL_THREADS
    for number, what in ((m.group(1), "threads"), (m.group(2), "task failures")):
        if number is not None and number != "*" and not 1 <= int(number) <= top:
            r.problem(path, f"{_short(master)}: {what} must be between 1 and {top}")


def _short(value: str) -> str:
    return repr(value) if len(value) <= 40 else repr(value[:37] + "...")


def _app_name_problem(name: str) -> str | None:
    if not name.strip() or len(name) > 200 or any(not c.isprintable() for c in name):
        return "must be 1-200 printable characters (Spark refuses an empty name)"
    return None


def _state_dir_problem(path: str) -> str | None:
    if not path.strip():
        return "must be a directory (remove the key to keep the memory in the process only)"
    return None


def _label_problem(label: str) -> str | None:
    if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", label) or label.startswith("__"):
        return "is not a Prometheus label name"
    return None


WEB = Section(
    WebConfig,
    (
        Key("listen_address", "listen_address", Text(check=_listen_address_problem)),
        Key(
            "telemetry_path",
            "telemetry_path",
            Text(
                pattern=r"/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*",
                shape="a URL path starting with / (ASCII, as clients send it)",
                check=_telemetry_path_problem,
            ),
        ),
        Key("config_file", "config_file", Text(empty_is_none=True)),
        Key("read_timeout", "read_timeout_ms", Duration(minimum_ms=100, maximum_ms=600_000)),
        Key("workers", "workers", Integer(1, 64)),
    ),
)
LOG = Section(
    LogConfig,
    (
        Key("level", "level", Choice(LOG_LEVELS)),
        Key("format", "format", Choice(LOG_FORMATS)),
    ),
)
SPARK = Section(
    SparkConfig,
    (
        Key(
            "master",
            "master",
            Text(
                pattern=_SPARK_MASTER,
                shape="a Spark master (allowed: local, "
                "local[N], local[*], spark://HOST:PORT, yarn, k8s://URL)",
            ),
        ),
        Key("connect_url", "connect_url", Text(empty_is_none=True)),
        Key("app_name", "app_name", Text(check=_app_name_problem)),
        Key("local_dir", "local_dir", Text(empty_is_none=True)),
        Key(
            "driver_memory",
            "driver_memory",
            Text(pattern=r"[0-9]+[kmgt]", shape="a JVM size such as 512m or 1g"),
        ),
        Key("conf", "conf", StringMap(key_prefix="spark.", secret=is_secret_spark_setting)),
        Key("connect_server_port", "connect_server_port", Integer(0, 65535)),
        Key("class_archive", "class_archive", Text(empty_is_none=True)),
        Key("pipeline_timeout", "pipeline_timeout_ms", Duration(minimum_ms=1000)),
        Key("start_timeout", "start_timeout_ms", Duration(minimum_ms=10_000)),
        Key("unhealthy_after_intervals", "unhealthy_after_intervals", Integer(1, 1000)),
        Key("unhealthy_after_failed_starts", "unhealthy_after_failed_starts", Integer(1, 1000)),
    ),
    check=_check_spark,
)
PIPELINE = Section(
    PipelineSettings,
    (
        Key("late_padding", "late_padding_ms", Duration(maximum_ms=86_400_000)),
        Key("lso_lag_series", "lso_lag_series", Choice(LSO_LAG_SERIES)),
        Key("max_findings", "max_findings", Integer(0, 100_000)),
        Key("hanging_confirm_cycles", "hanging_confirm_cycles", Integer(1, 100)),
    ),
)
TOPICS = Section(
    TopicFilter,
    (
        Key("allow", "allow", Patterns()),
        Key("deny", "deny", Patterns()),
    ),
)
CLUSTER = Section(
    ClusterConfig,
    (
        Key(
            "name",
            "name",
            Text(pattern=r"[A-Za-z0-9_.:-]{1,64}", shape="1-64 characters of letters, digits, _ . : -"),
            required=True,
            help="1-64 characters of letters, digits, _ . : -",
        ),
        Key(
            "bootstrap_servers",
            "bootstrap_servers",
            Text(check=_bootstrap_problem),
            required=True,
            help="HOST:PORT[,HOST:PORT...]",
        ),
        Key("interval", "interval_ms", Duration(minimum_ms=1000, maximum_ms=86_400_000)),
        Key(
            "request_timeout",
            "request_timeout_ms",
            Duration(
                minimum_ms=100,
                maximum_ms=MAX_REQUEST_TIMEOUT_MS,
                maximum_why="librdkafka's maximum socket.timeout.ms",
            ),
        ),
        Key("read_batch_timestamps", "read_batch_timestamps", Flag()),
        Key("topics", "topics", Nested(TOPICS)),
        Key("kafka", "kafka", KafkaProperties()),
        Key("kafka_files", "kafka_files", KafkaProperties(from_files=True)),
        Key("groups", "groups", Parsed(parse_groups, frozenset({"object", "boolean"}))),
        Key("remediation", "remediation", Parsed(parse_remediation, frozenset({"object"}))),
    ),
    check=_check_cluster,
)


def _check_config(r: Reader, values: dict[str, Any], where: Where) -> None:
    origins = [f"clusters[{i}]" for i in range(len(values.get("clusters", ())))]
    clusters = list(values.get("clusters", ()))
    directory = values.get("cluster_files")
    if directory is not None:
        for origin, cluster in read_cluster_files(r, r.base_dir / directory, where.key("cluster_files")):
            origins.append(origin)
            clusters.append(cluster)
    values["clusters"] = tuple(clusters)
    if not clusters and not any(p.startswith(("clusters", "cluster_files")) for p in r.problems):
        r.problem(
            "clusters",
            "required: a list of at least one cluster (or cluster_files: a directory of cluster files)",
        )
    seen: dict[str, str] = {}
    for origin, cluster in zip(origins, clusters, strict=True):
        if cluster.name in seen:
            also = seen[cluster.name]
            r.problem(origin, f"cluster name {cluster.name!r} is used more than once (also {also})")
        else:
            seen[cluster.name] = origin


#: Cluster files: the names read, the most read and the largest file.
CLUSTER_FILE_SUFFIXES = (".yml", ".yaml")
MAX_CLUSTER_FILES = 10_000
_MAX_CLUSTER_FILE_BYTES = 1 << 20


def read_cluster_files(r: Reader, directory: Path, key: str) -> list[tuple[str, ClusterConfig]]:
    """Every cluster file of ``directory`` (``*.yml``, ``*.yaml``, not hidden: a Kubernetes
    ConfigMap's ``..data`` entries are not read), in name order: (the file's name, its
    cluster). A file holds one cluster's keys, as an entry of ``clusters``; ``name`` defaults
    to the file's name without its suffix. Problems name the file and the key; relative paths
    in a file (``kafka_files``) are relative to the file's directory."""
    try:
        entries = sorted(
            e for e in directory.iterdir() if not e.name.startswith(".") and e.suffix in CLUSTER_FILE_SUFFIXES
        )
    except OSError as e:
        r.problem(key, f"cannot read the directory {directory}: {e.strerror or e}")
        return []
    if len(entries) > MAX_CLUSTER_FILES:
        r.problem(key, f"{directory} holds {len(entries)} cluster files, more than {MAX_CLUSTER_FILES}")
        return []
    found: list[tuple[str, ClusterConfig]] = []
    base_dir = r.base_dir
    for entry in entries:
        label = str(entry)
        try:
            if not entry.is_file():
                continue  # a directory named like a cluster file
            with entry.open("rb") as f:
                data = f.read(_MAX_CLUSTER_FILE_BYTES + 1)
        except OSError as e:
            r.problem(label, f"cannot read: {e.strerror or e}")
            continue
        if len(data) > _MAX_CLUSTER_FILE_BYTES:
            r.problem(label, "larger than 1 MiB, not a cluster file")
            continue
        try:
            raw = read_yaml(data.decode(), label)
        except UnicodeDecodeError:
            r.problem(label, "not UTF-8 text")
            continue
        except ConfigError as e:
            r.problems.extend(e.problems)
            continue
        if isinstance(raw, dict) and raw.get("name") is None:
            raw = {**raw, "name": entry.stem}
        r.base_dir = entry.parent
        try:
            cluster = CLUSTER.read(r, raw, Where(label, sep=": "))
        finally:
            r.base_dir = base_dir
        if cluster is not INVALID:
            found.append((label, cluster))
    return found


def _parse_history(raw: object, path: str) -> tuple[object, list[str]]:
    return parse_history_section(raw)


COLLECTION = Section(
    CollectionConfig,
    (
        Key("workers", "workers", Integer(1, 256)),
        Key("clients_kept_open", "clients_kept_open", Integer(0, 100_000)),
    ),
)
CONFIG = Section(
    Config,
    (
        # At least one cluster, here or in cluster_files (checked by _check_config).
        Key("clusters", "clusters", Items(CLUSTER, allow_empty=True)),
        Key("cluster_files", "cluster_files", Text(empty_is_none=True)),
        Key("collection", "collection", Nested(COLLECTION)),
        Key("web", "web", Nested(WEB)),
        Key("log", "log", Nested(LOG)),
        Key("spark", "spark", Nested(SPARK)),
        Key("pipeline", "pipeline", Nested(PIPELINE)),
        Key("cluster_label", "cluster_label", Text(check=_label_problem)),
        Key("allow_literal_secrets", "allow_literal_secrets", Flag()),
        Key("history", "history", Parsed(_parse_history, frozenset({"object"}))),
        Key("state_dir", "state_dir", Text(check=_state_dir_problem)),
        Key("attribution", "attribution", Parsed(parse_attribution, frozenset({"array"}))),
    ),
    check=_check_config,
)


# --- entry points -------------------------------------------------------------------------------


def parse_config(
    raw: object, *, env: Mapping[str, str] | None = None, base_dir: Path | None = None
) -> Config:
    """Validate a parsed YAML document. Raises :class:`ConfigError` listing every problem."""
    import os

    allow = raw.get("allow_literal_secrets") if isinstance(raw, dict) else None
    r = Reader(
        env=os.environ if env is None else env,
        base_dir=base_dir or Path.cwd(),
        allow_literal_secrets=allow is True,
    )
    config = CONFIG.read(r, raw, Where())
    if r.problems or config is INVALID:
        raise ConfigError(r.problems or ["configuration: invalid"])
    assert isinstance(config, Config)
    return config


def parse_flag(section: Section, name: str, value: object, flag: str) -> Any:
    """One flag that stands for a key of ``section``, validated by the key's own kind."""
    r = Reader(env={}, base_dir=Path.cwd())
    parsed = section.read_value(r, name, value, Where(names={name: flag}))
    if r.problems or parsed is INVALID:
        raise ConfigError(r.problems)
    return parsed


def cluster_from_flags(
    *,
    bootstrap_servers: str,
    request_timeout: str | None,
    properties: Mapping[str, str],
    properties_file: str | None,
    env: Mapping[str, str],
) -> ClusterConfig:
    """The operator's ``--bootstrap-server [--command-config FILE] [--request-timeout D]``,
    read by the cluster section with every key named by its flag. A properties file holds
    secrets literally, as with Kafka's own tools (``${ENV}`` values are resolved too)."""
    where = Where(
        names={"bootstrap_servers": "--bootstrap-server", "request_timeout": "--request-timeout"},
        children={"kafka": Where(f"--command-config {properties_file}", sep=": ")},
    )
    raw: dict[str, object] = {
        "name": "cli",
        "bootstrap_servers": bootstrap_servers,
        "kafka": dict(properties),
    }
    if request_timeout is not None:
        raw["request_timeout"] = request_timeout
    r = Reader(env=env, base_dir=Path.cwd(), allow_literal_secrets=True, scheduled=False)
    cluster = CLUSTER.read(r, raw, where)
    if r.problems or cluster is INVALID:
        raise ConfigError(r.problems)
    assert isinstance(cluster, ClusterConfig)
    return cluster
