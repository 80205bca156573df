"""SASL and TLS end to end against a real broker, with both client libraries.

One single-node cluster with four secured listeners next to the test bed's own PLAINTEXT
one: SASL_PLAINTEXT (PLAIN and SCRAM-SHA-512), SSL (server-authenticated TLS), SSL with
``ssl.client.auth=required`` (mTLS) and SASL_SSL (SCRAM-SHA-512). A throwaway CA, broker and
client certificate are made with ``openssl`` per run. Each case configures the exporter the
way an operator does (librdkafka property names, validated by ``parse_config``) and runs a
full collection cycle through the secured listener: metadata, offsets and configs go over
confluent-kafka, DescribeProducers / ListTransactions / DescribeTransactions over
kafka-python, so a complete snapshot with the open transaction in it proves both
authenticated.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from exporter.config import ClusterConfig, parse_config
from exporter.kafka.admin import LOGIN_PROBE_TIMEOUT_S, ClusterAdmin
from exporter.kafka.collector import SnapshotCollector
from exporter.kafka.errors import KafkaUnavailable
from exporter.model import ClusterSnapshot
from testbed.broker import BrokerStartError, KafkaCluster, Listener
from testbed.maven import KafkaDistribution
from testbed.scenarios import OpenTransaction

pytestmark = pytest.mark.kafka

log = logging.getLogger(__name__)

PLAIN_USER, PLAIN_PASSWORD = "alice", "plain-Secret-4711"
SCRAM_USER, SCRAM_PASSWORD = "scram-bob", "scram-Secret-0815"
CLIENT_KEY_PASSWORD = "client-Key-Secret-42"
WRONG_PASSWORD = "wrong-Secret-1234"
REQUEST_TIMEOUT = "5s"
SECRETS = (PLAIN_PASSWORD, SCRAM_PASSWORD, CLIENT_KEY_PASSWORD, WRONG_PASSWORD)

SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
PLAIN_LOGIN = (
    f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{PLAIN_USER}="{PLAIN_PASSWORD}";'
)


# -- a throwaway PKI ------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    ca: Path
    broker_keystore: Path  # PEM: private key (PKCS#8, unencrypted) + certificate
    client_cert: Path
    client_key: Path  # PKCS#8, encrypted with CLIENT_KEY_PASSWORD


def _openssl(cwd: Path, *args: str) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, f"openssl {' '.join(args)} failed:\n{proc.stderr}"


def _issue(d: Path, name: str, subject: str, extensions: str) -> None:
    """``name.key`` (PKCS#8) and ``name.pem`` signed by the CA in ``d``."""
    (d / f"{name}.ext").write_text(extensions)
    _openssl(d, "req", "-new", "-newkey", "rsa:2048", "-noenc", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", subject)  # fmt: skip
    _openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-sha256", "-extfile", f"{name}.ext",
             "-out", f"{name}.pem")  # fmt: skip


def make_pki(d: Path) -> Pki:
    _openssl(d, "req", "-x509", "-newkey", "rsa:2048", "-noenc", "-keyout", "ca.key",
             "-out", "ca.pem", "-days", "2", "-sha256", "-subj", "/CN=kte-test-ca",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    _issue(d, "broker", "/CN=127.0.0.1",
           "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
           "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n")  # fmt: skip
    _issue(d, "client", "/CN=kte-exporter",
           "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
           "extendedKeyUsage=clientAuth\n")  # fmt: skip
    _openssl(d, "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", "client.key",
             "-out", "client-encrypted.key", "-passout", f"pass:{CLIENT_KEY_PASSWORD}")  # fmt: skip
    keystore = d / "broker-keystore.pem"
    keystore.write_text((d / "broker.key").read_text() + (d / "broker.pem").read_text())
    return Pki(ca=d / "ca.pem", broker_keystore=keystore, client_cert=d / "client.pem",
               client_key=d / "client-encrypted.key")  # fmt: skip


def _broker_tls(pki: Pki) -> dict[str, str]:
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.broker_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
    }


# -- the secured cluster ----------------------------------------------------------------------


@dataclass
class SecureKafka:
    cluster: KafkaCluster
    pki: Pki
    topic: str
    transaction: OpenTransaction


def _wait_for_scram_login(cluster: KafkaCluster, timeout_s: float = 30.0) -> None:
    """SCRAM credentials reach the broker through the metadata log: wait until they work."""
    admin = AdminClient({
        "bootstrap.servers": cluster.bootstrap_for("SASL"), "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": SCRAM_USER,
        "sasl.password": SCRAM_PASSWORD, "logger": log,
    })  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.list_topics(timeout=2)
            return
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"SCRAM login not accepted after {timeout_s} s") from exc
            time.sleep(0.5)


