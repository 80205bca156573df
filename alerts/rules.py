"""The alerting rules, in one place: a small typed model, tunable thresholds, the rules.

Every alert is an :class:`Alert`; :func:`alerts` builds the list from :class:`Thresholds`, and
:func:`rules_document` turns it into the Prometheus rule file. Thresholds an operator may want
to change are fields of :class:`Thresholds`; a YAML file with a subset of them produces a tuned
rule file (see ``python -m alerts.generate --help`` and docs/runbooks/README.md).

Every expression aggregates with ``max by (...)`` over the labels that identify the problem,
so the alert does not depend on the scrape target (``job``/``instance``) and two exporter
replicas watching the same cluster give one alert, not two.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

#: Runbooks live next to the code; an alert's runbook is RUNBOOK_BASE_URL + name + ".md".
RUNBOOK_BASE_URL = (
    "https://github.com/kafka-txn-exporter/kafka-txn-exporter/blob/main/docs/runbooks/"
)
CLI = "kafka-txn-exporter"

Severity = Literal["critical", "warning"]
SEVERITIES: tuple[Severity, ...] = ("critical", "warning")

_PROMETHEUS_DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
_ALERT_NAME = re.compile(r"^[A-Z][A-Za-z0-9]+$")


class ThresholdsError(ValueError):
    """Invalid thresholds; the message lists every problem, one per line."""


@dataclass(frozen=True)
class Thresholds:
    """Tunable parts of the rules. Defaults are justified in each alert's runbook."""

    #: KafkaTransactionHanging: the exporter already confirms a finding over
    #: pipeline.hanging_confirm_cycles cycles; 5m more rides out a marker still in flight.
    hanging_for: str = "5m"
    #: KafkaTransactionsLate.
    late_for: str = "10m"
    #: KafkaLastStableOffsetLagGrowing: lag floor, growth window, open-transaction age floor.
    lso_lag_min_offsets: int = 1000
    lso_lag_growth_window: str = "10m"
    lso_lag_min_open_seconds: int = 300
    lso_lag_for: str = "10m"
    #: KafkaTransactionCoordinatorOpenTimeHigh: transaction.max.timeout.ms (default 900 s)
    #: plus one minute for the coordinator's abort sweep and the exporter's cycle.
    coordinator_open_time_seconds: int = 960
    coordinator_open_time_for: str = "5m"
    #: KafkaTwoPhaseCommitTransactionOpenTooLong.
    two_phase_commit_open_seconds: int = 3600
    two_phase_commit_for: str = "10m"
    #: KafkaTransactionVerificationDisabled: long enough to ride out a rolling config change.
    verification_disabled_for: str = "15m"
    #: KafkaTransactionCoordinatorTimeoutAbortsRising: more than N aborts per window.
    timeout_aborts_window: str = "15m"
    timeout_aborts_threshold: int = 5
    timeout_aborts_for: str = "15m"
    #: KafkaTxnExporterDown: regex on the Prometheus job that scrapes the exporter.
    exporter_job_regex: str = ".*kafka-txn-exporter.*"
    exporter_down_for: str = "10m"
    #: KafkaTxnExporterDataStale: ten default (30 s) collection intervals.
    data_stale_seconds: int = 300
    data_stale_for: str = "5m"

    def validate(self) -> None:
        problems = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith(("_for", "_window")):
                if not isinstance(value, str) or not _PROMETHEUS_DURATION.match(value):
                    problems.append(
                        f"{f.name}: {value!r} is not a Prometheus duration (e.g. 30s, 5m, 1h)"
                    )
            elif f.type == "int" and (
                not isinstance(value, int) or isinstance(value, bool) or value <= 0
            ):
                problems.append(f"{f.name}: {value!r} must be a positive integer")
            elif f.type == "str" and (not isinstance(value, str) or not value):
                problems.append(f"{f.name}: must be a non-empty string")
        if problems:
            raise ThresholdsError("\n".join(problems))


def thresholds_from_mapping(raw: Mapping[str, Any] | None) -> Thresholds:
    """Defaults overridden by ``raw``; unknown keys and bad values are reported together."""
    raw = dict(raw or {})
    known = {f.name for f in fields(Thresholds)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ThresholdsError(
            f"unknown threshold(s): {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
        )
    tuned = replace(Thresholds(), **raw)
    tuned.validate()
    return tuned


@dataclass(frozen=True)
class Alert:
    """One alerting rule. ``group`` is the rule group it is written to."""

    name: str
    group: str
    expr: str
    for_: str
    severity: Severity
    summary: str
    description: str

    def __post_init__(self) -> None:
        if not _ALERT_NAME.match(self.name):
            raise ValueError(f"alert name {self.name!r} is not CamelCase")
        if self.severity not in SEVERITIES:
            raise ValueError(f"{self.name}: severity {self.severity!r} not in {SEVERITIES}")
        if not _PROMETHEUS_DURATION.match(self.for_):
            raise ValueError(f"{self.name}: for {self.for_!r} is not a Prometheus duration")

    @property
    def runbook_url(self) -> str:
        return f"{RUNBOOK_BASE_URL}{self.name}.md"

    def to_rule(self) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {
                "summary": self.summary,
                "description": self.description,
                "runbook_url": self.runbook_url,
            },
        }


