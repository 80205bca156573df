"""Bad input is refused with exit 2 and names the key; no message ever quotes a secret; any
YAML value at any key gives a Config or a ConfigError, never another exception."""

from __future__ import annotations

import logging
import math
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.cli import main
from exporter.config import (
    SECRET_PROPERTIES,
    ConfigError,
    WebConfig,
    is_secret_spark_setting,
    load_config,
    parse_config,
    read_yaml,
)


def minimal(**cluster: object) -> dict[str, Any]:
    return {"clusters": [{"name": "c", "bootstrap_servers": "127.0.0.1:9092", **cluster}]}


def problems(raw: object, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(raw, env=env or {})
    return info.value.problems


def check_config(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str) -> tuple[int, str]:
    path = tmp_path / "config.yml"
    path.write_text(textwrap.dedent(text))
    capsys.readouterr()
    code = main(["check-config", "--config.file", str(path)])
    return code, capsys.readouterr().err


# --- durations and timeouts ------------------------------------------------------------------


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_non_finite_interval_exits_2_naming_the_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, value: str
) -> None:
    code, err = check_config(
        capsys,
        tmp_path,
        f"""
        clusters:
          - {{name: c, bootstrap_servers: "h:1", interval: {value}}}
    """,
    )
    assert code == 2
    assert "clusters[0].interval: must be a finite duration" in err or (
        "clusters[0].interval: must not be negative" in err
    )
    assert "Traceback" not in err


@pytest.mark.parametrize("value", [math.inf, math.nan, 1e300, "9" * 400 + "s"])
def test_huge_and_non_finite_durations_are_problems_not_crashes(value: object) -> None:
    found = problems(minimal(interval=value))
    assert len(found) == 1 and found[0].startswith("clusters[0].interval: ")


def test_request_timeout_beyond_librdkafkas_maximum_is_refused() -> None:
    found = problems(minimal(interval="1h", request_timeout="10m"))
    assert found == [
        "clusters[0].request_timeout: must be at most 300000 ms (5m): librdkafka's maximum socket.timeout.ms"
    ]
    assert parse_config(minimal(interval="1h", request_timeout="5m"), env={})


# --- duplicate keys ----------------------------------------------------------------------------


def test_duplicate_yaml_keys_are_refused_naming_the_key_and_lines(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err = check_config(
        capsys,
        tmp_path,
        """
        clusters:
          - name: c
            bootstrap_servers: "h:1"
            kafka:
              security.protocol: SSL
            kafka:
              client.id: x
        log: {level: info, level: debug}
    """,
    )
    assert code == 2
    assert "line 7: duplicate key 'kafka' (first at line 5" in err
    assert "line 9: duplicate key 'level' (first at line 9" in err


def test_yaml_merge_keys_are_not_duplicates() -> None:
    raw = read_yaml("base: &b {level: info}\nlog:\n  <<: *b\n  level: debug\n", "x")
    assert raw == {"base": {"level": "info"}, "log": {"level": "debug"}}


@pytest.mark.parametrize(
    "text", ["a: 2001-02-30\n", "a: [\n", "{[1]: 2}\n", "a: !!python/name:os.system\n", "\t- x\n"]
)
def test_unreadable_yaml_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        read_yaml(text, "f.yml")
    assert info.value.problems[0].startswith("f.yml: not valid YAML")


# --- literal secrets -----------------------------------------------------------------------------


@pytest.mark.parametrize("prop", sorted(SECRET_PROPERTIES))
def test_a_literal_secret_in_the_file_is_refused(prop: str) -> None:
    found = problems(minimal(kafka={prop: "hunter2"}))
    assert f"clusters[0].kafka.{prop}: a literal secret in the file is refused" in found[0]
    assert "hunter2" not in "\n".join(found)


def test_literal_secrets_need_the_explicit_opt_in() -> None:
    kafka = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "hunter2",
    }
    config = parse_config({**minimal(kafka=kafka), "allow_literal_secrets": True}, env={})
    assert config.clusters[0].kafka["sasl.password"] == "hunter2"
    assert config.allow_literal_secrets is True
    from_env = parse_config(minimal(kafka={**kafka, "sasl.password": "${PW}"}), env={"PW": "x"})
    assert from_env.clusters[0].kafka["sasl.password"] == "x"
    found = problems({**minimal(kafka=kafka), "allow_literal_secrets": "yes"})
    assert "allow_literal_secrets: must be true or false, got a string" in found


