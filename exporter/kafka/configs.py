"""Broker transaction settings (DescribeConfigs, confluent-kafka) and the finalized
``transaction.version`` feature level (ApiVersions v3+, kafka-python)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from exporter.kafka._protocol import ProtocolClient
from exporter.kafka.errors import KafkaRequestError, error_name
from exporter.kafka.results import Collected, Gather, timeout_ms
from exporter.model import DEFAULT_TRANSACTION_MAX_TIMEOUT_MS, BrokerConfig

#: The broker settings the exporter reads (all exported, see docs/metrics.md).
TRANSACTION_CONFIGS = (
    "transaction.max.timeout.ms",
    "transaction.partition.verification.enable",
    "transaction.two.phase.commit.enable",
)
#: How much longer than the request timeout librdkafka's futures are awaited.
RESULT_MARGIN_S = 1.0


def broker_configs(
    admin: Any, broker_ids: Iterable[int], request_timeout_ms: int, deadline: float | None
) -> Collected[BrokerConfig]:
    """Transaction settings of each broker (DescribeConfigs, all brokers at once)."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    gather: Gather[BrokerConfig] = Gather("DescribeConfigs")
    resources = {b: ConfigResource(ResourceType.BROKER, str(b)) for b in broker_ids}
    if not resources:
        return gather.result()
    timeout_s = timeout_ms(request_timeout_ms, deadline, gather.api) / 1000
    # librdkafka takes one BROKER resource per call; the calls run concurrently.
    futures = {b: admin.describe_configs([r], request_timeout=timeout_s)[r] for b, r in resources.items()}
    for broker_id, future in futures.items():
        try:
            entries = future.result(timeout=timeout_s + RESULT_MARGIN_S)
        except Exception as e:
            gather.fail(e, broker_id=broker_id)
            continue
        gather.add(broker_config(broker_id, {k: v.value for k, v in entries.items()}))
    return gather.result()


def broker_config(broker_id: int, values: Mapping[str, str | None]) -> BrokerConfig:
    def flag(name: str, default: bool) -> bool:
        value = values.get(name)
        return default if value is None else value.strip().lower() == "true"

    timeout = values.get("transaction.max.timeout.ms")
    return BrokerConfig(
        broker_id=broker_id,
        transaction_max_timeout_ms=int(timeout) if timeout else DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
        verification_enabled=flag("transaction.partition.verification.enable", True),
        two_phase_commit_enabled=flag("transaction.two.phase.commit.enable", False),
    )


def transaction_version(client: ProtocolClient, request_timeout_ms: int, deadline: float | None) -> int:
    """The finalized transaction.version feature level, -1 when the cluster has none.

    Raises KafkaRequestError when no broker answered ApiVersions."""
    from kafka import __version__ as client_version
    from kafka.protocol.metadata import ApiVersionsRequest

    api = "ApiVersions"
    request = ApiVersionsRequest(
        client_software_name="kafka-txn-exporter", client_software_version=client_version, min_version=3
    )
    wait_ms = timeout_ms(request_timeout_ms, deadline, api)
    [(_, broker_id, response)] = client.run(client.send_all, [(None, None, request)], wait_ms)
    if isinstance(response, BaseException):
        raise KafkaRequestError(api, error_name(response), broker_id=broker_id, message=str(response)[:200])
    gather: Gather[int] = Gather(api)
    if not gather.ok(response.error_code, broker_id=broker_id):
        raise KafkaRequestError(api, gather.errors[0].error, broker_id=broker_id)
    for feature in response.finalized_features or ():
        if feature.name == "transaction.version":
            return int(feature.max_version_level)
    return -1