# Reusable template fragments. Labels that may be absent render as "unknown".
_CLUSTER = "{{ $labels.cluster }}"
_TXN_ID = (
    "{{ if $labels.transactional_id }}'{{ $labels.transactional_id }}'"
    "{{ else }}unknown{{ end }}"
)
_PARTITION = "{{ $labels.topic }}-{{ $labels.partition }}"
_PARTITION_AND_LEADER = (
    "Partition " + _PARTITION + " (leader broker {{ $labels.broker }}, cluster " + _CLUSTER + ")"
)
_FIND_TRANSACTION = "Find it: " + CLI + " list, then " + CLI + " describe --transactional-id ID"

TRANSACTIONS = "kafka-transactions"
EXPORTER = "kafka-txn-exporter"


def _finding_or_broker_count(
    info: str, info_label: str, count: str, info_matchers: str = ""
) -> str:
    """Every finding of the ``info`` metric, one alert each; or else, per broker, the
    ``count`` whose findings the exporter's finding cap left out.
    """
    return (
        "max by (cluster, broker, topic, partition, producer_id, start_offset,"
        f" transactional_id, {info_label}) ({info}{info_matchers})\n"
        "or\n"
        "(\n"
        f"  max by (cluster, broker) ({count}) > 0\n"
        f"  unless on (cluster, broker) {info}\n"
        ")"
    )


def _hanging(t: Thresholds) -> Alert:
    return Alert(
        name="KafkaTransactionHanging",
        group=TRANSACTIONS,
        severity="critical",
        for_=t.hanging_for,
        expr=_finding_or_broker_count(
            "kafka_txn_hanging_transaction_info", "reason", "kafka_txn_hanging_transactions"
        ),
        summary=(
            "{{ if $labels.topic }}Hanging transaction on " + _PARTITION + "{{ else }}"
            "{{ $value }} hanging transaction(s) on broker {{ $labels.broker }}{{ end }}"
            " in cluster " + _CLUSTER
        ),
        description=(
            "{{ if $labels.topic }}" + _PARTITION_AND_LEADER + " has an open transaction of "
            "producer id {{ $labels.producer_id }} (transactional id " + _TXN_ID + ") "
            "starting at offset {{ $labels.start_offset }} that no coordinator will "
            "complete (reason: {{ $labels.reason }}). read_committed consumers of this "
            "partition are stuck at offset {{ $labels.start_offset }} and the log cannot "
            "be compacted or cleaned past it. Abort it: " + CLI + " abort --topic "
            "{{ $labels.topic }} --partition {{ $labels.partition }} --start-offset "
            "{{ $labels.start_offset }}"
            "{{ else }}Broker {{ $labels.broker }} of cluster " + _CLUSTER + " leads "
            "{{ $value }} partition(s) with a hanging transaction, but the exporter's "
            "finding cap hid the details. List them: " + CLI + " find-hanging --broker-id "
            "{{ $labels.broker }}{{ end }}"
        ),
    )


def _late(t: Thresholds) -> Alert:
    return Alert(
        name="KafkaTransactionsLate",
        group=TRANSACTIONS,
        severity="warning",
        for_=t.late_for,
        expr=_finding_or_broker_count(
            "kafka_txn_late_transaction_info",
            "class",
            "kafka_txn_partitions_with_late_transactions",
            '{class!="two_phase_commit"}',
        ),
        summary=(
            "{{ if $labels.topic }}Late transaction on " + _PARTITION + "{{ else }}"
            "{{ $value }} partition(s) with late transactions on broker {{ $labels.broker }}"
            "{{ end }} in cluster " + _CLUSTER
        ),
        description=(
            "{{ if $labels.topic }}" + _PARTITION_AND_LEADER + " has had a transaction of "
            "producer id {{ $labels.producer_id }} (transactional id " + _TXN_ID + ") open "
            "since offset {{ $labels.start_offset }} for longer than "
            "transaction.max.timeout.ms + 5 minutes (class: {{ $labels.class }}). "
            "The coordinator should have aborted it; it may be hanging."
            "{{ else }}Broker {{ $labels.broker }} of cluster " + _CLUSTER + " reports "
            "{{ $value }} partition(s) whose oldest transaction is older than "
            "transaction.max.timeout.ms + 5 minutes (PartitionsWithLateTransactionsCount)."
            "{{ end }} Check: " + CLI + " find-hanging "
            "{{ if $labels.topic }}--topic {{ $labels.topic }} --partition "
            "{{ $labels.partition }}{{ else }}--broker-id {{ $labels.broker }}{{ end }}"
        ),
    )