@pytest.fixture(scope="module")
def secure_kafka(kafka_dist: KafkaDistribution, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[SecureKafka]:  # fmt: skip
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    tls = _broker_tls(pki)
    cluster = KafkaCluster(kafka_dist, extra_listeners={
        "SASL": Listener("SASL_PLAINTEXT", {
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "plain.sasl.jaas.config": PLAIN_LOGIN,
            "scram-sha-512.sasl.jaas.config": SCRAM_LOGIN,
        }),
        "TLS": Listener("SSL", {**tls, "ssl.client.auth": "none"}),
        "MTLS": Listener("SSL", {**tls, "ssl.client.auth": "required"}),
        "SASL_TLS": Listener("SASL_SSL", {
            **tls,
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "scram-sha-512.sasl.jaas.config": SCRAM_LOGIN,
        }),
    })  # fmt: skip
    try:
        cluster.start()
    except BrokerStartError as exc:
        pytest.fail(f"secured Kafka test cluster did not start:\n{exc}")
    try:
        # Everything the test bed does itself goes over its PLAINTEXT listener.
        upsert = UserScramCredentialUpsertion(
            SCRAM_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
            SCRAM_PASSWORD.encode())  # fmt: skip
        for future in cluster.admin().alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)
        _wait_for_scram_login(cluster)
        topic = cluster.create_topic("secured-orders", partitions=2)
        with OpenTransaction(cluster.bootstrap_servers, topic, partition=1,
                             transaction_timeout_ms=600_000) as txn:  # fmt: skip
            txn.begin(records=3)
            yield SecureKafka(cluster, pki, topic, txn)
    finally:
        cluster.stop()


# -- the exporter, configured as an operator would ----------------------------------------------


def operator_config(bootstrap: str, kafka: Mapping[str, str], env: Mapping[str, str],
                    request_timeout: str = REQUEST_TIMEOUT) -> ClusterConfig:  # fmt: skip
    """One cluster of the YAML config, validated by the config layer."""
    raw = {"clusters": [{
        "name": "secured", "bootstrap_servers": bootstrap, "interval": "30s",
        "request_timeout": request_timeout, "kafka": dict(kafka),
    }]}  # fmt: skip
    config = parse_config(raw, env=env)
    for secret in SECRETS:
        assert secret not in repr(config)
    [cluster] = config.clusters
    return cluster


def collect(cluster: ClusterConfig) -> ClusterSnapshot:
    admin = ClusterAdmin(bootstrap_servers=cluster.bootstrap_servers, properties=cluster.kafka,
                         request_timeout_ms=cluster.request_timeout_ms)  # fmt: skip
    collector = SnapshotCollector(cluster=cluster.name, admin=admin,
                                  topic_filter=cluster.topics.matcher())  # fmt: skip
    try:
        return collector.collect()
    finally:
        collector.close()


