"""The config model is the one declaration: defaults written once, the chart's schema agrees
with it on key names and types, and flags are validated by the keys they stand for."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from exporter.config import (
    CLUSTER,
    CONFIG,
    KAFKA_PROPERTIES,
    WEB,
    ClusterConfig,
    Config,
    ConfigError,
    cluster_from_flags,
    parse_config,
    parse_flag,
)
from exporter.config.keys import Items, Nested, Section
from exporter.config.model import KafkaProperties
from exporter.model import PipelineSettings

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "deploy" / "helm" / "kafka-txn-exporter" / "values.schema.json"


def schema_types(node: dict[str, Any]) -> set[str]:
    """The JSON types a schema node accepts (an enum of strings is a string; null is the
    YAML way of leaving a key at its default and is accepted by every key)."""
    if "enum" in node:
        return {"string"} if all(isinstance(v, str) for v in node["enum"]) else {"mixed"}
    if "oneOf" in node:
        return set().union(*(schema_types(n) for n in node["oneOf"]))
    kinds = node.get("type", [])
    return set([kinds] if isinstance(kinds, str) else kinds) - {"null"}


def compare(section: Section, node: dict[str, Any], path: str) -> list[str]:
    problems: list[str] = []
    properties = node["properties"]
    if set(properties) != set(section.names):
        problems.append(f"{path}: schema keys {sorted(properties)} != model {sorted(section.names)}")
    for key in section.keys:
        if key.name not in properties:
            continue
        child = properties[key.name]
        want = set(key.kind.json_types)
        got = schema_types(child)
        if got != want:
            problems.append(f"{path}.{key.name}: schema types {sorted(got)} != model {sorted(want)}")
        if isinstance(key.kind, Nested):
            problems += compare(key.kind.section, child, f"{path}.{key.name}")
        elif isinstance(key.kind, Items):
            problems += compare(key.kind.section, child["items"], f"{path}.{key.name}[]")
        elif isinstance(key.kind, KafkaProperties) and set(child["properties"]) != KAFKA_PROPERTIES:
            problems.append(f"{path}.{key.name}: property names differ from the model")
    return problems


def test_chart_schema_config_section_matches_the_model_in_names_and_types() -> None:
    schema = json.loads(SCHEMA.read_text())["properties"]["config"]
    assert compare(CONFIG, schema, "config") == []


def test_the_schema_check_catches_a_type_drift() -> None:
    schema = json.loads(SCHEMA.read_text())["properties"]["config"]
    schema["properties"]["pipeline"]["properties"]["max_findings"]["type"] = "string"
    assert compare(CONFIG, schema, "config") == [
        "config.pipeline.max_findings: schema types ['string'] != model ['integer']"
    ]


def test_defaults_are_the_dataclass_defaults() -> None:
    config = parse_config({"clusters": [{"name": "c", "bootstrap_servers": "h:1"}]}, env={})
    assert config == Config(clusters=(ClusterConfig(name="c", bootstrap_servers="h:1"),))
    assert config.pipeline == PipelineSettings()
    assert CLUSTER.default("request_timeout_ms") == 10_000
    fields = {f.name: f.default for f in dataclasses.fields(ClusterConfig)}
    assert fields["request_timeout_ms"] == 10_000


def test_a_flag_is_validated_by_the_key_it_overrides_and_named_by_the_flag() -> None:
    assert parse_flag(WEB, "listen_address", "[::]:9851", "--web.listen-address") == "[::]:9851"
    with pytest.raises(ConfigError) as info:
        parse_flag(WEB, "listen_address", "nope", "--web.listen-address")
    assert info.value.problems == [
        "--web.listen-address: 'nope' is not HOST:PORT, :PORT or [IPV6]:PORT (port 0-65535)"
    ]


def test_operator_connection_flags_are_read_by_the_cluster_section() -> None:
    cluster = cluster_from_flags(
        bootstrap_servers="[::1]:9092, 127.0.0.1:9093",
        request_timeout="2s",
        properties={"client.id": "ops"},
        properties_file="ops.properties",
        env={},
    )
    assert cluster.bootstrap_servers == "[::1]:9092,127.0.0.1:9093"
    assert cluster.request_timeout_ms == 2000
    assert cluster.kafka == {"client.id": "ops"}
    with pytest.raises(ConfigError) as info:
        cluster_from_flags(
            bootstrap_servers="nohost",
            request_timeout="10m",
            properties={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "linger.ms": "5"},
            properties_file="ops.properties",
            env={},
        )
    assert info.value.problems == [
        "--bootstrap-server: 'nohost' must be HOST:PORT[,HOST:PORT...] (IPv6 as [ADDRESS]:PORT)",
        "--request-timeout: must be at most 300000 ms (5m): librdkafka's maximum socket.timeout.ms",
        "--command-config ops.properties: linger.ms: unsupported property (allowed: "
        + ", ".join(sorted(KAFKA_PROPERTIES))
        + ")",
        "--command-config ops.properties: sasl.username and sasl.password are required for PLAIN",
    ]


def test_a_properties_file_may_hold_a_password_as_kafka_tools_do() -> None:
    cluster = cluster_from_flags(
        bootstrap_servers="h:1",
        request_timeout=None,
        properties_file="p",
        properties={
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "pw",
        },
        env={},
    )
    assert cluster.kafka["sasl.password"] == "pw"


def test_oauthbearer_is_validated_by_check_config_not_only_by_the_client() -> None:
    base = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}
    with pytest.raises(ConfigError) as info:
        parse_config({"clusters": [{"name": "c", "bootstrap_servers": "h:1", "kafka": base}]}, env={})
    assert info.value.problems == [
        "clusters[0].kafka.sasl.oauthbearer.method: OAUTHBEARER needs sasl.oauthbearer.method: "
        "oidc (the client-credentials grant) with sasl.oauthbearer.client.id, "
        "sasl.oauthbearer.client.secret, sasl.oauthbearer.token.endpoint.url",
        "clusters[0].kafka: OAUTHBEARER (oidc) needs sasl.oauthbearer.client.id, "
        "sasl.oauthbearer.client.secret, sasl.oauthbearer.token.endpoint.url",
    ]
    good = {
        **base,
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "x",
        "sasl.oauthbearer.client.secret": "${SECRET}",
        "sasl.oauthbearer.token.endpoint.url": "ftp://idp/token",
    }
    with pytest.raises(ConfigError) as info:
        parse_config(
            {"clusters": [{"name": "c", "bootstrap_servers": "h:1", "kafka": good}]}, env={"SECRET": "s"}
        )
    assert info.value.problems == [
        "clusters[0].kafka.sasl.oauthbearer.token.endpoint.url: must be an http:// or https:// URL"
    ]
    good["sasl.oauthbearer.token.endpoint.url"] = "https://idp/token"
    parse_config(
        {"clusters": [{"name": "c", "bootstrap_servers": "h:1", "kafka": good}]}, env={"SECRET": "s"}
    )
