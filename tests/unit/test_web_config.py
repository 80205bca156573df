"""The web config file (exporter-toolkit format) and basic auth: every problem named by its
key, never a secret echoed, exit 2 from the CLI; bcrypt checks with a cache."""

from __future__ import annotations

import base64
from pathlib import Path

import bcrypt
import pytest
import yaml

from exporter import cli
from exporter.config import parse_config
from exporter.daemon.web import BasicAuth, WebConfigError, dummy_cost, load_web_config

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "web-config.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def problems(tmp_path: Path, data: object) -> str:
    with pytest.raises(WebConfigError) as raised:
        load_web_config(write(tmp_path, data))
    return str(raised.value)


def test_basic_auth_only_file_is_accepted(tmp_path: Path) -> None:
    settings = load_web_config(write(tmp_path, {"basic_auth_users": {"prometheus": HASH}}))
    assert settings.tls is None
    assert settings.users == {"prometheus": HASH.encode()}


def test_empty_file_serves_plain_http_without_auth(tmp_path: Path) -> None:
    (tmp_path / "empty.yml").write_text("")
    settings = load_web_config(tmp_path / "empty.yml")
    assert settings.tls is None and not settings.users


def test_every_problem_is_named_by_its_key(tmp_path: Path) -> None:
    text = problems(tmp_path, {
        "tls_server_config": {"cert_file": str(tmp_path / "missing.crt"),
                              "client_auth_type": "RequireAndVerifyClientCert",
                              "min_version": "TLS9", "cipher_suites": ["x"]},
        "basic_auth_users": {"prometheus": "plaintext-password"},
        "http_server_config": {"http2": True},
        "tls_config": {},
    })  # fmt: skip
    for expected in (
        "tls_server_config: cert_file and key_file are both required",
        "tls_server_config.client_ca_file: required with client_auth_type",
        "tls_server_config.min_version: 'TLS9'",
        "tls_server_config.cipher_suites: not supported",
        "tls_server_config.cert_file:",
        "basic_auth_users.prometheus: not a bcrypt hash",
        "http_server_config.http2",
        "tls_config: unknown key",
    ):
        assert expected in text, f"{expected!r} not in:\n{text}"
    assert "plaintext-password" not in text, "a secret was echoed"


def test_client_auth_without_verification_is_refused_with_the_reason(tmp_path: Path) -> None:
    text = problems(
        tmp_path,
        {
            "tls_server_config": {
                "cert_file": "a",
                "key_file": "b",
                "client_auth_type": "RequireAnyClientCert",
            }
        },
    )
    assert "RequireAnyClientCert is not supported" in text
    assert "VerifyClientCertIfGiven" in text