def test_a_literal_spark_connect_token_is_refused() -> None:
    found = problems({**minimal(), "spark": {"connect_url": "sc://h:15002/;token=abc123"}})
    assert found == [
        "spark.connect_url: a literal token in the file is refused: write "
        '"${ENV_VAR}" (or set allow_literal_secrets: true)'
    ]


# --- secrets never echoed --------------------------------------------------------------------------

SECRETS = (
    "pw-as-list-0001",
    "pw-kafka-string-0002",
    "connect-token-0003",
    "env-secret-0004",
    "yaml-broken-0005",
    "props-line-0006",
    "file-secret-0007",
)


def test_no_message_quotes_a_secret(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("KTE_SECRET", SECRETS[3])
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRETS[6])
    outputs: list[str] = []

    def run(*argv: str) -> None:
        capsys.readouterr()
        try:
            code = main(list(argv))
        except SystemExit as e:
            code = int(e.code or 0)
        out, err = capsys.readouterr()
        assert code == 2, (argv, out, err)
        outputs.extend((out, err))

    cases = {
        "list.yml": f"""
            clusters:
              - name: c
                bootstrap_servers: "h:1"
                kafka: {{sasl.password: [{SECRETS[0]}]}}
              - name: d
                bootstrap_servers: "h:1"
                kafka: "sasl.password={SECRETS[1]}"
              - name: e
                bootstrap_servers: "${{KTE_SECRET}}"
                interval: "${{KTE_SECRET}}"
                kafka_files: {{security.protocol: {secret_file}}}
            spark: {{connect_url: "http://h/;token={SECRETS[2]}"}}
            log: {{level: "${{KTE_SECRET}}"}}
        """,
        "broken.yml": f"""
            clusters:
              - name: c
                kafka: {{sasl.password: "{SECRETS[4]}
        """,
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        run("check-config", "--config.file", str(path))
        run("list", "--config.file", str(path), "--output", "json")
    props = tmp_path / "client.properties"
    props.write_text(f"security.protocol=SASL_SSL\nsasl.password {SECRETS[5]}\n")
    run("list", "--bootstrap-server", "h:1", "--command-config", str(props))
    props.write_text(f"sasl.password={SECRETS[5]}\nsecurity.protocol=${{KTE_SECRET}}\n")
    run("list", "--bootstrap-server", "h:1", "--command-config", str(props), "--output", "json")
    everything = "\n".join(outputs) + "\n" + caplog.text
    for secret in SECRETS:
        assert secret not in everything, secret
    assert "clusters[0].kafka.sasl.password: must be a string or a number, got a list" in everything
    assert "clusters[1].kafka: must be a mapping, got a string" in everything
    assert "line 2 is not key=value (content not shown)" in everything


# --- IPv6 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "host", "port"),
    [
        ("[::]:9851", "::", 9851),
        ("[::1]:9851", "::1", 9851),
        (":9851", "0.0.0.0", 9851),
        ("127.0.0.1:9851", "127.0.0.1", 9851),
        ("localhost:0", "localhost", 0),
    ],
)
def test_listen_addresses_prometheus_accepts(address: str, host: str, port: int) -> None:
    config = parse_config({**minimal(), "web": {"listen_address": address}}, env={})
    assert config.web.host_port == (host, port)
    assert config.web.is_ipv6 == (":" in host)


