"""Errors of the Kafka layer, named the way Kafka names them."""

from __future__ import annotations

from typing import Any

# kafka-python still uses a few pre-KIP names; operators read Kafka's current ones.
_RENAMED = {"NOT_LEADER_FOR_PARTITION": "NOT_LEADER_OR_FOLLOWER"}


class KafkaUnavailable(Exception):  # noqa: N818 - reads as a state, like Kafka's own names
    """The cluster (or the part needed) could not be reached at all.

    ``error`` names why, as Kafka would: BROKER_NOT_AVAILABLE, SASL_AUTHENTICATION_FAILED,
    SSL_HANDSHAKE_FAILED, REQUEST_TIMED_OUT...
    """

    def __init__(self, message: str, *, error: str = "BROKER_NOT_AVAILABLE") -> None:
        self.error = error
        super().__init__(message)


#: librdkafka's local error names for a failed login, and Kafka's names for them.
AUTHENTICATION_ERRORS = {
    "_AUTHENTICATION": "SASL_AUTHENTICATION_FAILED",
    "SASL_AUTHENTICATION_FAILED": "SASL_AUTHENTICATION_FAILED",
    "_SSL": "SSL_HANDSHAKE_FAILED",
    "TOPIC_AUTHORIZATION_FAILED": "TOPIC_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED": "CLUSTER_AUTHORIZATION_FAILED",
}


class KafkaRequestError(Exception):
    """A Kafka request failed with an error code (or a client-side failure)."""

    def __init__(self, api: str, error: str, *, broker_id: int = -1, message: str = "") -> None:
        self.api = api
        self.error = error
        self.broker_id = broker_id
        self.message = message
        where = f" on broker {broker_id}" if broker_id >= 0 else ""
        super().__init__(f"{api} failed{where}: {error}{': ' + message if message else ''}")


def error_name_for_code(code: int) -> str:
    """Kafka's name for a protocol error code (``6`` -> ``NOT_LEADER_OR_FOLLOWER``)."""
    import kafka.errors

    name = str(kafka.errors.for_code(code).message)
    return _RENAMED.get(name, name)


def error_name(exc: BaseException) -> str:
    """A short, bounded name for any client exception, for logs and the error counter."""
    if isinstance(exc, KafkaRequestError | KafkaUnavailable):
        return exc.error
    import kafka.errors

    if isinstance(exc, kafka.errors.SaslAuthenticationFailedError):
        return "SASL_AUTHENTICATION_FAILED"

    if isinstance(exc, kafka.errors.KafkaTimeoutError):
        return "REQUEST_TIMED_OUT"
    if isinstance(exc, kafka.errors.KafkaConnectionError | kafka.errors.NodeNotReadyError):
        return "BROKER_NOT_AVAILABLE"
    if isinstance(exc, kafka.errors.BrokerResponseError):
        return _RENAMED.get(str(exc.message), str(exc.message))
    confluent = _confluent_error_name(exc)
    if confluent is not None:
        return confluent
    return type(exc).__name__


def _confluent_error_name(exc: BaseException) -> str | None:
    from confluent_kafka import KafkaError, KafkaException

    err: Any = None
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        err = exc.args[0]
    if err is None:
        return None
    name = str(err.name())
    if name in ("_TIMED_OUT", "_TRANSPORT", "_ALL_BROKERS_DOWN"):
        return {"_TIMED_OUT": "REQUEST_TIMED_OUT"}.get(name, "BROKER_NOT_AVAILABLE")
    return name.lstrip("_")
