"""Which cluster an operator command talks to, from its connection flags.

Two ways, as with Kafka's own tools and the daemon: ``--bootstrap-server`` with an optional
``--command-config`` properties file (librdkafka property names), or the daemon's
``--config.file`` with ``--cluster``. Both are read by the config model's cluster section
(:func:`exporter.config.cluster_from_flags`), so a property the daemon rejects is rejected
here too, with the flag named instead of the YAML key.
"""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from exporter.config import (
    CLUSTER,
    ClusterConfig,
    ConfigError,
    SparkConfig,
    cluster_from_flags,
    load_config,
    parse_flag,
)
from exporter.groups_config import BUILTIN_RULES, AttributionRule
from exporter.model import PipelineSettings
from exporter.operator.requests import Connection, UsageError

if TYPE_CHECKING:
    from exporter.kafka.admin import ClusterAdmin

__all__ = ["Target", "UsageError", "add_connection_flags", "read_properties", "resolve_target"]


@dataclass(frozen=True)
class Target:
    """One cluster, resolved from the connection flags."""

    cluster: ClusterConfig
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)
    #: The daemon's config file it came from (where the history, if any, is configured).
    config_file: str | None = None
    #: The daemon's Spark settings (its Connect endpoint is the CLI's warm engine).
    spark: SparkConfig | None = None
    #: Transactional id -> application rules: the config's ``attribution``, else the built-ins.
    attribution: tuple[AttributionRule, ...] = BUILTIN_RULES
    #: The daemon's listen port (where its last cycle's answers may be asked for).
    listen_port: int | None = None

    def admin(self) -> ClusterAdmin:
        from exporter.kafka.admin import ClusterAdmin

        return ClusterAdmin(
            bootstrap_servers=self.cluster.bootstrap_servers,
            properties=self.cluster.kafka,
            request_timeout_ms=self.cluster.request_timeout_ms,
        )


class LazyAdmin:
    """A command's admin client, made on first use: a command answered without Kafka (from
    an exporter's last cycle) never makes one, nor loads the Kafka client libraries."""

    def __init__(self, target: Target) -> None:
        self._target = target
        self._admin: ClusterAdmin | None = None

    def __getattr__(self, name: str) -> Any:
        if self._admin is None:
            self._admin = self._target.admin()
        return getattr(self._admin, name)

    def __enter__(self) -> LazyAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._admin is not None:
            self._admin.close()


class LazyModule(ModuleType):
    """A module imported on first attribute access (the Kafka-bound verbs' modules)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "connection", "either --bootstrap-server [--command-config] or --config.file [--cluster]"
    )
    group.add_argument(
        "--bootstrap-server",
        dest="bootstrap_server",
        metavar="HOST:PORT",
        help="broker(s) to bootstrap from, comma-separated ([IPV6]:PORT for IPv6)",
    )
    group.add_argument(
        "--command-config",
        dest="command_config",
        metavar="FILE",
        help="properties file of librdkafka client settings (security.protocol, "
        "sasl.mechanism, ssl.ca.location ...); ${ENV} values are resolved",
    )
    group.add_argument(
        "--config.file", dest="config_file", metavar="FILE", help="the exporter's YAML configuration file"
    )
    group.add_argument(
        "--cluster", metavar="NAME", help="cluster name in --config.file (needed when it has several)"
    )
    group.add_argument(
        "--request-timeout",
        dest="request_timeout",
        metavar="DURATION",
        help="timeout of each Kafka request, e.g. 10s, 500ms (default: the "
        "cluster's request_timeout, else 10s; at most 5m)",
    )


def connection_from_args(args: argparse.Namespace) -> Connection:
    return Connection(
        bootstrap_server=args.bootstrap_server,
        command_config=args.command_config,
        config_file=args.config_file,
        cluster=args.cluster,
        request_timeout=args.request_timeout,
    )


def read_properties(path: str) -> dict[str, str]:
    """A Java-style properties file: ``key=value`` or ``key: value``, ``#``/``!`` comments,
    backslash line continuation. A bad line is named by number, never quoted (it may hold a
    password)."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise UsageError(f"--command-config {path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--command-config {path}: not UTF-8 text") from None
    props: dict[str, str] = {}
    pending = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = pending + raw.strip()
        pending = ""
        if not line or line.startswith(("#", "!")):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise UsageError(f"--command-config {path}: line {number} is not key=value (content not shown)")
        props[line[:cut].strip()] = line[cut + 1 :].strip()
    return props


def resolve_target(conn: Connection, env: Mapping[str, str] | None = None) -> Target:
    """The cluster the flags name. Raises UsageError (bad flags) or ConfigError (bad file)."""
    if conn.bootstrap_server is not None and not conn.bootstrap_server.strip():
        raise UsageError("--bootstrap-server: empty; give HOST:PORT[,HOST:PORT...]")
    if conn.config_file and conn.bootstrap_server:
        raise UsageError("--bootstrap-server and --config.file are mutually exclusive")
    if conn.config_file:
        if conn.command_config:
            raise UsageError(
                "--command-config goes with --bootstrap-server; with --config.file "
                "the cluster's kafka: section holds the client settings"
            )
        return _from_config_file(conn)
    if not conn.bootstrap_server:
        raise UsageError("one of --bootstrap-server or --config.file is required")
    if conn.cluster:
        raise UsageError("--cluster needs --config.file")
    props = read_properties(conn.command_config) if conn.command_config else {}
    try:
        cluster = cluster_from_flags(
            bootstrap_servers=conn.bootstrap_server,
            request_timeout=conn.request_timeout,
            properties=props,
            properties_file=conn.command_config,
            env=os.environ if env is None else env,
        )
    except ConfigError as e:
        raise UsageError("; ".join(e.problems)) from None
    return Target(cluster=cluster)


def _from_config_file(conn: Connection) -> Target:
    timeout_ms: int | None = None
    if conn.request_timeout is not None:  # the flag first: a usage error before the file
        try:
            timeout_ms = parse_flag(CLUSTER, "request_timeout", conn.request_timeout, "--request-timeout")
        except ConfigError as e:
            raise UsageError("; ".join(e.problems)) from None
    path = str(conn.config_file)
    config = load_config(path)
    names = [c.name for c in config.clusters]
    if conn.cluster is None:
        if len(config.clusters) > 1:
            raise UsageError(f"--cluster is required: {path} has clusters {', '.join(names)}")
        cluster = config.clusters[0]
    else:
        matches = [c for c in config.clusters if c.name == conn.cluster]
        if not matches:
            raise UsageError(f"--cluster {conn.cluster!r} is not in {path} (clusters: {', '.join(names)})")
        cluster = matches[0]
    if timeout_ms is not None:
        cluster = replace(cluster, request_timeout_ms=timeout_ms)
    return Target(
        cluster=cluster,
        pipeline=config.pipeline,
        config_file=conn.config_file,
        spark=config.spark,
        attribution=config.attribution,
        listen_port=config.web.host_port[1],
    )