@pytest.mark.parametrize("address", ["::1:9851", "[zz]:9851", "[::1]", "host:99999", "nope"])
def test_bad_listen_addresses(address: str) -> None:
    assert problems({**minimal(), "web": {"listen_address": address}})[0].startswith("web.listen_address: ")


def test_ipv6_bootstrap_servers_are_accepted() -> None:
    config = parse_config(minimal(bootstrap_servers="[::1]:9092,[fe80::1%eth0]:9093,b:1"), env={})
    assert config.clusters[0].bootstrap_servers == "[::1]:9092,[fe80::1%eth0]:9093,b:1"
    for bad in ("::1:9092", "[::1]", "h:0", "h:1,,h:2"):
        assert problems(minimal(bootstrap_servers=bad))[0].startswith("clusters[0].bootstrap_servers: ")


def test_web_config_defaults_to_every_ipv4_address() -> None:
    assert WebConfig().host_port == ("0.0.0.0", 9851)


# --- property-based: any value at any key ------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        [
            "30s",
            "${HOME}",
            "${NOPE}",
            ".*",
            "(",
            "[::1]:1",
            "h:1",
            "SASL_SSL",
            "OAUTHBEARER",
            "PLAIN",
            "sc://h:1/;token=x",
            "local[2]",
            "1e999s",
        ]
    ),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.one_of(
                st.text(max_size=8),
                st.integers(),
                st.sampled_from(["name", "kafka", "sasl.password", "security.protocol", "interval", "allow"]),
            ),
            inner,
            max_size=3,
        ),
    ),
    max_leaves=6,
)
_PATHS = [
    (),
    ("web",),
    ("web", "listen_address"),
    ("web", "telemetry_path"),
    ("log",),
    ("log", "level"),
    ("spark",),
    ("spark", "master"),
    ("spark", "connect_url"),
    ("spark", "conf"),
    ("spark", "driver_memory"),
    ("pipeline",),
    ("pipeline", "late_padding"),
    ("pipeline", "max_findings"),
    ("pipeline", "hanging_confirm_cycles"),
    ("cluster_label",),
    ("allow_literal_secrets",),
    ("clusters",),
    ("clusters", 0),
    ("clusters", 0, "name"),
    ("clusters", 0, "bootstrap_servers"),
    ("clusters", 0, "interval"),
    ("clusters", 0, "request_timeout"),
    ("clusters", 0, "topics"),
    ("clusters", 0, "topics", "allow"),
    ("clusters", 0, "read_batch_timestamps"),
    ("clusters", 0, "kafka"),
    ("clusters", 0, "kafka", "sasl.password"),
    ("clusters", 0, "kafka", "security.protocol"),
    ("clusters", 0, "kafka", "sasl.mechanism"),
    ("clusters", 0, "kafka_files"),
    ("clusters", 0, "kafka_files", "sasl.password"),
]


def _put(tree: Any, path: tuple[str | int, ...], value: object) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        items = list(tree) if isinstance(tree, list) else [{}]
        items[0] = _put(items[0], rest, value)
        return items
    d = dict(tree) if isinstance(tree, dict) else {}
    d[head] = _put(d.get(head), rest, value)
    return d


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(_PATHS), value=_values)
def test_any_value_at_any_key_is_a_config_or_a_config_error(
    path: tuple[str | int, ...], value: object
) -> None:
    base = {
        "clusters": [{"name": "c", "bootstrap_servers": "h:1", "kafka": {"security.protocol": "PLAINTEXT"}}],
        "web": {"listen_address": ":9851"},
    }
    raw = _put(base, path, value)
    try:
        parse_config(raw, env={"HOME": "/home/x"}, base_dir=Path("/nonexistent"))
    except ConfigError as e:
        assert e.problems and all(isinstance(p, str) and ": " in p for p in e.problems)


