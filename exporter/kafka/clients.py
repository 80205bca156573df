"""Kafka clients for one cluster, built from one set of librdkafka properties.

Security is configured once, in librdkafka property names (``security.protocol``,
``sasl.mechanism``, ``ssl.ca.location`` ...). confluent-kafka takes them as they are;
:func:`kafka_python_config` translates them for kafka-python, which provides the three
admin APIs librdkafka lacks (DescribeProducers, ListTransactions, DescribeTransactions).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from exporter.kafka.errors import KafkaUnavailable

log = logging.getLogger(__name__)

#: Requests kafka-python keeps in flight on one broker connection (its default is 5).
MAX_IN_FLIGHT_PER_CONNECTION = 1000

_PYTHON_NAMES = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "sasl.kerberos.service.name": "sasl_kerberos_service_name",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "client.id": "client_id",
}


class OidcClientCredentialsTokenProvider:
    """SASL/OAUTHBEARER tokens for kafka-python by the OIDC client-credentials grant.

    The same settings librdkafka uses with ``sasl.oauthbearer.method=oidc``. Tokens are
    cached until shortly before they expire.
    """

    def __init__(
        self,
        *,
        token_endpoint_url: str,
        client_id: str,
        client_secret: str,
        scope: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self._url = token_endpoint_url
        self._client_id = client_id
        self._client_secret = client_secret
        self._scope = scope
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._token: str | None = None
        self._expires_at = 0.0

    def token(self) -> str:
        with self._lock:
            if self._token is None or time.monotonic() >= self._expires_at:
                self._token, lifetime_s = self._fetch()
                self._expires_at = time.monotonic() + max(lifetime_s * 0.8, 1.0)
            return self._token

    def extensions(self) -> dict[str, str]:
        return {}

    def _fetch(self) -> tuple[str, float]:
        form = {
            "grant_type": "client_credentials",
            "client_id": self._client_id,
            "client_secret": self._client_secret,
        }
        if self._scope:
            form["scope"] = self._scope
        request = urllib.request.Request(
            self._url,
            data=urllib.parse.urlencode(form).encode(),
            method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
            body = json.load(response)
        token = body.get("access_token")
        if not isinstance(token, str):
            raise KafkaUnavailable(f"OAUTHBEARER token endpoint {self._url} returned no access_token")
        return token, float(body.get("expires_in", 300))


def confluent_config(
    bootstrap_servers: str, properties: Mapping[str, str], request_timeout_ms: int
) -> dict[str, Any]:
    """Config for confluent-kafka clients: the librdkafka properties as given."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "socket.timeout.ms": request_timeout_ms,
        "client.id": "kafka-txn-exporter",
        "log_level": 3,
    }
    config.update(properties)
    return config


def kafka_python_config(
    bootstrap_servers: str, properties: Mapping[str, str], request_timeout_ms: int
) -> dict[str, Any]:
    """The same settings in kafka-python's names."""
    config: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers.split(","),
        "request_timeout_ms": request_timeout_ms,
        "bootstrap_timeout_ms": request_timeout_ms,
        "client_id": "kafka-txn-exporter",
        "reconnect_backoff_max_ms": 5000,
        # A cycle sends every request of a stage to a broker at once (ListOffsets twice per
        # leader, DescribeProducers, ListTransactions, a Fetch per hanging start offset...),
        # and stages overlap. kafka-python pauses a connection at 5 requests in flight and
        # fails the next send at once (NodeNotReadyError "Node paused"), which the cycle
        # would count as BROKER_NOT_AVAILABLE. The broker answers one connection's requests
        # in order either way; librdkafka does not bound them either.
        "max_in_flight_requests_per_connection": MAX_IN_FLIGHT_PER_CONNECTION,
    }
    for key, value in properties.items():
        if key in _PYTHON_NAMES:
            config[_PYTHON_NAMES[key]] = value
    if "security_protocol" in config:
        config["security_protocol"] = str(config["security_protocol"]).upper()
    if properties.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        config["ssl_check_hostname"] = False
    if properties.get("sasl.mechanism") == "OAUTHBEARER":
        config["sasl_oauth_token_provider"] = _oauth_provider(properties)
    return config


def _oauth_provider(properties: Mapping[str, str]) -> object:
    from kafka.net.sasl.oauth import AbstractTokenProvider

    method = properties.get("sasl.oauthbearer.method", "default").lower()
    if method != "oidc":
        raise KafkaUnavailable(
            "OAUTHBEARER needs sasl.oauthbearer.method=oidc with sasl.oauthbearer.client.id, "
            "sasl.oauthbearer.client.secret and sasl.oauthbearer.token.endpoint.url"
        )
    missing = [
        k
        for k in (
            "sasl.oauthbearer.client.id",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.token.endpoint.url",
        )
        if not properties.get(k)
    ]
    if missing:
        raise KafkaUnavailable(f"OAUTHBEARER (oidc) is missing {', '.join(missing)}")
    inner = OidcClientCredentialsTokenProvider(
        token_endpoint_url=properties["sasl.oauthbearer.token.endpoint.url"],
        client_id=properties["sasl.oauthbearer.client.id"],
        client_secret=properties["sasl.oauthbearer.client.secret"],
        scope=properties.get("sasl.oauthbearer.scope"),
    )

    class _Provider(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            return inner.token()

    return _Provider()
