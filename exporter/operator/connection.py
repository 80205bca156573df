"""Which cluster an operator command talks to, from its flags.

Two ways, as with Kafka's own tools and the daemon: ``--bootstrap-server`` with an optional
``--command-config`` properties file (librdkafka property names), or the daemon's
``--config.file`` with ``--cluster``. Both are validated by the config tree's own rules
(:func:`exporter.config.parse_config`), so a property the daemon rejects is rejected here
too, with the flag named instead of the YAML key.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from exporter.config import (
    ClusterConfig,
    ConfigError,
    load_config,
    parse_config,
    parse_duration_ms,
)
from exporter.kafka.admin import ClusterAdmin
from exporter.model import PipelineSettings

DEFAULT_REQUEST_TIMEOUT_MS = 10_000
#: Any interval longer than every sensible request timeout: the CLI has no schedule.
_NO_INTERVAL = "1d"


class UsageError(ValueError):
    """A flag or flag combination is invalid. The message names the flag."""


@dataclass(frozen=True)
class Target:
    """One cluster, resolved from the connection flags."""

    cluster: ClusterConfig
    pipeline: PipelineSettings = field(default_factory=PipelineSettings)

    def admin(self) -> ClusterAdmin:
        return ClusterAdmin(bootstrap_servers=self.cluster.bootstrap_servers,
                            properties=self.cluster.kafka,
                            request_timeout_ms=self.cluster.request_timeout_ms)


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "connection", "either --bootstrap-server [--command-config] or --config.file [--cluster]")
    group.add_argument("--bootstrap-server", dest="bootstrap_server", metavar="HOST:PORT",
                       help="broker(s) to bootstrap from, comma-separated")
    group.add_argument("--command-config", dest="command_config", metavar="FILE",
                       help="properties file of librdkafka client settings (security.protocol, "
                            "sasl.mechanism, ssl.ca.location ...); ${ENV} values are resolved")
    group.add_argument("--config.file", dest="config_file", metavar="FILE",
                       help="the exporter's YAML configuration file")
    group.add_argument("--cluster", metavar="NAME",
                       help="cluster name in --config.file (needed when it has several)")
    group.add_argument("--request-timeout", dest="request_timeout", metavar="DURATION",
                       help="timeout of each Kafka request, e.g. 10s, 500ms (default: the "
                            "cluster's request_timeout, else 10s)")


def read_properties(path: str) -> dict[str, str]:
    """A Java-style properties file: ``key=value`` or ``key: value``, ``#``/``!`` comments,
    backslash line continuation."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise UsageError(f"--command-config {path}: cannot read: {e.strerror}") from e
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line.startswith(("#", "!")):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise UsageError(f"--command-config {path}: {raw.strip()!r} is not key=value")
        props[line[:cut].strip()] = line[cut + 1:].strip()
    return props


def request_timeout_ms(args: argparse.Namespace) -> int | None:
    value = getattr(args, "request_timeout", None)
    if value is None:
        return None
    try:
        ms = parse_duration_ms(value)
    except ValueError as e:
        raise UsageError(f"--request-timeout: {e}") from e
    if ms < 100:
        raise UsageError(f"--request-timeout: {value!r} is too short (at least 100ms)")
    return ms


def resolve_target(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Target:
    """The cluster the flags name. Raises UsageError (bad flags) or ConfigError (bad file)."""
    timeout = request_timeout_ms(args)
    if args.config_file and args.bootstrap_server:
        raise UsageError("--bootstrap-server and --config.file are mutually exclusive")
    if args.config_file:
        if args.command_config:
            raise UsageError("--command-config goes with --bootstrap-server; with --config.file "
                             "the cluster's kafka: section holds the client settings")
        return _from_config_file(args.config_file, args.cluster, timeout)
    if not args.bootstrap_server:
        raise UsageError("one of --bootstrap-server or --config.file is required")
    if args.cluster:
        raise UsageError("--cluster needs --config.file")
    props = read_properties(args.command_config) if args.command_config else {}
    raw = {"clusters": [{
        "name": "cli", "bootstrap_servers": args.bootstrap_server, "interval": _NO_INTERVAL,
        "request_timeout": f"{timeout or DEFAULT_REQUEST_TIMEOUT_MS}ms", "kafka": props}]}
    try:
        config = parse_config(raw, env=os.environ if env is None else env)
    except ConfigError as e:
        raise UsageError("; ".join(_flag_problem(p, args.command_config) for p in e.problems)) from e
    return Target(cluster=config.clusters[0])


def _flag_problem(problem: str, command_config: str | None) -> str:
    prefix = "clusters[0]."
    text = problem[len(prefix):] if problem.startswith(prefix) else problem
    if text.startswith("bootstrap_servers"):
        return "--bootstrap-server" + text[len("bootstrap_servers"):]
    if text.startswith("request_timeout"):
        return "--request-timeout" + text[len("request_timeout"):]
    if text.startswith("kafka"):
        key = text[len("kafka"):].lstrip(".")
        return f"--command-config {command_config}: {key}"
    return text


def _from_config_file(path: str, name: str | None, timeout_ms: int | None) -> Target:
    config = load_config(path)
    names = [c.name for c in config.clusters]
    if name is None:
        if len(config.clusters) > 1:
            raise UsageError(f"--cluster is required: {path} has clusters {', '.join(names)}")
        cluster = config.clusters[0]
    else:
        matches = [c for c in config.clusters if c.name == name]
        if not matches:
            raise UsageError(f"--cluster {name!r} is not in {path} (clusters: {', '.join(names)})")
        cluster = matches[0]
    if timeout_ms is not None:
        cluster = replace(cluster, request_timeout_ms=timeout_ms)
    return Target(cluster=cluster, pipeline=config.pipeline)