def test_unreadable_or_invalid_yaml_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match=r"web\.config_file: .*nope\.yml: cannot read"):
        load_web_config(tmp_path / "nope.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("basic_auth_users: [unclosed\n")
    with pytest.raises(WebConfigError, match="not valid YAML"):
        load_web_config(bad)


def test_a_yaml_error_names_line_and_column_never_the_text(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("basic_auth_users:\n  prometheus: 'pasted-password-0001\n  other: [\n")
    with pytest.raises(WebConfigError) as raised:
        load_web_config(bad)
    text = str(raised.value)
    assert "not valid YAML: line " in text and ", column " in text
    assert "pasted-password" not in text


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.yml"
    bad.write_bytes("basic_auth_users: {jos\xe9: x}\n".encode("latin-1"))
    with pytest.raises(WebConfigError, match="not UTF-8 text"):
        load_web_config(bad)


def test_yaml_11_boolean_keys_beside_strings_are_named_not_compared(tmp_path: Path) -> None:
    """``on:`` and ``yes:`` are booleans in YAML 1.1: keys of mixed types, which sort() cannot
    order."""
    path = tmp_path / "web.yml"
    path.write_text(
        "on: 1\nextra: 2\nbasic_auth_users: {}\n"
        "tls_server_config: {yes: 1, colour: 2, cert_file: a}\n"
        "http_server_config: {off: 2, colour: 3, headers: {}}\n"
    )
    with pytest.raises(WebConfigError) as raised:
        load_web_config(path)
    text = str(raised.value)
    assert "True: unknown key" in text and "extra: unknown key" in text
    assert "tls_server_config.True: unknown key" in text
    assert "http_server_config.False: unknown key" in text


def test_duplicate_keys_are_refused_as_in_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text(f"basic_auth_users:\n  prometheus: '{HASH}'\n  prometheus: '{HASH}'\n")
    with pytest.raises(WebConfigError, match="line 3: duplicate key 'prometheus'"):
        load_web_config(path)


@pytest.mark.parametrize(
    "hashed",
    [
        "$2b$",  # the prefix alone
        "$2b$12$tooshort",
        HASH[:-1],  # one character cut
        HASH + "x",
        HASH.replace("$2b$04$", "$2b$4$"),  # a one-digit cost
        HASH[:7] + "!" + HASH[8:],  # a character outside bcrypt's alphabet
        "$2x$04$" + HASH[7:],  # an unknown variant
        12,
    ],
)
def test_a_bcrypt_hash_that_can_never_match_is_refused(tmp_path: Path, hashed: object) -> None:
    text = problems(tmp_path, {"basic_auth_users": {"prometheus": hashed}})
    assert "basic_auth_users.prometheus: not a bcrypt hash" in text


def test_a_bcrypt_cost_outside_htpasswds_range_is_refused(tmp_path: Path) -> None:
    expensive = "$2b$31$" + HASH[7:]
    text = problems(tmp_path, {"basic_auth_users": {"prometheus": expensive}})
    assert "basic_auth_users.prometheus: bcrypt cost 31 is outside 4-17" in text


def test_unknown_users_pay_the_bcrypt_cost_of_the_real_entries() -> None:
    """An unknown user is checked against a dummy hash as expensive as the dearest real
    entry, so the answer time does not tell which user names exist (issue 39, item 7)."""
    cost_6 = bcrypt.hashpw(b"x", bcrypt.gensalt(rounds=6))
    cost_5 = bcrypt.hashpw(b"y", bcrypt.gensalt(rounds=5))
    assert dummy_cost({"a": cost_6, "b": cost_5}) == 6
    auth = BasicAuth({"a": cost_6, "b": cost_5})
    assert auth._dummy.startswith(b"$2b$06$")
    assert not auth.check(basic("nobody", "x"))
    assert auth.check(basic("a", "x"))


def test_mismatched_certificate_and_key_fail_at_load(tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    key.write_text("not a key\n")
    text = problems(tmp_path, {"tls_server_config": {"cert_file": str(cert),
                                                     "key_file": str(key)}})  # fmt: skip
    assert "cannot load the certificate, key or CA" in text


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_basic_auth_checks_bcrypt_and_remembers_success() -> None:
    auth = BasicAuth({"prometheus": HASH.encode()})
    assert auth.enabled
    assert auth.check(basic("prometheus", "s3cret"))
    assert auth.check(basic("prometheus", "s3cret"))  # from the cache
    assert not auth.check(basic("prometheus", "wrong"))
    assert not auth.check(basic("nobody", "s3cret"))
    assert not auth.check(None)
    assert not auth.check("Bearer x")
    assert not auth.check("Basic !!!not-base64")
    assert BasicAuth({}).check(None), "no users: no auth"


def test_web_keys_in_the_config(tmp_path: Path) -> None:
    base = {"clusters": [{"name": "a", "bootstrap_servers": "k:9092"}]}
    config = parse_config({**base, "web": {"config_file": "/etc/web.yml", "read_timeout": "2s",
                                           "workers": 8}}, env={})  # fmt: skip
    assert (config.web.config_file, config.web.read_timeout_ms, config.web.workers) == (
        "/etc/web.yml", 2000, 8)  # fmt: skip
    default = parse_config(base, env={})
    assert (default.web.config_file, default.web.listen_address) == (None, ":9851")


def test_cli_exits_2_naming_the_key_of_a_bad_web_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yml"
    config.write_text(yaml.safe_dump({"clusters": [{"name": "a", "bootstrap_servers": "k:9092"}]}))
    web = write(tmp_path, {"basic_auth_users": {"prometheus": "hunter2"}})
    code = cli.main(["check-config", "--config.file", str(config)])
    assert code == 0
    config.write_text(yaml.safe_dump({"clusters": [{"name": "a", "bootstrap_servers": "k:9092"}],
                                      "web": {"config_file": str(web)}}))  # fmt: skip
    assert cli.main(["check-config", "--config.file", str(config)]) == 2
    err = capsys.readouterr().err
    assert "basic_auth_users.prometheus: not a bcrypt hash" in err
    assert "hunter2" not in err
    assert "Traceback" not in err


def test_run_flag_overrides_the_web_config_file(tmp_path: Path) -> None:
    args = cli.build_parser().parse_args(
        ["run", "--config.file", "c.yml", "--web.config.file", "/etc/kte/web.yml"]
    )
    assert args.web_config_file == "/etc/kte/web.yml"
