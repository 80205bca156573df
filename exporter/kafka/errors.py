"""Errors of the Kafka layer, named the way Kafka names them, and whether a retry may help.

Every error the layer reports carries Kafka's name for it (``NOT_LEADER_OR_FOLLOWER``,
``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``...) or a client-side kind in the same style
(``BROKER_NOT_AVAILABLE``, ``REQUEST_TIMED_OUT``, ``DEADLINE_EXCEEDED``). :func:`is_retriable`
says whether asking again can succeed, as Kafka's own ``RetriableException`` subclasses (and
aiokafka's ``retriable`` attribute) do: a coordinator still loading or busy with another
transaction answers differently a moment later; an authorization failure does not.
"""

from __future__ import annotations

from functools import cache
from typing import Any

# kafka-python still uses a few pre-KIP names; operators read Kafka's current ones.
_RENAMED = {"NOT_LEADER_FOR_PARTITION": "NOT_LEADER_OR_FOLLOWER"}

#: Client-side kinds (no Kafka error code) and whether a later attempt may succeed.
_CLIENT_SIDE_RETRIABLE = {
    "BROKER_NOT_AVAILABLE": True,  # connection refused or lost
    "REQUEST_TIMED_OUT": True,
    "DEADLINE_EXCEEDED": True,  # the cycle's time ran out; the next cycle tries again
    "NOT_LEADER_OR_FOLLOWER": True,
    "LEADER_NOT_AVAILABLE": True,
    "COORDINATOR_NOT_AVAILABLE": True,
    "SASL_AUTHENTICATION_FAILED": False,
    "SSL_HANDSHAKE_FAILED": False,
}

#: Error codes (and ``TRANSACTIONAL_ID_NOT_FOUND``) that answer the question asked rather than
#: fail it: DescribeTransactions for an id the coordinator does not know.
NOT_FOUND = "TRANSACTIONAL_ID_NOT_FOUND"
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"


@cache
def _kafka_error_table() -> dict[str, bool]:
    """Kafka's error names -> retriable, from kafka-python's table of protocol errors."""
    import kafka.errors

    table: dict[str, bool] = {}
    for error_class in kafka.errors.kafka_errors.values():
        name = str(error_class.message)
        table[_RENAMED.get(name, name)] = bool(error_class.retriable)
    return table


def is_retriable(error: str) -> bool:
    """Whether an error named by this layer may go away when the request is sent again.

    Kafka's protocol errors follow Kafka (``CONCURRENT_TRANSACTIONS``,
    ``COORDINATOR_LOAD_IN_PROGRESS``, ``NOT_COORDINATOR``, ``REQUEST_TIMED_OUT`` are;
    ``*_AUTHORIZATION_FAILED``, ``TRANSACTIONAL_ID_NOT_FOUND``, ``INVALID_PRODUCER_EPOCH``
    are not); transport failures are; anything unknown is not.
    """
    if error in _CLIENT_SIDE_RETRIABLE:
        return _CLIENT_SIDE_RETRIABLE[error]
    return _kafka_error_table().get(error, False)


class KafkaUnavailable(Exception):  # noqa: N818 - reads as a state, like Kafka's own names
    """The cluster (or the part needed) could not be reached at all.

    ``error`` names why, as Kafka would: BROKER_NOT_AVAILABLE, SASL_AUTHENTICATION_FAILED,
    SSL_HANDSHAKE_FAILED, REQUEST_TIMED_OUT...
    """

    def __init__(self, message: str, *, error: str = "BROKER_NOT_AVAILABLE") -> None:
        self.error = error
        super().__init__(message)

    @property
    def retriable(self) -> bool:
        return is_retriable(self.error)


#: librdkafka's local error names for a failed login, and Kafka's names for them.
AUTHENTICATION_ERRORS = {
    "_AUTHENTICATION": "SASL_AUTHENTICATION_FAILED",
    "SASL_AUTHENTICATION_FAILED": "SASL_AUTHENTICATION_FAILED",
    "_SSL": "SSL_HANDSHAKE_FAILED",
    "TOPIC_AUTHORIZATION_FAILED": "TOPIC_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED": "CLUSTER_AUTHORIZATION_FAILED",
}


class KafkaRequestError(Exception):
    """A Kafka request failed with an error code (or a client-side failure).

    ``retriable`` says whether sending it again may succeed (see :func:`is_retriable`).
    """

    def __init__(self, api: str, error: str, *, broker_id: int = -1, message: str = "") -> None:
        self.api = api
        self.error = error
        self.broker_id = broker_id
        self.message = message
        where = f" on broker {broker_id}" if broker_id >= 0 else ""
        super().__init__(f"{api} failed{where}: {error}{': ' + message if message else ''}")

    @property
    def retriable(self) -> bool:
        return is_retriable(self.error)


class DeadlineExceeded(KafkaRequestError):  # noqa: N818 - Kafka's own style of name
    """The time the caller gave ran out before the request could be sent or answered."""

    def __init__(self, api: str, *, broker_id: int = -1) -> None:
        super().__init__(api, DEADLINE_EXCEEDED, broker_id=broker_id, message="the cycle's deadline passed")


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