def _cases(pki: Pki) -> dict[str, tuple[str, dict[str, str], dict[str, str]]]:
    """case -> (listener, ``kafka:`` section as in the YAML file, environment)."""
    return {
        "sasl-plain": (
            "SASL",
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": PLAIN_USER,
                "sasl.password": "${KAFKA_PASSWORD}",
            },
            {"KAFKA_PASSWORD": PLAIN_PASSWORD},
        ),
        "sasl-scram-sha-512": (
            "SASL",
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "SCRAM-SHA-512",
                "sasl.username": SCRAM_USER,
                "sasl.password": "${KAFKA_PASSWORD}",
            },
            {"KAFKA_PASSWORD": SCRAM_PASSWORD},
        ),
        "tls": (
            "TLS",
            {
                "security.protocol": "SSL",
                "ssl.ca.location": str(pki.ca),
            },
            {},
        ),
        "mtls": (
            "MTLS",
            {
                "security.protocol": "SSL",
                "ssl.ca.location": str(pki.ca),
                "ssl.certificate.location": str(pki.client_cert),
                "ssl.key.location": str(pki.client_key),
                "ssl.key.password": "${KEY_PASSWORD}",
            },
            {"KEY_PASSWORD": CLIENT_KEY_PASSWORD},
        ),
        "sasl-ssl-scram-sha-512": (
            "SASL_TLS",
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": SCRAM_USER,
                "sasl.password": "${KAFKA_PASSWORD}",
                "ssl.ca.location": str(pki.ca),
                "ssl.endpoint.identification.algorithm": "https",
            },
            {"KAFKA_PASSWORD": SCRAM_PASSWORD},
        ),
    }


CASES = ["sasl-plain", "sasl-scram-sha-512", "tls", "mtls", "sasl-ssl-scram-sha-512"]