@settings(max_examples=150, deadline=None)
@given(
    text=st.lists(
        st.sampled_from([*"ab:{}[]-,\"' \n\t&*!|>#%@`0.9", "clusters", "name", ".inf", "<<", "  ", "\n  - "]),
        max_size=40,
    ).map("".join)
)
def test_any_file_text_is_a_config_or_a_config_error(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "c.yml"
    path.write_text(text)
    try:
        load_config(path, env={})
    except ConfigError as e:
        assert e.problems


def test_a_refused_secret_is_not_also_reported_missing() -> None:
    kafka = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "hunter2",
    }
    found = problems(minimal(kafka=kafka))
    assert len(found) == 1 and "a literal secret in the file is refused" in found[0]


# --- secret Spark settings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "spark.hadoop.fs.s3a.secret.key",
        "spark.hadoop.fs.s3a.access.key",
        "spark.hadoop.fs.s3a.session.token",
        "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
        "spark.hadoop.fs.azure.account.oauth2.client.secret",
        "spark.hadoop.fs.gs.auth.service.account.private.key",
        "spark.hadoop.fs.oss.accessKeySecret",
        "spark.hadoop.fs.cosn.userinfo.secretKey",
        "spark.ssl.keyPassword",
        "spark.authenticate.secret",
        "spark.hadoop.fs.adl.oauth2.credential",
        "spark.hadoop.fs.s3.awsAccessKeyId",
        "spark.hadoop.fs.azure.sas.container.acct.blob.core.windows.net",
    ],
)
def test_secret_spark_settings_are_recognised_and_refused_as_literals(name: str) -> None:
    assert is_secret_spark_setting(name)
    found = problems({**minimal(), "spark": {"conf": {name: "hunter2"}}})
    assert found == [
        f"spark.conf.{name}: a literal secret in the file is refused: write "
        '"${ENV_VAR}" (or set allow_literal_secrets: true)'
    ]
    config = parse_config({**minimal(), "spark": {"conf": {name: "${S}"}}}, env={"S": "hunter2"})
    assert config.spark.conf[name] == "hunter2"
    allowed = parse_config(
        {**minimal(), "spark": {"conf": {name: "x"}}, "allow_literal_secrets": True}, env={}
    )
    assert allowed.spark.conf[name] == "x"


@pytest.mark.parametrize(
    "name",
    [
        "spark.kerberos.keytab",
        "spark.ssl.keyStore",
        "spark.network.crypto.keyLength",
        "spark.sql.mapKeyDedupPolicy",
        "spark.hadoop.fs.s3a.aws.credentials.provider",
        "spark.sql.shuffle.partitions",
        "spark.driver.extraJavaOptions",
    ],
)
def test_settings_that_only_mention_a_key_are_not_secrets(name: str) -> None:
    assert not is_secret_spark_setting(name)
    assert parse_config({**minimal(), "spark": {"conf": {name: "x"}}}, env={}).spark.conf[name] == "x"


# --- values that would fail at run time ----------------------------------------------------------


def test_a_huge_integer_duration_names_its_key_and_keeps_the_other_problems(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err = check_config(
        capsys,
        tmp_path,
        f"""
        clusters:
          - {{name: c, bootstrap_servers: "h:1", interval: {10**400}}}
        log: {{level: loud}}
    """,
    )
    assert code == 2
    assert "clusters[0].interval: is too large for a duration" in err
    assert "log.level: 'loud' is not allowed" in err


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/"])
def test_a_telemetry_path_the_server_answers_itself_is_refused(path: str) -> None:
    found = problems({**minimal(), "web": {"telemetry_path": path}})
    assert found == [
        f"web.telemetry_path: {path!r} is answered by the exporter itself (reserved: /, /healthz, /readyz)"
    ]


@pytest.mark.parametrize("value", ["a\x00b", "\ud800"])
def test_strings_no_file_name_command_line_or_c_library_takes_are_refused(value: str) -> None:
    found = problems(
        {**minimal(), "spark": {"local_dir": value, "conf": {"spark.x": value}}, "state_dir": value}
    )
    assert len(found) == 3 and all(value not in p for p in found)
