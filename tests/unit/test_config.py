"""The config tree: the reference file loads, every error is reported with its key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exporter.cli import main
from exporter.config import (
    CLUSTER,
    COLLECTION,
    CONFIG,
    LOG,
    PIPELINE,
    SPARK,
    WEB,
    ConfigError,
    load_config,
    parse_config,
    parse_duration_ms,
)

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "config.example.yml"


def minimal(**cluster: object) -> dict[str, object]:
    return {"clusters": [{"name": "c", "bootstrap_servers": "127.0.0.1:9092", **cluster}]}


def problems(raw: object, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(raw, env=env or {})
    return info.value.problems


def test_reference_config_loads_with_documented_defaults() -> None:
    config = load_config(REFERENCE, env={})
    [cluster] = config.clusters
    assert cluster.name == "local"
    assert cluster.interval_ms == 30_000
    assert cluster.request_timeout_ms == 10_000
    assert config.web.listen_address == ":9851"
    assert config.pipeline.late_padding_ms == 5 * 60 * 1000
    assert config.pipeline.lso_lag_series == "nonzero"
    assert config.spark.master == "local[2]"


def test_reference_config_documents_every_key() -> None:
    """Every key the model declares appears in the reference file, section by section."""
    raw = yaml.safe_load(REFERENCE.read_text())
    assert set(raw) == set(CONFIG.names)
    assert set(raw["web"]) == set(WEB.names)
    assert set(raw["log"]) == set(LOG.names)
    assert set(raw["spark"]) == set(SPARK.names)
    assert set(raw["pipeline"]) == set(PIPELINE.names)
    assert set(raw["collection"]) == set(COLLECTION.names)
    assert set(raw["clusters"][0]) == set(CLUSTER.names)
    assert set(raw["clusters"][0]["topics"]) == {"allow", "deny"}


def test_all_errors_are_reported_together_with_keys_and_allowed_values() -> None:
    found = problems(
        {
            "log": {"level": "loud"},
            "pipeline": {"lso_lag_series": "some", "late_padding": "soon"},
            "clusters": [{"name": "", "bootstrap_servers": "nohostport", "interval": "1x", "colour": "blue"}],
        }
    )
    text = "\n".join(found)
    assert "log.level: 'loud' is not allowed (allowed: debug, info, warning, error)" in text
    assert "pipeline.lso_lag_series: 'some' is not allowed (allowed: nonzero, open, all)" in text
    assert "pipeline.late_padding: 'soon' is not a duration" in text
    assert "clusters[0].colour: unknown key" in text
    assert "clusters[0].name: required" in text
    assert "clusters[0].bootstrap_servers" in text
    assert "clusters[0].interval" in text
    assert len(found) >= 7


def test_missing_clusters_and_unknown_top_level_key() -> None:
    found = problems({"webb": {}})
    assert any(p.startswith("webb: unknown key") for p in found)
    assert any(p.startswith("clusters: required") for p in found)


def test_duplicate_cluster_names_rejected() -> None:
    raw = {"clusters": [{"name": "a", "bootstrap_servers": "h:1"}, {"name": "a", "bootstrap_servers": "h:2"}]}
    assert any("used more than once" in p for p in problems(raw))


def test_timeout_must_be_shorter_than_interval() -> None:
    found = problems(minimal(interval="5s", request_timeout="10s"))
    assert found == ["clusters[0].request_timeout: must be shorter than the interval"]


def test_secrets_from_environment_and_files(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    raw = minimal(
        kafka={
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "${KAFKA_USER}",
        },
        kafka_files={"sasl.password": str(secret)},
    )
    config = parse_config(raw, env={"KAFKA_USER": "exporter"}, base_dir=tmp_path)
    kafka = config.clusters[0].kafka
    assert kafka["sasl.username"] == "exporter"
    assert kafka["sasl.password"] == "s3cret"
    assert "s3cret" not in repr(config.clusters[0])
    assert config.clusters[0].redacted_kafka()["sasl.password"] == "<redacted>"


def test_missing_env_var_and_unreadable_secret_file(tmp_path: Path) -> None:
    raw = minimal(
        kafka={"sasl.username": "${NOPE}"}, kafka_files={"sasl.password": str(tmp_path / "missing")}
    )
    found = problems(raw)
    assert "clusters[0].kafka.sasl.username: environment variable NOPE is not set" in found
    assert any(p.startswith("clusters[0].kafka_files.sasl.password: cannot read") for p in found)


def test_sasl_settings_are_checked() -> None:
    found = problems(minimal(kafka={"security.protocol": "SASL_SSL", "sasl.mechanism": "MD5"}))
    assert any("sasl.mechanism: 'MD5' is not allowed" in p for p in found)
    found = problems(minimal(kafka={"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}))
    assert any("sasl.username and sasl.password are required for PLAIN" in p for p in found)
    found = problems(minimal(kafka={"bootstrap.servers": "x:1"}))
    assert any("clusters[0].kafka.bootstrap.servers: unsupported property" in p for p in found)


def test_spark_targets() -> None:
    ok = parse_config({**minimal(), "spark": {"master": "spark://10.0.0.1:7077"}}, env={})
    assert ok.spark.master == "spark://10.0.0.1:7077"
    ok = parse_config({**minimal(), "spark": {"connect_url": "sc://spark:15002"}}, env={})
    assert ok.spark.connect_url == "sc://spark:15002"
    found = problems(
        {**minimal(), "spark": {"master": "local[x]", "connect_url": "http://x", "conf": {"foo": "1"}}}
    )
    assert len(found) == 3


def test_topic_patterns_validated_and_applied() -> None:
    found = problems(minimal(topics={"allow": ["("]}))
    assert any(p.startswith("clusters[0].topics.allow[0]: invalid regular expression") for p in found)
    config = parse_config(minimal(topics={"allow": ["orders.*"], "deny": [".*-dlq"]}), env={})
    matches = config.clusters[0].topics.matcher()
    assert matches("orders-v1")
    assert not matches("orders-dlq")
    assert not matches("payments")


@pytest.mark.parametrize(
    ("text", "ms"),
    [("250ms", 250), ("30s", 30_000), ("5m", 300_000), ("1h", 3_600_000), (2, 2000), ("1.5s", 1500)],
)
def test_durations(text: object, ms: int) -> None:
    assert parse_duration_ms(text) == ms


def test_check_config_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", "--config.file", str(REFERENCE)]) == 0
    assert "ok (1 cluster(s): local)" in capsys.readouterr().out
    bad = tmp_path / "bad.yml"
    bad.write_text("clusters: [{name: x, bootstrap_servers: 'h:1', interval: 0}]\nlog: {level: x}\n")
    assert main(["check-config", "--config.file", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "clusters[0].interval: must be at least 1000 ms" in err
    assert "log.level" in err
    assert main(["check-config", "--config.file", str(tmp_path / "absent.yml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_run_rejects_bad_listen_address_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--config.file", str(REFERENCE), "--web.listen-address", "nope"])
    assert code == 2
    assert "--web.listen-address: 'nope' is not HOST:PORT" in capsys.readouterr().err


def test_gssapi_and_non_string_properties_are_refused_clearly() -> None:
    found = problems(minimal(kafka={"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}))
    assert any("GSSAPI is not supported" in p and "Kerberos" in p for p in found)
    found = problems(minimal(kafka={"ssl.ca.location": None}))
    assert "clusters[0].kafka.ssl.ca.location: must be a string or a number, got null" in found


def test_spark_connect_token_never_in_repr() -> None:
    config = parse_config(
        {**minimal(), "spark": {"connect_url": "${URL}"}},
        env={"URL": "sc://spark:15002/;token=s3cr3t;user_id=x"},
    )
    assert config.spark.connect_url == "sc://spark:15002/;token=s3cr3t;user_id=x"
    assert "s3cr3t" not in repr(config.spark)
    assert "s3cr3t" not in repr(config)
    assert config.spark.redacted_connect_url == "sc://spark:15002"
