"""The web config file (``--web.config.file``, config key ``web.config_file``): TLS and basic
auth for the HTTP endpoints, in the Prometheus exporter-toolkit format::

    tls_server_config:
      cert_file: /etc/tls/tls.crt        # both or neither
      key_file: /etc/tls/tls.key
      client_auth_type: RequireAndVerifyClientCert   # default NoClientCert
      client_ca_file: /etc/tls/ca.crt    # required when client certificates are verified
      min_version: TLS12                 # TLS10..TLS13, default TLS12
      max_version: TLS13
    http_server_config:
      headers: {Strict-Transport-Security: max-age=31536000}
    basic_auth_users:
      prometheus: $2b$12$...             # bcrypt hash, e.g. htpasswd -nBC 12 prometheus

Every problem is reported with its key (a :class:`WebConfigError`, a ``ConfigError``, so the
CLI exits 2) and nothing starts. The certificate, key and CA files are loaded at start-up, so
a wrong path or a key that does not match the certificate is a start-up error too.

Python's TLS stack cannot ask for a client certificate without verifying it, so the
toolkit's ``RequestClientCert`` and ``RequireAnyClientCert`` are refused with that reason;
``cipher_suites``, ``curve_preferences`` and ``prefer_server_cipher_suites`` are refused
rather than silently ignored.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.config import ConfigError, read_text, read_yaml
from exporter.config.keys import text_problem

CLIENT_AUTH_TYPES = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
UNSUPPORTED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert")
TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"}
_TLS_UNSUPPORTED = {
    "cert",
    "key",
    "client_ca",
    "cipher_suites",
    "curve_preferences",
    "prefer_server_cipher_suites",
    "client_allowed_sans",
}


class WebConfigError(ConfigError):
    """The web config file is invalid; every problem names its key."""


@dataclass(frozen=True)
class TLSSettings:
    cert_file: str
    key_file: str
    client_auth_type: str = "NoClientCert"
    client_ca_file: str | None = None
    min_version: str = "TLS12"
    max_version: str | None = None

    def context(self) -> ssl.SSLContext:
        """The server-side SSL context; raises ssl.SSLError / OSError on bad files."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = TLS_VERSIONS[self.min_version]
        if self.max_version:
            ctx.maximum_version = TLS_VERSIONS[self.max_version]
        ctx.load_cert_chain(self.cert_file, self.key_file)
        ctx.verify_mode = CLIENT_AUTH_TYPES[self.client_auth_type]
        if self.client_ca_file:
            ctx.load_verify_locations(cafile=self.client_ca_file)
        return ctx


@dataclass(frozen=True)
class WebSettings:
    """What the web config file asks for; the defaults serve plain HTTP without auth."""

    tls: TLSSettings | None = None
    #: user -> bcrypt hash
    users: Mapping[str, bytes] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    source: str = ""


def load_web_config(path: str | Path) -> WebSettings:
    """Parse and check the file (TLS material loaded once); raises :class:`WebConfigError`.

    The file may hold password hashes (or a password pasted by mistake): no message quotes
    it, a YAML syntax error is named by line and column only."""
    where = str(path)
    try:
        raw: Any = read_yaml(read_text(path), where)
    except ConfigError as e:
        raise WebConfigError([f"web.config_file: {p}" for p in e.problems]) from None
    problems: list[str] = []
    settings = parse_web_config(raw, where, problems)
    if problems:
        raise WebConfigError(problems)
    return settings


def parse_web_config(raw: Any, where: str, problems: list[str]) -> WebSettings:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        problems.append(
            f"{where}: expected a mapping with tls_server_config, http_server_config, basic_auth_users"
        )
        return WebSettings(source=where)
    known = {"tls_server_config", "http_server_config", "basic_auth_users"}
    for key in _unknown(raw, known):
        problems.append(f"{where}: {key}: unknown key; valid: {', '.join(sorted(known))}")
    tls = _tls(raw.get("tls_server_config"), where, problems)
    users = _users(raw.get("basic_auth_users"), where, problems)
    headers = _headers(raw.get("http_server_config"), where, problems)
    return WebSettings(tls=tls, users=users, headers=headers, source=where)