@pytest.mark.parametrize("case", CASES)
def test_collection_through_secured_listener(
    secure_kafka: SecureKafka,
    case: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    exporter_log_levels(caplog)
    kafka = secure_kafka.cluster
    listener, properties, env = _cases(secure_kafka.pki)[case]
    config = operator_config(kafka.bootstrap_for(listener), properties, env)

    snapshot = collect(config)

    assert snapshot.errors == ()
    # confluent-kafka: metadata came through the secured listener (it advertises its own
    # port), broker configs and offsets were read.
    node = kafka.node(1)
    assert [(b.broker_id, b.port) for b in snapshot.brokers] == [(1, node.listener_port(listener))]
    assert [c.broker_id for c in snapshot.broker_configs] == [1]
    offsets = {(p.topic, p.partition): p for p in snapshot.partitions}
    open_partition = offsets[(secure_kafka.topic, 1)]
    assert open_partition.high_watermark - open_partition.last_stable_offset == 3
    # kafka-python: DescribeProducers, ListTransactions and DescribeTransactions.
    txn = secure_kafka.transaction
    [producer] = [p for p in snapshot.producers if (p.topic, p.partition) == (txn.topic, 1)]
    assert producer.current_txn_start_offset == open_partition.last_stable_offset
    listed = {t.transactional_id: t for t in snapshot.listed_transactions}
    assert listed[txn.transactional_id].state == "Ongoing"
    assert listed[txn.transactional_id].producer_id == producer.producer_id
    assert txn.transactional_id in {t.transactional_id for t in snapshot.transactions}
    _assert_no_secret_logged(caplog, capfd)


def _wrong_password_config(secure_kafka: SecureKafka, case: str) -> ClusterConfig:
    listener, properties, _ = _cases(secure_kafka.pki)[case]
    return operator_config(
        secure_kafka.cluster.bootstrap_for(listener),
        {**properties, "client.id": f"kte-wrong-{case}"},
        {"KAFKA_PASSWORD": WRONG_PASSWORD},
        request_timeout="3s",
    )


def _failed_collection(config: ClusterConfig) -> tuple[str, float]:
    """A full cycle (confluent-kafka's metadata comes first and fails)."""
    started = time.monotonic()
    with pytest.raises(KafkaUnavailable) as failure:
        collect(config)
    # Only the message: a kept traceback would keep the failed clients alive.
    return str(failure.value), time.monotonic() - started


def _failed_kafka_python_request(config: ClusterConfig) -> tuple[str, float]:
    """kafka-python alone: ListTransactions (confluent-kafka is not asked)."""
    admin = ClusterAdmin(bootstrap_servers=config.bootstrap_servers, properties=config.kafka,
                         request_timeout_ms=config.request_timeout_ms)  # fmt: skip
    started = time.monotonic()
    try:
        with pytest.raises(KafkaUnavailable) as failure:
            admin.list_transactions([1])
    finally:
        admin.close()
    return str(failure.value), time.monotonic() - started


@pytest.mark.parametrize("case", ["sasl-plain", "sasl-scram-sha-512"])
def test_wrong_sasl_password_fails_within_the_request_timeout(
    secure_kafka: SecureKafka,
    case: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    exporter_log_levels(caplog)
    config = _wrong_password_config(secure_kafka, case)
    bound_s = config.request_timeout_ms / 1000 + 3

    failure, elapsed = _failed_collection(config)
    assert failure.startswith("metadata from ")
    assert elapsed < bound_s
    # The reason is in the failure's name and, with librdkafka's words, in the exporter's log.
    assert "SASL_AUTHENTICATION_FAILED" in failure
    assert any(
        r.name.startswith("exporter.kafka") and "SASL authentication error" in r.getMessage()
        for r in caplog.records
    )
    _, librdkafka_log = capfd.readouterr()

    failure, elapsed = _failed_kafka_python_request(config)
    assert failure.startswith("cannot bootstrap from ")
    assert "SASL_AUTHENTICATION_FAILED" in failure
    # kafka-python's bootstrap timeout, then a short librdkafka probe that names the failure.
    assert elapsed < bound_s + LOGIN_PROBE_TIMEOUT_S
    # kafka-python's WARNINGs say "socket disconnected" (the broker closes the connection
    # after a failed SCRAM exchange); only some PLAIN attempts log SaslAuthenticationFailed.
    _assert_no_secret_logged(caplog, capfd, librdkafka_log)


def test_wrong_sasl_password_is_named_an_authentication_error(secure_kafka: SecureKafka) -> None:
    config = _wrong_password_config(secure_kafka, "sasl-plain")
    collection, _ = _failed_collection(config)
    kafka_python, _ = _failed_kafka_python_request(config)
    assert "AUTHENTICATION" in collection
    assert "AUTHENTICATION" in kafka_python


def test_mtls_listener_rejects_a_client_without_certificate(secure_kafka: SecureKafka) -> None:
    """The mTLS case above is meaningful: without a client certificate there is no cycle."""
    _, properties, _ = _cases(secure_kafka.pki)["tls"]  # CA only, no client certificate
    config = operator_config(secure_kafka.cluster.bootstrap_for("MTLS"), properties, {})

    started = time.monotonic()
    with pytest.raises(KafkaUnavailable):
        collect(config)
    assert time.monotonic() - started < 3 * config.request_timeout_ms / 1000


def exporter_log_levels(caplog: pytest.LogCaptureFixture) -> None:
    """The levels ``exporter.cli.setup_logging`` sets at ``log.level: debug``: everything at
    DEBUG except the ``kafka`` (kafka-python) loggers, clamped to WARNING. kafka-python at
    DEBUG logs its config dict and every request, SaslAuthenticate included, so the SASL
    password with them."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.WARNING, logger="kafka")


def _assert_no_secret_logged(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str], *earlier_output: str
) -> None:
    """Neither the exporter's log records (messages and arguments) nor anything the clients
    wrote to stdout/stderr (librdkafka logs there) holds a secret."""
    out, err = capfd.readouterr()
    logged = "\n".join([caplog.text, *(repr(r.args) for r in caplog.records), out, err, *earlier_output])
    for secret in SECRETS:
        assert secret not in logged
