"""The one error path of the Kafka layer: rows read, errors for what was not, time left.

Every request family (``metadata``, ``offsets``, ``configs``, ``producers``,
``transactions``, ``fetch``, ``markers``) builds its answer with a :class:`Gather`: a
failure is recorded per broker / partition as a :class:`~exporter.model.CollectionError`
next to what succeeded, named as Kafka names it, never raised for the whole batch.

A *deadline* is an absolute :func:`time.monotonic` value (or None: no deadline). Every
request's timeout is the client's request timeout, shortened to what is left of it; a request
that would start after it is not sent and is recorded as ``DEADLINE_EXCEEDED``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from exporter.kafka.errors import DeadlineExceeded, error_name, error_name_for_code
from exporter.model import CollectionError

log = logging.getLogger(__name__)
T = TypeVar("T")
#: Below this a request cannot be answered anyway: it counts as out of time.
MIN_REQUEST_TIMEOUT_MS = 50
MESSAGE_LIMIT = 200


@dataclass(frozen=True, slots=True)
class Collected(Generic[T]):
    """Rows that were read, and the errors for what was not."""

    rows: tuple[T, ...]
    errors: tuple[CollectionError, ...] = ()


class Gather(Generic[T]):
    """Builds one :class:`Collected` for one Kafka API."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.rows: list[T] = []
        self.errors: list[CollectionError] = []

    def add(self, *rows: T) -> None:
        self.rows.extend(rows)

    def fail(
        self,
        error: BaseException | str,
        *,
        broker_id: int = -1,
        topic: str = "",
        partition: int = -1,
        message: str | None = None,
    ) -> None:
        """Record one failure: an exception (named by :func:`error_name`) or an error name."""
        if isinstance(error, BaseException):
            name = error_name(error)
            text = str(error) if message is None else message
        else:
            name, text = error, message or ""
        self.errors.append(
            CollectionError(
                self.api,
                name,
                broker_id=broker_id,
                topic=topic,
                partition=partition,
                message=text[:MESSAGE_LIMIT],
            )
        )

    def ok(
        self,
        error_code: int,
        *,
        broker_id: int = -1,
        topic: str = "",
        partition: int = -1,
        message: str | None = None,
    ) -> bool:
        """True for error code 0; else records the error (by Kafka's name) and returns False."""
        if error_code == 0:
            return True
        self.fail(
            error_name_for_code(error_code),
            broker_id=broker_id,
            topic=topic,
            partition=partition,
            message=message,
        )
        return False

    def result(self) -> Collected[T]:
        return Collected(tuple(self.rows), tuple(self.errors))


def guarded(api: str, fn: Callable[[], Collected[T]]) -> Collected[T]:
    """A family call that fails as a whole (client broken, cluster gone) becomes one error."""
    try:
        return fn()
    except Exception as e:  # recorded and exported, never fatal to the cycle
        log.warning("%s failed: %s", api, e)
        failed: Gather[T] = Gather(api)
        failed.fail(e)
        return failed.result()


def remaining_s(deadline: float | None) -> float | None:
    """Seconds left before ``deadline`` (None: no deadline)."""
    return None if deadline is None else deadline - time.monotonic()


def timeout_ms(request_timeout_ms: int, deadline: float | None, api: str, broker_id: int = -1) -> int:
    """The request timeout, shortened to the time left; raises DeadlineExceeded when none is."""
    left = remaining_s(deadline)
    if left is None:
        return request_timeout_ms
    left_ms = int(left * 1000)
    if left_ms < MIN_REQUEST_TIMEOUT_MS:
        raise DeadlineExceeded(api, broker_id=broker_id)
    return min(request_timeout_ms, left_ms)


def timeout_s(request_timeout_ms: int, deadline: float | None, api: str) -> float:
    return timeout_ms(request_timeout_ms, deadline, api) / 1000
