"""One validated config tree.

The YAML file is parsed into frozen dataclasses section by section. Every problem is
collected (key path, what is wrong, the allowed values) and reported together in one
:class:`ConfigError`, so an operator fixes a file in one go. Unknown keys are errors.

Secrets never live in the file: a string value ``${NAME}`` is replaced by the environment
variable ``NAME``, and ``kafka_files`` maps a librdkafka property to a file whose content
becomes its value (Kubernetes Secrets mounted as files).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml

from exporter.model import KAFKA_LATE_TRANSACTION_BUFFER_MS, PipelineSettings

T = TypeVar("T")

DEFAULT_LISTEN_ADDRESS = ":9851"
DEFAULT_CLUSTER_LABEL = "kafka_cluster"
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
LSO_LAG_SERIES = ("nonzero", "open", "all")

#: librdkafka properties that carry secrets: never logged, never exported.
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
UNSUPPORTED_SASL_MECHANISMS = {"GSSAPI": "the confluent-kafka wheel's librdkafka is built "
                               "without Kerberos support (PLAIN, SCRAM and OAUTHBEARER work)"}
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

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


class ConfigError(ValueError):
    """The config is invalid; ``problems`` lists every problem found, one per line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))


def parse_duration_ms(value: object) -> int:
    """``"30s"``, ``"5m"``, ``"250ms"``, or a number of seconds, to milliseconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30s, 5m, 250ms")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("must not be negative")
        return int(value * 1000)
    if isinstance(value, str):
        m = _DURATION.match(value.strip())
        if m:
            return int(float(m.group(1)) * _UNIT_MS[m.group(2)])
    raise ValueError(f"{value!r} is not a duration (use e.g. 30s, 5m, 250ms, 1h)")


@dataclass(frozen=True)
class WebConfig:
    listen_address: str = DEFAULT_LISTEN_ADDRESS
    telemetry_path: str = "/metrics"

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.listen_address.rpartition(":")
        return (host or "0.0.0.0", int(port))


@dataclass(frozen=True)
class LogConfig:
    level: str = "info"
    format: str = "text"


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

    master: str = "local[2]"
    connect_url: str | None = None
    app_name: str = "kafka-txn-exporter"
    local_dir: str | None = None
    driver_memory: str = "512m"
    conf: Mapping[str, str] = field(default_factory=dict)
    #: Loopback port of a Spark Connect endpoint inside the embedded driver (the CLI's warm
    #: engine); ``None``: no endpoint.
    connect_server_port: int | None = None
    pipeline_timeout_ms: int | None = None
    start_timeout_ms: int = 180_000
    unhealthy_after_intervals: int = 3

    @property
    def redacted_connect_url(self) -> str | None:
        """The Connect URL without its parameters (``/;token=...`` carries credentials)."""
        return None if self.connect_url is None else self.connect_url.split("/;", 1)[0]

    def __repr__(self) -> str:  # keep a Connect token out of logs and tracebacks
        return (f"SparkConfig(master={self.master!r}, connect_url={self.redacted_connect_url!r}, "
                f"app_name={self.app_name!r}, driver_memory={self.driver_memory!r})")


@dataclass(frozen=True)
class TopicFilter:
    allow: tuple[str, ...] = (".*",)
    deny: tuple[str, ...] = ()

    def compiled(self) -> tuple[list[re.Pattern[str]], list[re.Pattern[str]]]:
        return [re.compile(p) for p in self.allow], [re.compile(p) for p in self.deny]

    def matcher(self) -> Callable[[str], bool]:
        allow, deny = self.compiled()

        def matches(topic: str) -> bool:
            return any(p.fullmatch(topic) for p in allow) and not any(
                p.fullmatch(topic) for p in deny
            )

        return matches


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

    def redacted_kafka(self) -> dict[str, str]:
        return {k: ("<redacted>" if k in SECRET_PROPERTIES else v) for k, v in self.kafka.items()}

    def __repr__(self) -> str:  # keep secrets out of logs and tracebacks
        return (
            f"ClusterConfig(name={self.name!r}, bootstrap_servers={self.bootstrap_servers!r}, "
            f"interval_ms={self.interval_ms}, kafka={self.redacted_kafka()!r})"
        )


@dataclass(frozen=True)
class Config:
    clusters: tuple[ClusterConfig, ...]
    web: WebConfig = field(default_factory=WebConfig)
    log: LogConfig = field(default_factory=LogConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    #: The label that carries the Kafka cluster's name on every series. ``cluster`` belongs to
    #: the Kubernetes cluster in kube-prometheus setups, as in Grafana's Kafka mixin.
    cluster_label: str = "kafka_cluster"


class _Reader:
    """Walks the raw YAML tree, records problems with their key path, never raises."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.problems: list[str] = []
        self.env = env

    def problem(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def section(self, raw: object, path: str, allowed: set[str]) -> dict[str, Any]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.problem(path, f"must be a mapping with keys {sorted(allowed)}")
            return {}
        for key in raw:
            if key not in allowed:
                self.problem(f"{path}.{key}" if path else str(key),
                             f"unknown key (allowed: {', '.join(sorted(allowed))})")
        return {k: self.resolve(v, f"{path}.{k}" if path else str(k)) for k, v in raw.items()}

    def resolve(self, value: object, path: str) -> object:
        if isinstance(value, str):
            m = _ENV_REF.match(value)
            if m:
                name = m.group(1)
                if name not in self.env:
                    self.problem(path, f"environment variable {name} is not set")
                    return ""
                return self.env[name]
        return value

    def get(self, d: Mapping[str, Any], key: str, path: str, kind: type[T], default: T) -> T:
        if key not in d or d[key] is None:
            return default
        value = d[key]
        if kind is int and isinstance(value, bool):
            self.problem(f"{path}.{key}", f"must be an integer, got {value!r}")
            return default
        if kind is float and isinstance(value, int):
            value = float(value)
        if not isinstance(value, kind):
            self.problem(f"{path}.{key}", f"must be a {kind.__name__}, got {value!r}")
            return default
        return value

    def choice(self, d: Mapping[str, Any], key: str, path: str, choices: tuple[str, ...],
               default: str) -> str:
        value = self.get(d, key, path, str, default)
        if value not in choices:
            self.problem(f"{path}.{key}", f"{value!r} is not allowed (allowed: {', '.join(choices)})")
            return default
        return value

    def duration(self, d: Mapping[str, Any], key: str, path: str, default_ms: int,
                 minimum_ms: int = 0) -> int:
        if key not in d or d[key] is None:
            return default_ms
        try:
            ms = parse_duration_ms(d[key])
        except ValueError as e:
            self.problem(f"{path}.{key}", str(e))
            return default_ms
        if ms < minimum_ms:
            self.problem(f"{path}.{key}", f"must be at least {minimum_ms} ms")
            return default_ms
        return ms

    def patterns(self, d: Mapping[str, Any], key: str, path: str,
                 default: tuple[str, ...]) -> tuple[str, ...]:
        if key not in d or d[key] is None:
            return default
        value = d[key]
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.problem(f"{path}.{key}", "must be a list of regular expressions")
            return default
        for i, pattern in enumerate(value):
            try:
                re.compile(pattern)
            except re.error as e:
                self.problem(f"{path}.{key}[{i}]", f"invalid regular expression {pattern!r}: {e}")
        return tuple(value)


def _read_web(r: _Reader, raw: object) -> WebConfig:
    d = r.section(raw, "web", {"listen_address", "telemetry_path"})
    address = r.get(d, "listen_address", "web", str, DEFAULT_LISTEN_ADDRESS)
    _, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        r.problem("web.listen_address", f"{address!r} is not HOST:PORT or :PORT")
        address = DEFAULT_LISTEN_ADDRESS
    path = r.get(d, "telemetry_path", "web", str, "/metrics")
    if not path.startswith("/"):
        r.problem("web.telemetry_path", f"{path!r} must start with /")
        path = "/metrics"
    return WebConfig(listen_address=address, telemetry_path=path)


def _read_log(r: _Reader, raw: object) -> LogConfig:
    d = r.section(raw, "log", {"level", "format"})
    return LogConfig(
        level=r.choice(d, "level", "log", LOG_LEVELS, "info"),
        format=r.choice(d, "format", "log", LOG_FORMATS, "text"),
    )


def _read_spark(r: _Reader, raw: object) -> SparkConfig:
    d = r.section(raw, "spark", {"master", "connect_url", "app_name", "local_dir",
                                 "driver_memory", "conf", "connect_server_port",
                                 "pipeline_timeout", "start_timeout",
                                 "unhealthy_after_intervals"})
    master = r.get(d, "master", "spark", str, "local[2]")
    if not re.match(r"^(local(\[(\*|\d+)(,\d+)?\])?|spark://.+|yarn|k8s://.+)$", master):
        r.problem("spark.master", f"{master!r} is not a Spark master "
                  "(allowed: local, local[N], local[*], spark://HOST:PORT, yarn, k8s://URL)")
    connect = r.get(d, "connect_url", "spark", str, "") or None
    if connect is not None and not connect.startswith("sc://"):
        # Never echo the URL: its parameters may carry a token.
        r.problem("spark.connect_url", "must be a Spark Connect URL sc://HOST:PORT")
    conf_raw = r.get(d, "conf", "spark", dict, {})
    conf = {str(k): str(v) for k, v in conf_raw.items()}
    for k in conf:
        if not k.startswith("spark."):
            r.problem(f"spark.conf.{k}", "Spark settings start with 'spark.'")
    memory = r.get(d, "driver_memory", "spark", str, "512m")
    m = re.match(r"^(\d+)([kmgt])$", memory)
    if not m:
        r.problem("spark.driver_memory", f"{memory!r} is not a JVM size such as 512m or 1g")
    elif int(m.group(1)) * {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1 << 20}[m.group(2)] < (
            SparkConfig.MIN_DRIVER_MEMORY_MB):
        r.problem("spark.driver_memory", f"{memory!r} is below the minimum "
                  f"{SparkConfig.MIN_DRIVER_MEMORY_MB}m (Spark reserves 300 MiB of the driver "
                  "heap and refuses to start below 1.5 times that)")
    port = r.get(d, "connect_server_port", "spark", int, 0)
    if port and not 1024 <= port <= 65535:
        r.problem("spark.connect_server_port", f"{port} is not a port in 1024-65535 (0: off)")
    if port and connect is not None:
        r.problem("spark.connect_server_port",
                  "only for the embedded Spark; with connect_url the exporter starts no JVM")
    timeout_ms: int | None = None
    if d.get("pipeline_timeout") is not None:
        timeout_ms = r.duration(d, "pipeline_timeout", "spark", 0, minimum_ms=1000)
    unhealthy = r.get(d, "unhealthy_after_intervals", "spark", int, 3)
    if not 1 <= unhealthy <= 1000:
        r.problem("spark.unhealthy_after_intervals", f"{unhealthy} is not in 1-1000")
        unhealthy = 3
    return SparkConfig(
        master=master,
        connect_url=connect,
        app_name=r.get(d, "app_name", "spark", str, "kafka-txn-exporter"),
        local_dir=r.get(d, "local_dir", "spark", str, "") or None,
        driver_memory=memory,
        conf=conf,
        connect_server_port=port or None,
        pipeline_timeout_ms=timeout_ms,
        start_timeout_ms=r.duration(d, "start_timeout", "spark", 180_000, minimum_ms=10_000),
        unhealthy_after_intervals=unhealthy,
    )


def _read_pipeline(r: _Reader, raw: object) -> PipelineSettings:
    d = r.section(raw, "pipeline", {"late_padding", "lso_lag_series", "max_findings",
                                    "hanging_confirm_cycles"})
    max_findings = r.get(d, "max_findings", "pipeline", int, 500)
    if not 0 <= max_findings <= 100_000:
        r.problem("pipeline.max_findings", "must be between 0 and 100000")
    confirm = r.get(d, "hanging_confirm_cycles", "pipeline", int, 2)
    if not 1 <= confirm <= 100:
        r.problem("pipeline.hanging_confirm_cycles", "must be between 1 and 100")
    return PipelineSettings(
        late_padding_ms=r.duration(d, "late_padding", "pipeline", KAFKA_LATE_TRANSACTION_BUFFER_MS),
        lso_lag_series=r.choice(d, "lso_lag_series", "pipeline", LSO_LAG_SERIES, "nonzero"),
        max_findings=max_findings,
        hanging_confirm_cycles=confirm,
    )


def _read_kafka_properties(r: _Reader, d: Mapping[str, Any], path: str,
                           base_dir: Path) -> dict[str, str]:
    props: dict[str, str] = {}
    raw_props = r.get(d, "kafka", path, dict, {})
    for key, value in raw_props.items():
        if key not in KAFKA_PROPERTIES:
            r.problem(f"{path}.kafka.{key}",
                      f"unsupported property (allowed: {', '.join(sorted(KAFKA_PROPERTIES))})")
            continue
        if isinstance(value, bool) or not isinstance(value, str | int):
            r.problem(f"{path}.kafka.{key}", f"must be a string or a number, got {value!r}")
            continue
        props[key] = str(r.resolve(value, f"{path}.kafka.{key}"))
    files = r.get(d, "kafka_files", path, dict, {})
    for key, file_name in files.items():
        if key not in KAFKA_PROPERTIES:
            r.problem(f"{path}.kafka_files.{key}",
                      f"unsupported property (allowed: {', '.join(sorted(KAFKA_PROPERTIES))})")
            continue
        file_path = base_dir / str(file_name)
        try:
            props[key] = file_path.read_text().strip()
        except OSError as e:
            r.problem(f"{path}.kafka_files.{key}", f"cannot read {file_path}: {e.strerror}")
    if "sasl.mechanisms" in props:  # librdkafka alias
        props.setdefault("sasl.mechanism", props.pop("sasl.mechanisms"))
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        r.problem(f"{path}.kafka.security.protocol",
                  f"{protocol!r} is not allowed (allowed: {', '.join(SECURITY_PROTOCOLS)})")
    mechanism = props.get("sasl.mechanism")
    if protocol.startswith("SASL"):
        if mechanism is None:
            r.problem(f"{path}.kafka.sasl.mechanism",
                      f"required with {protocol} (allowed: {', '.join(SASL_MECHANISMS)})")
        elif mechanism in UNSUPPORTED_SASL_MECHANISMS:
            r.problem(f"{path}.kafka.sasl.mechanism",
                      f"{mechanism} is not supported: {UNSUPPORTED_SASL_MECHANISMS[mechanism]}")
        elif mechanism not in SASL_MECHANISMS:
            r.problem(f"{path}.kafka.sasl.mechanism",
                      f"{mechanism!r} is not allowed (allowed: {', '.join(SASL_MECHANISMS)})")
        if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and not (
            props.get("sasl.username") and props.get("sasl.password")
        ):
            r.problem(f"{path}.kafka", f"sasl.username and sasl.password are required for {mechanism}")
    return props


def _read_cluster(r: _Reader, raw: object, index: int, base_dir: Path) -> ClusterConfig | None:
    path = f"clusters[{index}]"
    d = r.section(raw, path, {"name", "bootstrap_servers", "interval", "request_timeout",
                              "topics", "read_batch_timestamps", "kafka", "kafka_files"})
    name = r.get(d, "name", path, str, "")
    if not _CLUSTER_NAME.match(name):
        r.problem(f"{path}.name", "required: 1-64 characters of letters, digits, _ . : -")
    servers = r.get(d, "bootstrap_servers", path, str, "")
    if not servers or not all(re.match(r"^[^:\s,]+:\d+$", s.strip()) for s in servers.split(",")):
        r.problem(f"{path}.bootstrap_servers", f"{servers!r} must be HOST:PORT[,HOST:PORT...]")
    interval = r.duration(d, "interval", path, 30_000, minimum_ms=1000)
    timeout = r.duration(d, "request_timeout", path, 10_000, minimum_ms=100)
    if timeout >= interval:
        r.problem(f"{path}.request_timeout", "must be shorter than the interval")
    t = r.section(d.get("topics"), f"{path}.topics", {"allow", "deny"})
    topics = TopicFilter(
        allow=r.patterns(t, "allow", f"{path}.topics", (".*",)),
        deny=r.patterns(t, "deny", f"{path}.topics", ()),
    )
    return ClusterConfig(
        name=name,
        bootstrap_servers=servers,
        interval_ms=interval,
        request_timeout_ms=timeout,
        topics=topics,
        read_batch_timestamps=r.get(d, "read_batch_timestamps", path, bool, True),
        kafka=_read_kafka_properties(r, d, path, base_dir),
    )


def _read_cluster_label(r: _Reader, top: Mapping[str, Any]) -> str:
    label = r.get(top, "cluster_label", "", str, DEFAULT_CLUSTER_LABEL)
    if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", label) or label.startswith("__"):
        r.problem("cluster_label", f"{label!r} is not a Prometheus label name")
        return DEFAULT_CLUSTER_LABEL
    return label


def parse_config(raw: object, *, env: Mapping[str, str] | None = None,
                 base_dir: Path | None = None) -> Config:
    """Validate a parsed YAML document. Raises :class:`ConfigError` listing every problem."""
    r = _Reader(os.environ if env is None else env)
    top = r.section(raw, "", {"clusters", "web", "log", "spark", "pipeline", "cluster_label"})
    clusters_raw = top.get("clusters")
    clusters: list[ClusterConfig] = []
    if not isinstance(clusters_raw, list) or not clusters_raw:
        r.problem("clusters", "required: a list of at least one cluster")
    else:
        for i, c in enumerate(clusters_raw):
            cluster = _read_cluster(r, c, i, base_dir or Path.cwd())
            if cluster is not None:
                clusters.append(cluster)
        names = [c.name for c in clusters]
        for dup in sorted({n for n in names if names.count(n) > 1}):
            r.problem("clusters", f"cluster name {dup!r} is used more than once")
    config = Config(
        clusters=tuple(clusters),
        web=_read_web(r, top.get("web")),
        log=_read_log(r, top.get("log")),
        spark=_read_spark(r, top.get("spark")),
        pipeline=_read_pipeline(r, top.get("pipeline")),
        cluster_label=_read_cluster_label(r, top),
    )
    if r.problems:
        raise ConfigError(r.problems)
    return config


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None) -> Config:
    """Read and validate a YAML config file."""
    file_path = Path(path)
    try:
        text = file_path.read_text()
    except OSError as e:
        raise ConfigError([f"{file_path}: cannot read: {e.strerror}"]) from e
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError([f"{file_path}: not valid YAML: {e}"]) from e
    return parse_config(raw, env=env, base_dir=file_path.resolve().parent)