def _lso_lag(t: Thresholds) -> Alert:
    key = "cluster, topic, partition"
    return Alert(
        name="KafkaLastStableOffsetLagGrowing",
        group=TRANSACTIONS,
        severity="warning",
        for_=t.lso_lag_for,
        expr=(
            f"max by ({key}) (kafka_txn_partition_last_stable_offset_lag)"
            f" > {t.lso_lag_min_offsets}\n"
            f"and on ({key})\n"
            f"max by ({key}) (delta(kafka_txn_partition_last_stable_offset_lag"
            f"[{t.lso_lag_growth_window}])) > 0\n"
            f"and on ({key})\n"
            f"max by ({key}) (kafka_txn_partition_max_active_transaction_duration_seconds)"
            f" > {t.lso_lag_min_open_seconds}"
        ),
        summary="LSO lag of " + _PARTITION + " in cluster " + _CLUSTER
        + " keeps growing behind an open transaction",
        description=(
            "The LastStableOffsetLag of partition " + _PARTITION + " in cluster " + _CLUSTER
            + " is {{ $value | humanize }} offsets and grew over the last "
            f"{t.lso_lag_growth_window}, while a transaction on it has been open for more "
            f"than {t.lso_lag_min_open_seconds}s. read_committed consumers cannot read past "
            "the open transaction. Find the producer: " + CLI + " describe-producers "
            "--topic {{ $labels.topic }} --partition {{ $labels.partition }}"
        ),
    )


def _coordinator_open_time(t: Thresholds) -> Alert:
    return Alert(
        name="KafkaTransactionCoordinatorOpenTimeHigh",
        group=TRANSACTIONS,
        severity="warning",
        for_=t.coordinator_open_time_for,
        expr=(
            "max by (cluster, coordinator) "
            f"(kafka_txn_active_transaction_open_time_max_seconds) > "
            f"{t.coordinator_open_time_seconds}"
        ),
        summary="Coordinator {{ $labels.coordinator }} in cluster " + _CLUSTER
        + " has a transaction open for {{ $value | humanizeDuration }}",
        description=(
            "The oldest ongoing transaction owned by coordinator broker "
            "{{ $labels.coordinator }} in cluster " + _CLUSTER + " has been open for "
            "{{ $value | humanizeDuration }}, longer than "
            f"{t.coordinator_open_time_seconds}s (transaction.max.timeout.ms + margin). "
            "The coordinator should have aborted it on timeout: it may be unable to write "
            "its markers. " + _FIND_TRANSACTION
        ),
    )


def _two_phase_commit(t: Thresholds) -> Alert:
    return Alert(
        name="KafkaTwoPhaseCommitTransactionOpenTooLong",
        group=TRANSACTIONS,
        severity="warning",
        for_=t.two_phase_commit_for,
        expr=(
            "max by (cluster, coordinator) "
            "(kafka_txn_two_phase_commit_transaction_open_time_max_seconds) > "
            f"{t.two_phase_commit_open_seconds}"
        ),
        summary="Two-phase-commit transaction open for {{ $value | humanizeDuration }} on "
        "coordinator {{ $labels.coordinator }} in cluster " + _CLUSTER,
        description=(
            "Coordinator broker {{ $labels.coordinator }} in cluster " + _CLUSTER + " owns a "
            "two-phase-commit transaction (KIP-939) open for "
            "{{ $value | humanizeDuration }}, more than "
            f"{t.two_phase_commit_open_seconds}s. Kafka never times these out; the "
            "external transaction manager must commit or abort it. " + _FIND_TRANSACTION
        ),
    )


def _verification_disabled(t: Thresholds) -> Alert:
    return Alert(
        name="KafkaTransactionVerificationDisabled",
        group=TRANSACTIONS,
        severity="warning",
        for_=t.verification_disabled_for,
        expr="max by (cluster, broker) (kafka_txn_broker_transaction_verification_enabled) == 0",
        summary="Transaction verification is disabled on broker {{ $labels.broker }} in "
        "cluster " + _CLUSTER,
        description=(
            "Broker {{ $labels.broker }} of cluster " + _CLUSTER + " runs with "
            "transaction.partition.verification.enable=false (KIP-890). It accepts "
            "transactional writes to partitions the coordinator never added to the "
            "transaction, which is how hanging transactions are created. Re-enable it: "
            "kafka-configs.sh --bootstrap-server HOST:PORT --alter --entity-type brokers "
            "--entity-name {{ $labels.broker }} --add-config "
            "transaction.partition.verification.enable=true"
        ),
    )