def _unknown(raw: Mapping[Any, Any], known: set[str]) -> list[str]:
    """The keys of ``raw`` not in ``known``, as text, sorted. YAML 1.1 reads ``on:`` or
    ``yes:`` as a boolean key: keys of mixed types are named, never compared."""
    return sorted(str(k) for k in raw if k not in known)


def _tls(raw: Any, where: str, problems: list[str]) -> TLSSettings | None:
    if raw is None:
        return None
    key = f"{where}: tls_server_config"
    if not isinstance(raw, Mapping):
        problems.append(f"{key}: expected a mapping")
        return None
    before = len(problems)
    values = _tls_values(raw, key, problems)
    cert, private = values.get("cert_file"), values.get("key_file")
    if not cert or not private:
        problems.append(f"{key}: cert_file and key_file are both required")
    auth = values.get("client_auth_type", "NoClientCert")
    problem = _client_auth_problem(auth)
    if problem:
        problems.append(f"{key}.client_auth_type: {problem}")
    elif auth != "NoClientCert" and not values.get("client_ca_file"):
        problems.append(f"{key}.client_ca_file: required with client_auth_type {auth}")
    for name in ("min_version", "max_version"):
        if name in values and values[name] not in TLS_VERSIONS:
            problems.append(f"{key}.{name}: {values[name]!r} is not one of {', '.join(TLS_VERSIONS)}")
    for name in ("cert_file", "key_file", "client_ca_file"):
        if name in values and not Path(values[name]).is_file():
            problems.append(f"{key}.{name}: {values[name]} is not a readable file")
    if len(problems) > before or not cert or not private:
        return None
    settings = TLSSettings(
        cert_file=cert,
        key_file=private,
        client_auth_type=auth,
        client_ca_file=values.get("client_ca_file"),
        min_version=values.get("min_version", "TLS12"),
        max_version=values.get("max_version"),
    )
    try:
        settings.context()
    except (ssl.SSLError, OSError, ValueError) as e:
        problems.append(f"{key}: cannot load the certificate, key or CA: {e}")
        return None
    return settings


def _tls_values(raw: Mapping[Any, Any], key: str, problems: list[str]) -> dict[str, str]:
    """The known keys' string values; every other key is a problem."""
    for name in _unknown(raw, _TLS_KEYS):
        if name in _TLS_UNSUPPORTED:
            problems.append(
                f"{key}.{name}: not supported by kafka-txn-exporter (use cert_file, "
                "key_file, client_ca_file; ciphers follow Python's TLS defaults)"
            )
        else:
            problems.append(f"{key}.{name}: unknown key; valid: {', '.join(sorted(_TLS_KEYS))}")
    values: dict[str, str] = {}
    for name in sorted(_TLS_KEYS & set(raw)):
        value = raw[name]
        if not isinstance(value, str) or not value or text_problem(value):
            problems.append(f"{key}.{name}: expected a non-empty string")
        else:
            values[name] = value
    return values


def _client_auth_problem(auth: str) -> str | None:
    if auth in UNSUPPORTED_CLIENT_AUTH:
        return (
            f"{auth} is not supported (Python's TLS cannot request a client certificate "
            "without verifying it); use VerifyClientCertIfGiven or RequireAndVerifyClientCert"
        )
    if auth not in CLIENT_AUTH_TYPES:
        return f"{auth!r} is not one of {', '.join([*CLIENT_AUTH_TYPES, *UNSUPPORTED_CLIENT_AUTH])}"
    return None


#: A bcrypt hash as htpasswd and the bcrypt library write it: variant, two-digit cost, 53
#: characters of salt and digest in bcrypt's base64 alphabet.
_BCRYPT_HASH = re.compile(r"\$2[aby]\$(?P<cost>[0-9]{2})\$[./A-Za-z0-9]{53}")
#: htpasswd's range of bcrypt costs (-C 4..17); each step doubles the time of a check, and
#: 2^17 rounds already take about 8 s a request.
BCRYPT_COSTS = (4, 17)


