"""What each operator verb is asked to do: typed requests, built from argparse at the edge
(:mod:`exporter.operator.commands`, with the connection flags read by
:func:`exporter.operator.connection.connection_from_args`) and validated here. The verbs'
logic never sees an ``argparse.Namespace``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class UsageError(ValueError):
    """A flag or flag combination is invalid. The message names the flag."""


@dataclass(frozen=True)
class Connection:
    """Which cluster: ``bootstrap_server`` [+ ``command_config``] or ``config_file`` [+
    ``cluster``]; ``request_timeout`` as written (a duration)."""

    bootstrap_server: str | None = None
    command_config: str | None = None
    config_file: str | None = None
    cluster: str | None = None
    request_timeout: str | None = None


@dataclass(frozen=True)
class Source:
    """Where a read-only verb's answer comes from: the last cycle of a running exporter
    (``exporter``: its URL, given with ``--exporter``; None: looked for), or Kafka and Spark
    now (``fresh``, ``--fresh``)."""

    exporter: str | None = None
    fresh: bool = False

    def __post_init__(self) -> None:
        if self.exporter is not None and self.fresh:
            raise UsageError("--exporter and --fresh are mutually exclusive")


@dataclass(frozen=True)
class ListRequest:
    states: tuple[str, ...] = ()
    producer_ids: tuple[int, ...] = ()
    #: ms; None (or < 0, Kafka's convention) for all
    duration_filter: int | None = None
    transactional_id_pattern: str | None = None
    output: str = "table"
    #: Where the answer comes from (see :class:`Source`).
    source: Source = field(default_factory=Source)


@dataclass(frozen=True)
class DescribeRequest:
    transactional_id: str
    output: str = "table"


@dataclass(frozen=True)
class DescribeProducersRequest:
    topic: str
    partition: int
    broker_id: int | None = None
    output: str = "table"


@dataclass(frozen=True)
class FindHangingRequest:
    broker_id: int | None = None
    topic: str | None = None
    partition: int | None = None
    max_transaction_timeout_min: int = 15
    output: str = "table"
    #: Where the answer comes from (see :class:`Source`).
    source: Source = field(default_factory=Source)

    def __post_init__(self) -> None:
        if self.partition is not None and self.topic is None:
            raise UsageError("--partition requires --topic")


@dataclass(frozen=True)
class AbortRequest:
    """One open transaction on one partition: by ``start_offset``, or by producer id, epoch
    and coordinator epoch (as describe-producers shows them)."""

    topic: str
    partition: int
    start_offset: int | None = None
    producer_id: int | None = None
    producer_epoch: int | None = None
    coordinator_epoch: int | None = None
    yes: bool = False
    output: str = "table"
    #: The operator checked that no 2PC application owns it under an id the principal
    #: cannot see (``--owner-checked``).
    owner_checked: bool = False

    def __post_init__(self) -> None:
        if self.start_offset is None and self.producer_id is None:
            raise UsageError(
                "identify the transaction with --start-offset, or with "
                "--producer-id, --producer-epoch and --coordinator-epoch"
            )
        if self.start_offset is not None and self.producer_id is not None:
            raise UsageError("--start-offset and --producer-id are mutually exclusive")
        if self.start_offset is None:
            for flag, value in (
                ("--producer-epoch", self.producer_epoch),
                ("--coordinator-epoch", self.coordinator_epoch),
            ):
                if value is None:
                    raise UsageError(f"--producer-id needs {flag}")
        elif self.producer_epoch is not None or self.coordinator_epoch is not None:
            raise UsageError("--producer-epoch and --coordinator-epoch go with --producer-id")

    @property
    def where(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class ForceTerminateRequest:
    transactional_id: str
    #: The producer epoch the operator saw (``--producer-epoch``): refused when it differs.
    expected_epoch: int | None = None
    yes: bool = False
    output: str = "table"


@dataclass(frozen=True)
class DoctorRequest:
    """Which permissions the principal has; ``topics``: the topics to check (None: all)."""

    topics: tuple[str, ...] | None = None
    output: str = "table"


@dataclass(frozen=True)
class RecoverRequest:
    """Every open transaction of one application (the attribution rules), of transactional
    ids with a prefix, or of one producer id: exactly one of the three."""

    application: str | None = None
    transactional_id_prefix: str | None = None
    producer_id: int | None = None
    #: Two-phase-commit transactions too (their external coordinator decides them).
    include_prepared: bool = False
    yes: bool = False
    output: str = "table"

    def __post_init__(self) -> None:
        given = [
            flag
            for flag, value in (
                ("--application", self.application),
                ("--transactional-id-prefix", self.transactional_id_prefix),
                ("--producer-id", self.producer_id),
            )
            if value is not None
        ]
        if len(given) != 1:
            raise UsageError(
                "name what to recover with exactly one of --application, "
                "--transactional-id-prefix or --producer-id"
                + (f" (given: {', '.join(given)})" if given else "")
            )
        for flag, value in (
            ("--application", self.application),
            ("--transactional-id-prefix", self.transactional_id_prefix),
        ):
            if value is not None and not value.strip():
                raise UsageError(f"{flag} must not be empty")

    @property
    def selection(self) -> dict[str, object]:
        """The selector as given (for the plan and the audit)."""
        if self.application is not None:
            return {"application": self.application}
        if self.transactional_id_prefix is not None:
            return {"transactional_id_prefix": self.transactional_id_prefix}
        return {"producer_id": self.producer_id}

    @property
    def described(self) -> str:
        ((key, value),) = self.selection.items()
        return f"--{key.replace('_', '-')} {value}"