def _timeout_aborts(t: Thresholds) -> Alert:
    return Alert(
        name="KafkaTransactionCoordinatorTimeoutAbortsRising",
        group=TRANSACTIONS,
        severity="warning",
        for_=t.timeout_aborts_for,
        expr=(
            "max by (cluster, coordinator) "
            f"(increase(kafka_txn_coordinator_timeout_aborts_total[{t.timeout_aborts_window}]))"
            f" > {t.timeout_aborts_threshold}"
        ),
        summary="Coordinator {{ $labels.coordinator }} in cluster " + _CLUSTER
        + " keeps aborting transactions on timeout",
        description=(
            "Coordinator broker {{ $labels.coordinator }} of cluster " + _CLUSTER + " aborted "
            "{{ $value | humanize }} transactions in the last "
            f"{t.timeout_aborts_window} because they outlived their transaction.timeout.ms "
            "(KIP-588). Producers are dying or stalling mid-transaction, and their "
            "partitions' LSO is held back until each abort. Find them: " + CLI + " list"
        ),
    )


def _exporter_down(t: Thresholds) -> Alert:
    return Alert(
        name="KafkaTxnExporterDown",
        group=EXPORTER,
        severity="warning",
        for_=t.exporter_down_for,
        expr=(
            "max by (cluster) (kafka_txn_exporter_up) == 0\n"
            f'or max by (job, instance) (up{{job=~"{t.exporter_job_regex}"}}) == 0\n'
            "or absent(kafka_txn_exporter_up)"
        ),
        summary=(
            "{{ if $labels.cluster }}kafka-txn-exporter cannot collect cluster "
            + _CLUSTER + "{{ else if $labels.instance }}kafka-txn-exporter "
            "{{ $labels.instance }} cannot be scraped{{ else }}kafka-txn-exporter is "
            "not reporting{{ end }}"
        ),
        description=(
            "{{ if $labels.cluster }}The last collection cycles of cluster " + _CLUSTER
            + " failed at least in part (kafka_txn_exporter_up is 0): transaction metrics "
            "are partial or missing. See the request errors on the exporter dashboard and "
            "the exporter log.{{ else if $labels.instance }}Prometheus cannot scrape "
            "{{ $labels.instance }} (job {{ $labels.job }}): no Kafka transaction is "
            "monitored by it.{{ else }}No kafka_txn_exporter_up series exist: the exporter "
            "is not running or not scraped, and nothing watches Kafka transactions."
            "{{ end }} Hanging transactions go unnoticed meanwhile: run " + CLI
            + " find-hanging by hand if this lasts."
        ),
    )


def _data_stale(t: Thresholds) -> Alert:
    return Alert(
        name="KafkaTxnExporterDataStale",
        group=EXPORTER,
        severity="warning",
        for_=t.data_stale_for,
        expr=(
            "max by (cluster) (kafka_txn_exporter_snapshot_age_seconds) > "
            f"{t.data_stale_seconds}"
        ),
        summary="kafka-txn-exporter data for cluster " + _CLUSTER
        + " is {{ $value | humanizeDuration }} old",
        description=(
            "The snapshot kafka-txn-exporter serves for cluster " + _CLUSTER + " is "
            "{{ $value | humanizeDuration }} old (threshold "
            f"{t.data_stale_seconds}s): collection cycles are not completing. Every "
            "transaction alert for this cluster works on old data. Check the cycle and "
            "stage durations on the exporter dashboard and the exporter log."
        ),
    )


def alerts(thresholds: Thresholds | None = None) -> list[Alert]:
    """Every alert, in the order they are written."""
    t = thresholds or Thresholds()
    t.validate()
    return [
        _hanging(t),
        _late(t),
        _lso_lag(t),
        _coordinator_open_time(t),
        _two_phase_commit(t),
        _verification_disabled(t),
        _timeout_aborts(t),
        _exporter_down(t),
        _data_stale(t),
    ]


def rules_document(thresholds: Thresholds | None = None) -> dict[str, Any]:
    """The Prometheus rule file as data: one group per concern, alerts in definition order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for alert in alerts(thresholds):
        groups.setdefault(alert.group, []).append(alert.to_rule())
    return {"groups": [{"name": name, "rules": rules} for name, rules in groups.items()]}