def _users(raw: Any, where: str, problems: list[str]) -> dict[str, bytes]:
    if raw is None:
        return {}
    key = f"{where}: basic_auth_users"
    if not isinstance(raw, Mapping):
        problems.append(f"{key}: expected a mapping of user names to bcrypt hashes")
        return {}
    users: dict[str, bytes] = {}
    for user, hashed in raw.items():
        if not isinstance(user, str) or not user or ":" in user or text_problem(user):
            problems.append(f"{key}: {str(user)[:40]!r} is not a valid user name")
            continue
        # Never echo the value: it may be a password pasted by mistake.
        problem = _hash_problem(hashed)
        if problem:
            problems.append(f"{key}.{user}: {problem}")
        else:
            users[user] = str(hashed).encode()
    return users


def _hash_problem(hashed: object) -> str | None:
    """Why ``hashed`` can never match a password, or None: a bcrypt check of a malformed
    hash fails for every password (the user could never log in)."""
    m = _BCRYPT_HASH.fullmatch(hashed) if isinstance(hashed, str) else None
    if m is None:
        return (
            "not a bcrypt hash (expected $2a$, $2b$ or $2y$, a cost and 53 characters; "
            "make one with htpasswd -nBC 12 USER)"
        )
    low, high = BCRYPT_COSTS
    if not low <= int(m.group("cost")) <= high:
        return f"bcrypt cost {int(m.group('cost'))} is outside {low}-{high} (htpasswd -B -C {low}..{high})"
    return None


def _headers(raw: Any, where: str, problems: list[str]) -> dict[str, str]:
    if raw is None:
        return {}
    key = f"{where}: http_server_config"
    if not isinstance(raw, Mapping):
        problems.append(f"{key}: expected a mapping")
        return {}
    for name in _unknown(raw, {"headers", "http2"}):
        problems.append(f"{key}.{name}: unknown key; valid: headers, http2")
    if raw.get("http2") is True:
        problems.append(f"{key}.http2: HTTP/2 is not supported (the server speaks HTTP/1.x)")
    headers = raw.get("headers") or {}
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and _header_ok(k, v) for k, v in headers.items()
    ):
        problems.append(f"{key}.headers: expected a mapping of header names to strings")
        return {}
    return dict(headers)


def _header_ok(name: str, value: str) -> bool:
    """A header http.server can send: a token name, a latin-1 value on one line."""
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    token = re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name)
    return token is not None and not any(c in value for c in "\r\n\x00")


def dummy_cost(users: Mapping[str, bytes]) -> int:
    """The bcrypt cost an unknown user's check pays: the highest of the real entries (the
    lowest cost bcrypt takes when there are none: no check is made then)."""
    costs = [int(h[4:6]) for h in users.values() if h[4:6].isdigit()]
    return min(max(costs, default=BCRYPT_COSTS[0]), 31)


class BasicAuth:
    """Checks ``Authorization: Basic`` headers against bcrypt hashes.

    bcrypt is slow by design (~0.25 s at cost 12); a successful check is remembered by a
    keyed digest of the credentials so that every scrape does not pay it again. Unknown
    users are checked against a dummy hash of the highest cost among the real ones, so the
    answer time does not tell which users exist.
    """

    def __init__(self, users: Mapping[str, bytes]) -> None:
        import bcrypt

        self._bcrypt = bcrypt
        self._users = dict(users)
        self._dummy = bcrypt.hashpw(b"not a password", bcrypt.gensalt(rounds=dummy_cost(self._users)))
        self._key = bcrypt.gensalt()
        self._verified: set[bytes] = set()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return bool(self._users)

    def check(self, authorization: str | None) -> bool:
        if not self._users:
            return True
        if not authorization or not authorization.startswith("Basic "):
            return False
        import base64
        import binascii

        try:
            decoded = base64.b64decode(authorization[6:].strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        user, sep, password = decoded.partition(b":")
        if not sep:
            return False
        digest = hmac.new(self._key, decoded, hashlib.sha256).digest()
        with self._lock:
            if digest in self._verified:
                return True
        hashed = self._users.get(user.decode(errors="replace"))
        try:
            ok = self._bcrypt.checkpw(password, hashed or self._dummy) and hashed is not None
        except ValueError:  # a malformed hash
            ok = False
        if ok:
            with self._lock:
                if len(self._verified) > 1000:
                    self._verified.clear()
                self._verified.add(digest)
        return ok
