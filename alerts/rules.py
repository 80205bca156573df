"""The alerting rules, in one place: a small typed model, tunable knobs, the rules.

Every alert is an :class:`Alert`; :func:`alerts` builds the list from :class:`Thresholds`, and
:func:`rules_document` turns it into the Prometheus rule file. What an operator may want to
change (thresholds, ``for:`` durations, the Kafka cluster label's name, disabled alerts, extra
rule labels and annotations, the runbook base URL) is a field of :class:`Thresholds`; a YAML
file with a subset of them produces a tuned rule file (``python -m alerts.generate
--thresholds FILE``, keys as in alerts/thresholds.example.yml). The Helm chart offers the same
knobs as values: it renders :func:`helm_rules_template`, a copy of the rules whose tunable
values are placeholders the PrometheusRule template fills in.

Routing labels survive aggregation: every expression aggregates with ``max by (namespace,
job, <cluster label>, ...)``, so an alert keeps the ``namespace`` the Prometheus Operator's
AlertmanagerConfig routes on and the ``job`` teams route by, and still does not depend on the
scrape target (``instance``/``pod``): two exporter replicas watching the same cluster give
one alert, not two.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any, Literal

from exporter.metrics import catalogue as m
from exporter.metrics.catalogue import DEFAULT_CLUSTER_LABEL, RUNBOOK_BASE_URL

__all__ = [
    "RUNBOOK_BASE_URL",
    "Alert",
    "Thresholds",
    "ThresholdsError",
    "alerts",
    "helm_rules_template",
    "rules_document",
    "thresholds_from_mapping",
]

CLI = "kafka-txn-exporter"

Severity = Literal["critical", "warning", "info"]
#: info: a record that something happened (the daemon acted), for a ticket or a channel.
SEVERITIES: tuple[Severity, ...] = ("critical", "warning", "info")

_PROMETHEUS_DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
#: A duration of zero (0s, 0m, 0h0m): ``keep_firing_for`` is then left out of the rule.
_ZERO_DURATION = re.compile(r"^(0+(ms|s|m|h|d|w|y))+$")
_ALERT_NAME = re.compile(r"^[A-Z][A-Za-z0-9]+$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
#: A value the Helm chart fills in (see :func:`helm_rules_template`).
PLACEHOLDER = "__KTE_{}__"
_PLACEHOLDER = re.compile(r"^__KTE_[a-z0-9_]+__$")
#: Labels every alert keeps through aggregation: the Operator routes on namespace.
ROUTING_LABELS = "namespace, job"
#: Alerts off unless enabled (``disabled: {Name: false}``).
DISABLED_BY_DEFAULT = ("KafkaTransactionTwoPhaseCommitOpenTimeHigh",)
#: Fields that shape the rule file rather than a threshold inside one rule.
STRUCTURAL_FIELDS = ("disabled", "additional_rule_labels", "additional_rule_annotations")


class ThresholdsError(ValueError):
    """Invalid thresholds; the message lists every problem, one per line."""


def _default_disabled() -> dict[str, bool]:
    return dict.fromkeys(DISABLED_BY_DEFAULT, True)


@dataclass(frozen=True)
class Thresholds:
    """Tunable parts of the rules. Defaults are justified in each alert's runbook."""

    #: Name of the label that carries the Kafka cluster (the exporter's ``cluster_label``).
    cluster_label: str = DEFAULT_CLUSTER_LABEL
    #: Base of every alert's runbook_url annotation: runbook_url + AlertName + ".md".
    runbook_url: str = RUNBOOK_BASE_URL
    #: Alert name -> true to leave it out of the rule file.
    disabled: Mapping[str, bool] = field(default_factory=_default_disabled)
    #: Labels added to every alert (team routing); an alert's own labels win.
    additional_rule_labels: Mapping[str, str] = field(default_factory=dict)
    #: Annotations added to every alert; an alert's own annotations win.
    additional_rule_annotations: Mapping[str, str] = field(default_factory=dict)

    #: KafkaTransactionHanging and KafkaConsumerGroupBlockedByTransaction (the two pages):
    #: how long they keep firing after their condition is gone. An exporter restart (rolling
    #: update, liveness restart) forgets its confirmations, so the finding series disappear
    #: for a cycle or two; without this the page would resolve and page again. Needs
    #: Prometheus >= 2.42; "0s" leaves the field out (older Prometheus rejects it).
    keep_firing_for: str = "5m"
    #: KafkaTransactionHanging: the finding is already confirmed (read-verify, then
    #: pipeline.hanging_confirm_cycles consecutive cycles; the trust tests hold it through
    #: churn, coordinator and leader kills and least privilege), so `for` only asks for the
    #: series in two evaluations in a row: 1m at a 30 s evaluation interval. With the default
    #: 30 s collection interval a transaction hanging from now pages within 3 minutes
    #: (bench/onset_to_page.py).
    hanging_for: str = "1m"
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
    #: KafkaTransactionTwoPhaseCommitOpenTimeHigh (disabled by default).
    two_phase_commit_open_seconds: int = 3600
    two_phase_commit_for: str = "10m"
    #: KafkaTransactionMarkersPending: PrepareCommit/PrepareAbort normally last milliseconds.
    markers_pending_seconds: int = 120
    markers_pending_for: str = "5m"
    #: KafkaTransactionVerificationDisabled: long enough to ride out a rolling config change.
    verification_disabled_for: str = "15m"
    #: KafkaTransactionCoordinatorTimeoutAbortsRising: more than N aborts per window.
    timeout_aborts_window: str = "15m"
    timeout_aborts_threshold: int = 5
    timeout_aborts_for: str = "15m"
    #: KafkaTransactionalIdsGrowing: more than N new transactional ids over the window, and
    #: still growing over the last hour.
    transactional_ids_growth_window: str = "6h"
    transactional_ids_growth_min: int = 1000
    transactional_ids_growth_for: str = "1h"
    #: KafkaConsumerGroupBlockedByTransaction: a read_committed group stuck behind the LSO.
    consumer_blocked_seconds: int = 300
    consumer_blocked_for: str = "5m"
    #: KafkaConsumerGroupUnstableOffsetCommit.
    unstable_offset_commit_for: str = "10m"
    #: KafkaTxnExporterDown: regex on the Prometheus job that scrapes the exporter.
    exporter_job_regex: str = ".*kafka-txn-exporter.*"
    #: KafkaTxnExporterDown: the namespace the exporter runs in ("" = any). When set, the
    #: "not reporting at all" case carries it, so a namespace-scoped route sees it.
    exporter_namespace: str = ""
    exporter_down_for: str = "10m"
    #: KafkaTxnExporterDataStale: ten default (30 s) collection intervals.
    data_stale_seconds: int = 300
    data_stale_for: str = "5m"
    #: KafkaTxnExporterBlindSpot: long enough for an ACL change to propagate.
    blind_spot_for: str = "15m"
    #: KafkaTxnExporterCyclesSkipped: more than N skipped cycles per window.
    cycles_skipped_window: str = "15m"
    cycles_skipped_threshold: int = 2
    cycles_skipped_for: str = "15m"
    #: KafkaTransactionRemediated (info): the daemon aborted a hanging transaction within
    #: the window (remediation:); fires at once.
    remediated_window: str = "1h"
    remediated_for: str = "0s"

    def validate(self) -> None:
        problems = [problem for f in fields(self) for problem in _field_problems(f, getattr(self, f.name))]
        if problems:
            raise ThresholdsError("\n".join(problems))

    def is_disabled(self, name: str) -> bool:
        return bool(self.disabled.get(name, False))


def _field_problems(f: Field[Any], value: Any) -> list[str]:
    """What is wrong with one field's value (nothing when it is valid)."""
    if f.name == "cluster_label":
        if not isinstance(value, str) or not _LABEL_NAME.match(value):
            return [f"cluster_label: {value!r} is not a Prometheus label name"]
        return []
    if f.name == "disabled":
        return _disabled_problems(value)
    if f.name in ("additional_rule_labels", "additional_rule_annotations"):
        return _rule_extra_problems(f.name, value)
    return _scalar_problems(f, value)


def _disabled_problems(value: Any) -> list[str]:
    if not isinstance(value, Mapping):
        return ["disabled: must map alert names to true or false"]
    names = set(ALERT_NAMES)
    problems = []
    for name, off in value.items():
        if name not in names:
            problems.append(f"disabled.{name}: no such alert; valid: " + ", ".join(sorted(names)))
        elif not isinstance(off, bool):
            problems.append(f"disabled.{name}: {off!r} must be true or false")
    return problems


def _rule_extra_problems(field_name: str, value: Any) -> list[str]:
    if not isinstance(value, Mapping):
        return [f"{field_name}: must map names to strings"]
    problems = []
    for key, text in value.items():
        if not isinstance(key, str) or not _LABEL_NAME.match(key):
            problems.append(f"{field_name}.{key}: not a valid label name")
        elif not isinstance(text, str):
            problems.append(f"{field_name}.{key}: {text!r} must be a string")
    return problems


def _scalar_problems(f: Field[Any], value: Any) -> list[str]:
    if f.name.endswith(("_for", "_window")):
        if not isinstance(value, str) or not _PROMETHEUS_DURATION.match(value):
            return [f"{f.name}: {value!r} is not a Prometheus duration (e.g. 30s, 5m, 1h)"]
    elif f.type == "int":
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            return [f"{f.name}: {value!r} must be a positive integer"]
    elif f.name == "exporter_namespace":
        if not isinstance(value, str) or '"' in value or "\\" in value:
            return [f"{f.name}: {value!r} must be a namespace name"]
    elif f.type == "str" and (not isinstance(value, str) or not value or '"' in value or "\n" in value):
        return [f"{f.name}: must be a non-empty string without quotes"]
    return []


#: Fields the Helm chart fills in as placeholders (all but the structural ones).
TUNABLE_FIELDS = tuple(f.name for f in fields(Thresholds) if f.name not in STRUCTURAL_FIELDS)


def thresholds_from_mapping(raw: Mapping[str, Any] | None) -> Thresholds:
    """Defaults overridden by ``raw``; unknown keys and bad values are reported together.

    ``disabled`` is merged over the default (so ``{KafkaTransactionHanging: true}`` keeps
    the disabled-by-default alerts disabled).
    """
    raw = dict(raw or {})
    known = {f.name for f in fields(Thresholds)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ThresholdsError(
            f"unknown threshold(s): {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
        )
    if isinstance(raw.get("disabled"), Mapping):
        raw["disabled"] = {**_default_disabled(), **raw["disabled"]}
    for key in ("disabled", "additional_rule_labels", "additional_rule_annotations"):
        if key in raw and raw[key] is None:
            raw[key] = {}
    tuned = replace(Thresholds(), **raw)
    tuned.validate()
    return tuned


def _helm_placeholders() -> Thresholds:
    """Thresholds whose tunable values are placeholders (not valid on their own)."""
    values: dict[str, Any] = {name: PLACEHOLDER.format(name) for name in TUNABLE_FIELDS}
    values["disabled"] = {}
    return replace(Thresholds(), **values)


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
    #: ``keep_firing_for`` (Prometheus >= 2.42); "" or a zero duration: not written.
    keep_firing_for: str = ""

    def __post_init__(self) -> None:
        if not _ALERT_NAME.match(self.name):
            raise ValueError(f"alert name {self.name!r} is not CamelCase")
        if self.severity not in SEVERITIES:
            raise ValueError(f"{self.name}: severity {self.severity!r} not in {SEVERITIES}")
        if not (_PROMETHEUS_DURATION.match(self.for_) or _PLACEHOLDER.match(self.for_)):
            raise ValueError(f"{self.name}: for {self.for_!r} is not a Prometheus duration")
        keep = self.keep_firing_for
        if keep and not (_PROMETHEUS_DURATION.match(keep) or _PLACEHOLDER.match(keep)):
            raise ValueError(f"{self.name}: keep_firing_for {keep!r} is not a Prometheus duration")

    def to_rule(self, t: Thresholds) -> dict[str, Any]:
        labels = {**t.additional_rule_labels, "severity": self.severity}
        annotations = {
            **t.additional_rule_annotations,
            "summary": self.summary,
            "description": self.description,
            "runbook_url": f"{t.runbook_url}{self.name}.md",
        }
        rule: dict[str, Any] = {"alert": self.name, "expr": self.expr, "for": self.for_}
        if self.keep_firing_for and not _ZERO_DURATION.match(self.keep_firing_for):
            rule["keep_firing_for"] = self.keep_firing_for
        return {**rule, "labels": labels, "annotations": annotations}


TRANSACTIONS = "kafka-transactions"
CONSUMERS = "kafka-transaction-consumers"
EXPORTER = "kafka-txn-exporter"


#: The labels that name one open transaction (with the routing labels and the cluster).
FINDING_IDENTITY = ("topic", "partition", "producer_id", "start_offset")
#: The labels that name one blocked consumer group partition (with the routing labels and
#: the cluster).
BLOCKED_IDENTITY = ("group", "topic", "partition")


#: The transactional id of a finding's details (``.Labels`` of its info sample).
_DETAIL_TXN_ID = "{{ if .Labels.transactional_id }}'{{ .Labels.transactional_id }}'{{ else }}unknown{{ end }}"


class _Text:
    """Label-dependent fragments of expressions and templates for one cluster label."""

    def __init__(self, t: Thresholds) -> None:
        self.c = t.cluster_label
        #: The cluster in templates.
        self.cluster = "{{ $labels." + self.c + " }}"
        self.partition = "{{ $labels.topic }}-{{ $labels.partition }}"
        self.find_transaction = "Find it: " + CLI + " list, then " + CLI + " describe --transactional-id ID"

    def by(self, *labels: str) -> str:
        """``namespace, job, <cluster label>, labels...``: an aggregation's grouping."""
        return ", ".join([ROUTING_LABELS, self.c, *labels])

    def info_details(
        self,
        info: str,
        identity: Sequence[str],
        details: str,
        *,
        info_matchers: str = "",
        prefer: str = "",
        absent: str = "",
    ) -> str:
        """A template: ``details`` (a template over ``.Labels``) for the current sample of the
        ``info`` series with this alert's cluster and ``identity`` labels, or ``absent`` when
        there is none.

        The alert itself never carries the info series' labels: they can change while the
        problem lasts, and a changed label set is a new alert (the page resolves and fires
        again). Read here, at notification time, they only change the text. One sample is
        used even when several targets (exporter replicas) publish different ones; with
        ``prefer`` (matchers), one that matches them if any does.
        """
        matchers = ",".join(f"{label}=%q" for label in (self.c, *identity))
        if info_matchers:
            matchers += "," + info_matchers.strip("{}")
        arguments = " ".join(f"$labels.{label}" for label in (self.c, *identity))
        selector = f"topk(1, {info}{{{matchers}}})"
        if prefer:
            preferred = f"topk(1, {info}{{{matchers},{prefer.strip('{}')}}})"
            selector = f"{preferred} or on () {selector}"
            arguments = f"{arguments} {arguments}"
        otherwise = "{{ else }}" + absent if absent else ""
        return (
            "{{ range query (printf `"
            + selector
            + "` "
            + arguments
            + ") }}"
            + details
            + otherwise
            + "{{ end }}"
        )

    def finding_details(self, info: str, details: str, info_matchers: str = "") -> str:
        """:meth:`info_details` of this alert's transaction (:data:`FINDING_IDENTITY`)."""
        return self.info_details(info, FINDING_IDENTITY, details, info_matchers=info_matchers)

    def max_by(self, expr: str, *labels: str) -> str:
        return f"max by ({self.by(*labels)}) ({expr})"

    def finding_or_broker_count(self, info: str, count: str, info_matchers: str = "") -> str:
        """Every finding of the ``info`` metric, one alert each; or else, per broker, the
        ``count`` whose findings the exporter's finding cap left out.

        A finding's alert is the transaction (:data:`FINDING_IDENTITY`) and nothing else: its
        leader broker, transactional id and reason can change while it hangs (the leader
        fails over, a coordinator restarts), and a label that changes is a new alert: the
        page would resolve and fire again. The details come into the annotations through
        :meth:`finding_details`.
        """
        finding = self.by(*FINDING_IDENTITY)
        broker = self.by("broker")
        return (
            f"max by ({finding}) ({info}{info_matchers})\n"
            "or\n"
            "(\n"
            f"  max by ({broker}) ({count}) > 0\n"
            f"  unless on ({broker}) {info}\n"
            ")"
        )


def _hanging(t: Thresholds, x: _Text) -> Alert:
    return Alert(
        name="KafkaTransactionHanging",
        group=TRANSACTIONS,
        severity="critical",
        for_=t.hanging_for,
        keep_firing_for=t.keep_firing_for,
        expr=x.finding_or_broker_count(m.HANGING_TRANSACTION_INFO, m.HANGING_TRANSACTIONS),
        summary=(
            "{{ if $labels.topic }}Hanging transaction on " + x.partition + "{{ else }}"
            "{{ $value }} hanging transaction(s) on broker {{ $labels.broker }}{{ end }}"
            " in cluster " + x.cluster
        ),
        description=(
            "{{ if $labels.topic }}Partition "
            + x.partition
            + " ("
            + x.finding_details(m.HANGING_TRANSACTION_INFO, "leader broker {{ .Labels.broker }}, ")
            + "cluster "
            + x.cluster
            + ") has an open transaction of "
            "producer id {{ $labels.producer_id }} "
            + x.finding_details(m.HANGING_TRANSACTION_INFO, "(transactional id " + _DETAIL_TXN_ID + ") ")
            + "starting at offset {{ $labels.start_offset }} that no coordinator will complete"
            + x.finding_details(m.HANGING_TRANSACTION_INFO, " (reason: {{ .Labels.reason }})")
            + ". read_committed consumers of this "
            "partition are stuck at offset {{ $labels.start_offset }} and the log cannot "
            "be compacted or cleaned past it. Abort it: " + CLI + " abort --topic "
            "{{ $labels.topic }} --partition {{ $labels.partition }} --start-offset "
            "{{ $labels.start_offset }}"
            "{{ else }}Broker {{ $labels.broker }} of cluster " + x.cluster + " leads "
            "{{ $value }} partition(s) with a hanging transaction, but the exporter's "
            "finding cap hid the details. List them: " + CLI + " find-hanging --broker-id "
            "{{ $labels.broker }}{{ end }}"
        ),
    )


def _late(t: Thresholds, x: _Text) -> Alert:
    return Alert(
        name="KafkaTransactionsLate",
        group=TRANSACTIONS,
        severity="warning",
        for_=t.late_for,
        expr=x.finding_or_broker_count(
            m.LATE_TRANSACTION_INFO,
            m.PARTITIONS_WITH_LATE_TRANSACTIONS,
            '{class!="two_phase_commit"}',
        ),
        summary=(
            "{{ if $labels.topic }}Late transaction on " + x.partition + "{{ else }}"
            "{{ $value }} partition(s) with late transactions on broker {{ $labels.broker }}"
            "{{ end }} in cluster " + x.cluster
        ),
        description=(
            "{{ if $labels.topic }}Partition "
            + x.partition
            + " ("
            + x.finding_details(m.LATE_TRANSACTION_INFO, "leader broker {{ .Labels.broker }}, ")
            + "cluster "
            + x.cluster
            + ") has had a transaction of "
            "producer id {{ $labels.producer_id }} "
            + x.finding_details(m.LATE_TRANSACTION_INFO, "(transactional id " + _DETAIL_TXN_ID + ") ")
            + "open since offset {{ $labels.start_offset }} for longer than "
            "transaction.max.timeout.ms + 5 minutes"
            + x.finding_details(m.LATE_TRANSACTION_INFO, " (class: {{ .Labels.class }})")
            + ". "
            "The coordinator should have aborted it; it may be hanging."
            "{{ else }}Broker {{ $labels.broker }} of cluster " + x.cluster + " reports "
            "{{ $value }} partition(s) whose oldest transaction is older than "
            "transaction.max.timeout.ms + 5 minutes (PartitionsWithLateTransactionsCount)."
            "{{ end }} Check: " + CLI + " find-hanging "
            "{{ if $labels.topic }}--topic {{ $labels.topic }} --partition "
            "{{ $labels.partition }}{{ else }}--broker-id {{ $labels.broker }}{{ end }}"
        ),
    )


def _lso_lag(t: Thresholds, x: _Text) -> Alert:
    key = x.by("topic", "partition")
    return Alert(
        name="KafkaLastStableOffsetLagGrowing",
        group=TRANSACTIONS,
        severity="warning",
        for_=t.lso_lag_for,
        expr=(
            f"max by ({key}) ({m.PARTITION_LAST_STABLE_OFFSET_LAG})"
            f" > {t.lso_lag_min_offsets}\n"
            f"and on ({key})\n"
            f"max by ({key}) (delta({m.PARTITION_LAST_STABLE_OFFSET_LAG}"
            f"[{t.lso_lag_growth_window}])) > 0\n"
            f"and on ({key})\n"
            f"max by ({key}) ({m.PARTITION_MAX_ACTIVE_TRANSACTION_DURATION})"
            f" > {t.lso_lag_min_open_seconds}"
        ),
        summary="LSO lag of "
        + x.partition
        + " in cluster "
        + x.cluster
        + " keeps growing behind an open transaction",
        description=(
            "The LastStableOffsetLag of partition "
            + x.partition
            + " in cluster "
            + x.cluster
            + " is {{ $value | humanize }} offsets and grew over the last "
            f"{t.lso_lag_growth_window}, while a transaction on it has been open for more "
            f"than {t.lso_lag_min_open_seconds}s. read_committed consumers cannot read past "
            "the open transaction. Find the producer: " + CLI + " describe-producers "
            "--topic {{ $labels.topic }} --partition {{ $labels.partition }}"
        ),
    )


def _coordinator_open_time(t: Thresholds, x: _Text) -> Alert:
    return Alert(
        name="KafkaTransactionCoordinatorOpenTimeHigh",
        group=TRANSACTIONS,
        severity="warning",
        for_=t.coordinator_open_time_for,
        expr=(
            x.max_by(m.ACTIVE_TRANSACTION_OPEN_TIME_MAX, "coordinator")
            + f" > {t.coordinator_open_time_seconds}"
        ),
        summary="Coordinator {{ $labels.coordinator }} in cluster "
        + x.cluster
        + " has a transaction open for {{ $value | humanizeDuration }}",
        description=(
            "The oldest ongoing transaction owned by coordinator broker "
            "{{ $labels.coordinator }} in cluster " + x.cluster + " has been open for "
            "{{ $value | humanizeDuration }}, longer than "
            f"{t.coordinator_open_time_seconds}s (transaction.max.timeout.ms + margin). "
            "Two-phase-commit transactions are not counted here. "
            "The coordinator should have aborted it on timeout: it may be unable to write "
            "its markers. " + x.find_transaction
        ),
    )


def _two_phase_commit(t: Thresholds, x: _Text) -> Alert:
    return Alert(
        name="KafkaTransactionTwoPhaseCommitOpenTimeHigh",
        group=TRANSACTIONS,
        severity="warning",
        for_=t.two_phase_commit_for,
        expr=(
            x.max_by(m.TWO_PHASE_COMMIT_OPEN_TIME_MAX, "coordinator")
            + f" > {t.two_phase_commit_open_seconds}"
        ),
        summary="Two-phase-commit transaction open for {{ $value | humanizeDuration }} on "
        "coordinator {{ $labels.coordinator }} in cluster " + x.cluster,
        description=(
            "Coordinator broker {{ $labels.coordinator }} in cluster " + x.cluster + " owns a "
            "two-phase-commit transaction (KIP-939) open for "
            "{{ $value | humanizeDuration }}, more than "
            f"{t.two_phase_commit_open_seconds}s. Kafka never times these out; the "
            "external transaction manager must commit or abort it. " + x.find_transaction
        ),
    )


def _markers_pending(t: Thresholds, x: _Text) -> Alert:
    return Alert(
        name="KafkaTransactionMarkersPending",
        group=TRANSACTIONS,
        severity="warning",
        for_=t.markers_pending_for,
        expr=(x.max_by(m.COORDINATOR_PREPARE_TIME_MAX, "coordinator") + f" > {t.markers_pending_seconds}"),
        summary="Coordinator {{ $labels.coordinator }} in cluster "
        + x.cluster
        + " cannot finish writing transaction markers",
        description=(
            "A transaction coordinated by broker {{ $labels.coordinator }} of cluster "
            + x.cluster
            + " has been in PrepareCommit or PrepareAbort for "
            "{{ $value | humanizeDuration }} (more than "
            f"{t.markers_pending_seconds}s): the commit or abort is decided but its markers "
            "are not written to every partition yet, usually because a partition leader is "
            "offline or unreachable from the coordinator. The partitions' LSO stays in place "
            "meanwhile. " + x.find_transaction
        ),
    )


def _verification_disabled(t: Thresholds, x: _Text) -> Alert:
    return Alert(
        name="KafkaTransactionVerificationDisabled",
        group=TRANSACTIONS,
        severity="warning",
        for_=t.verification_disabled_for,
        expr=x.max_by(m.BROKER_TRANSACTION_VERIFICATION_ENABLED, "broker") + " == 0",
        summary="Transaction verification is disabled on broker {{ $labels.broker }} in cluster " + x.cluster,
        description=(
            "Broker {{ $labels.broker }} of cluster " + x.cluster + " runs with "
            "transaction.partition.verification.enable=false (KIP-890). It accepts "
            "transactional writes to partitions the coordinator never added to the "
            "transaction, which is how hanging transactions are created. Re-enable it: "
            "kafka-configs.sh --bootstrap-server HOST:PORT --alter --entity-type brokers "
            "--entity-name {{ $labels.broker }} --add-config "
            "transaction.partition.verification.enable=true"
        ),
    )


def _timeout_aborts(t: Thresholds, x: _Text) -> Alert:
    return Alert(
        name="KafkaTransactionCoordinatorTimeoutAbortsRising",
        group=TRANSACTIONS,
        severity="warning",
        for_=t.timeout_aborts_for,
        expr=(
            x.max_by(f"increase({m.COORDINATOR_TIMEOUT_ABORTS}[{t.timeout_aborts_window}])", "coordinator")
            + f" > {t.timeout_aborts_threshold}"
        ),
        summary="Coordinator {{ $labels.coordinator }} in cluster "
        + x.cluster
        + " keeps aborting transactions on timeout",
        description=(
            "Coordinator broker {{ $labels.coordinator }} of cluster " + x.cluster + " aborted "
            "{{ $value | humanize }} transactions in the last "
            f"{t.timeout_aborts_window} because they outlived their transaction.timeout.ms "
            "(KIP-588). Producers are dying or stalling mid-transaction, and their "
            "partitions' LSO is held back until each abort. Find them: " + CLI + " list"
        ),
    )


def _transactional_ids_growing(t: Thresholds, x: _Text) -> Alert:
    per_cluster = f"namespace, {x.c}"
    ids = (
        f"sum by ({per_cluster}) (max by ({per_cluster}, coordinator, state) "
        f"({m.COORDINATOR_TRANSACTIONS}{{}}))"
    )
    before = ids.replace("{})", f"{{}} offset {t.transactional_ids_growth_window})")
    an_hour_ago = ids.replace("{})", "{} offset 1h)")
    return Alert(
        name="KafkaTransactionalIdsGrowing",
        group=TRANSACTIONS,
        severity="warning",
        for_=t.transactional_ids_growth_for,
        expr=(
            f"{ids} - {before} > {t.transactional_ids_growth_min}\n"
            f"and on ({per_cluster})\n"
            f"{ids} - {an_hour_ago} > 0"
        ),
        summary="Transactional ids in cluster " + x.cluster + " keep growing",
        description=(
            "The coordinators of cluster " + x.cluster + " know {{ $value | humanize }} more "
            f"transactional ids than {t.transactional_ids_growth_window} ago, and the number "
            "still grew over the last hour. Applications that make up a new "
            "transactional.id per producer instance (random ids, pod names with hashes) "
            "fill __transaction_state and coordinator memory until "
            "transactional.id.expiration.ms expires them. Find the prefixes: " + CLI + " list"
        ),
    )


def _consumer_blocked(t: Thresholds, x: _Text) -> Alert:
    """One alert per blocked group partition. The transaction that blocks it (transactional
    id, producer id, start offset, application) is read into the description when it is sent,
    not joined into the alert's labels: those labels change between cycles (a partial cycle
    publishes no transactional id), which would resolve the page and fire it again, and two
    targets of one cluster whose details disagree would make the join fail (many-to-many)."""
    transaction = x.info_details(
        m.CONSUMER_GROUP_BLOCKED_INFO,
        BLOCKED_IDENTITY,
        "producer id {{ if .Labels.producer_id }}{{ .Labels.producer_id }}{{ else }}unknown{{ end }}"
        " (transactional id "
        + _DETAIL_TXN_ID
        + "{{ if .Labels.application }}, application {{ .Labels.application }}{{ end }}) "
        "starting at offset {{ if .Labels.start_offset }}{{ .Labels.start_offset }}"
        "{{ else }}unknown{{ end }}",
        prefer='{transactional_id!=""}',
        absent="producer id unknown (transactional id unknown) starting at offset unknown",
    )
    return Alert(
        name="KafkaConsumerGroupBlockedByTransaction",
        group=CONSUMERS,
        severity="critical",
        for_=t.consumer_blocked_for,
        keep_firing_for=t.keep_firing_for,
        expr=(
            x.max_by(m.CONSUMER_GROUP_BLOCKED_SECONDS, *BLOCKED_IDENTITY) + f" > {t.consumer_blocked_seconds}"
        ),
        summary="Consumer group {{ $labels.group }} is blocked on "
        + x.partition
        + " in cluster "
        + x.cluster
        + " by an open transaction",
        description=(
            "read_committed consumers of group {{ $labels.group }} have read everything up "
            "to the last stable offset of partition "
            + x.partition
            + " (cluster "
            + x.cluster
            + ") and have waited {{ $value | humanizeDuration }} behind the "
            "open transaction of " + transaction + ". If it is hanging: " + CLI + " find-hanging --topic "
            "{{ $labels.topic }} --partition {{ $labels.partition }}, then "
            + CLI
            + " abort (or force-terminate --transactional-id ID for a two-phase-commit "
            "transaction nobody will finish)."
        ),
    )


def _unstable_offset_commit(t: Thresholds, x: _Text) -> Alert:
    return Alert(
        name="KafkaConsumerGroupUnstableOffsetCommit",
        group=CONSUMERS,
        severity="warning",
        for_=t.unstable_offset_commit_for,
        expr=x.max_by(m.CONSUMER_GROUP_UNSTABLE_OFFSET_COMMITS, "group") + " > 0",
        summary="Consumer group {{ $labels.group }} in cluster "
        + x.cluster
        + " has offset commits pending in a transaction",
        description=(
            "{{ $value }} partition(s) of consumer group {{ $labels.group }} (cluster "
            + x.cluster
            + ") have offsets committed inside a transaction that is not "
            "complete (UNSTABLE_OFFSET_COMMIT on OffsetFetch with require_stable). Consumers "
            "of the group that restart cannot fetch their position until the transaction "
            "ends. Find the transaction: " + CLI + " list, then " + CLI + " describe --transactional-id ID"
        ),
    )


def _exporter_down(t: Thresholds, x: _Text) -> Alert:
    namespace = f'namespace="{t.exporter_namespace}", ' if t.exporter_namespace else ""
    absent = f'{{namespace="{t.exporter_namespace}"}}' if t.exporter_namespace else ""
    return Alert(
        name="KafkaTxnExporterDown",
        group=EXPORTER,
        severity="warning",
        for_=t.exporter_down_for,
        expr=(
            x.max_by(m.EXPORTER_UP) + " == 0\n"
            f"or max by ({ROUTING_LABELS}, instance) "
            f'(up{{{namespace}job=~"{t.exporter_job_regex}"}}) == 0\n'
            f"or absent({m.EXPORTER_UP}{absent})"
        ),
        summary=(
            "{{ if $labels."
            + x.c
            + " }}kafka-txn-exporter cannot collect cluster "
            + x.cluster
            + "{{ else if $labels.instance }}kafka-txn-exporter "
            "{{ $labels.instance }} cannot be scraped{{ else }}kafka-txn-exporter is "
            "not reporting{{ end }}"
        ),
        description=(
            "{{ if $labels."
            + x.c
            + " }}The last collection cycles of cluster "
            + x.cluster
            + f" failed at least in part ({m.EXPORTER_UP} is 0): transaction metrics "
            "are partial or missing. See the request errors on the exporter dashboard and "
            "the exporter log.{{ else if $labels.instance }}Prometheus cannot scrape "
            "{{ $labels.instance }} (job {{ $labels.job }}): no Kafka transaction is "
            "monitored by it.{{ else }}No "
            f"{m.EXPORTER_UP} series exist: the exporter "
            "is not running or not scraped, and nothing watches Kafka transactions."
            "{{ end }} Hanging transactions go unnoticed meanwhile: run "
            + CLI
            + " find-hanging by hand if this lasts."
        ),
    )


def _data_stale(t: Thresholds, x: _Text) -> Alert:
    return Alert(
        name="KafkaTxnExporterDataStale",
        group=EXPORTER,
        severity="warning",
        for_=t.data_stale_for,
        # The threshold is the larger of data_stale_seconds and three of the cluster's own
        # collection intervals: a cluster collected every 10 minutes has a 10-minute-old
        # snapshot before every cycle, and that is not stale. An exporter that does not
        # publish its interval gets the fixed threshold.
        expr=(
            x.max_by(m.EXPORTER_SNAPSHOT_AGE)
            + f"\n> on ({x.by()})\n"
            + x.max_by(f"clamp_min(3 * {m.EXPORTER_COLLECTION_INTERVAL}, {t.data_stale_seconds})")
            + "\nor\n"
            + x.max_by(m.EXPORTER_SNAPSHOT_AGE)
            + f" > {t.data_stale_seconds}\nunless on ({x.by()}) {m.EXPORTER_COLLECTION_INTERVAL}"
        ),
        summary="kafka-txn-exporter data for cluster "
        + x.cluster
        + " is {{ $value | humanizeDuration }} old",
        description=(
            "The snapshot kafka-txn-exporter serves for cluster " + x.cluster + " is "
            "{{ $value | humanizeDuration }} old (threshold: the larger of "
            f"{t.data_stale_seconds}s and three collection intervals): collection cycles are "
            "not completing. Every transaction alert for this cluster works on old data. "
            "Check the cycle and stage durations on the exporter dashboard and the exporter log."
        ),
    )


def _blind_spot(t: Thresholds, x: _Text) -> Alert:
    return Alert(
        name="KafkaTxnExporterBlindSpot",
        group=EXPORTER,
        severity="warning",
        for_=t.blind_spot_for,
        expr=f"min by ({x.by()}) ({m.EXPORTER_TRANSACTIONAL_IDS_VISIBLE}) == 0",
        summary="kafka-txn-exporter cannot see every transaction of cluster " + x.cluster,
        description=(
            "The exporter's principal may not Describe every transactional id of cluster "
            + x.cluster
            + ", so ListTransactions can leave transactions out without an "
            f"error: their open transactions are classed unknown ({m.OPEN_TRANSACTIONS}"
            "_unknown by reason) and a hanging transaction among them may be missed or "
            "misjudged. Grant Describe on every transactional id: kafka-acls.sh "
            "--bootstrap-server HOST:PORT --command-config admin.properties --add "
            "--allow-principal User:<exporter principal> --operation Describe "
            "--transactional-id '*'"
        ),
    )


def _cycles_skipped(t: Thresholds, x: _Text) -> Alert:
    return Alert(
        name="KafkaTxnExporterCyclesSkipped",
        group=EXPORTER,
        severity="warning",
        for_=t.cycles_skipped_for,
        expr=(
            x.max_by(f"increase({m.EXPORTER_CYCLES_SKIPPED}[{t.cycles_skipped_window}])")
            + f" > {t.cycles_skipped_threshold}"
        ),
        summary="kafka-txn-exporter keeps skipping collection cycles of cluster " + x.cluster,
        description=(
            "{{ $value | humanize }} collection cycles of cluster " + x.cluster + " were "
            f"skipped in the last {t.cycles_skipped_window} because the previous cycle "
            "was still running or its snapshot was not ready when its round closed: a "
            "cycle takes longer than the collection interval, or the process has more "
            "clusters than it can cycle (the start-up log says so). Data gets older than "
            "the interval promises. Raise the cluster's interval, narrow topics.allow, "
            "raise collection.workers, give the exporter more CPU, or split the clusters "
            "over several exporters; the exporter dashboard's stage durations show the "
            "slow part."
        ),
    )


def _remediated(t: Thresholds, x: _Text) -> Alert:
    return Alert(
        name="KafkaTransactionRemediated",
        group=TRANSACTIONS,
        severity="info",
        for_=t.remediated_for,
        expr=(
            x.max_by(f'increase({m.REMEDIATIONS}{{result="aborted"}}[{t.remediated_window}])', "action")
            + " > 0"
        ),
        summary="kafka-txn-exporter aborted hanging transactions in cluster " + x.cluster,
        description=(
            "The exporter's auto-remediation (remediation: in its config) aborted "
            "{{ $value | humanize }} hanging transaction(s) in cluster " + x.cluster + " in the "
            f"last {t.remediated_window} (WriteTxnMarkers ABORT, after checking the partition "
            "and every coordinator again). Each action is in the exporter's log (a "
            "'remediation:' line) and in the history's actions dataset: "
            + CLI
            + " history report. Find why they hung (is transaction.partition.verification.enable "
            "off?) and which application left them."
        ),
    )


_BUILDERS = (
    _hanging,
    _late,
    _lso_lag,
    _coordinator_open_time,
    _two_phase_commit,
    _markers_pending,
    _verification_disabled,
    _timeout_aborts,
    _transactional_ids_growing,
    _remediated,
    _consumer_blocked,
    _unstable_offset_commit,
    _exporter_down,
    _data_stale,
    _blind_spot,
    _cycles_skipped,
)


def _all_alerts(t: Thresholds) -> list[Alert]:
    x = _Text(t)
    return [build(t, x) for build in _BUILDERS]


#: Every alert name, enabled or not.
ALERT_NAMES: tuple[str, ...] = tuple(a.name for a in _all_alerts(Thresholds()))


def alerts(thresholds: Thresholds | None = None) -> list[Alert]:
    """Every enabled alert, in the order they are written."""
    t = thresholds or Thresholds()
    t.validate()
    return [a for a in _all_alerts(t) if not t.is_disabled(a.name)]


def _document(t: Thresholds, chosen: list[Alert]) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for alert in chosen:
        groups.setdefault(alert.group, []).append(alert.to_rule(t))
    return {"groups": [{"name": name, "rules": rules} for name, rules in groups.items()]}


def rules_document(thresholds: Thresholds | None = None) -> dict[str, Any]:
    """The Prometheus rule file as data: one group per concern, alerts in definition order."""
    t = thresholds or Thresholds()
    return _document(t, alerts(t))


def helm_rules_template() -> dict[str, Any]:
    """Every alert (disabled ones too) with each tunable value a placeholder
    ``__KTE_<field>__``, for the chart's PrometheusRule template to fill in from
    ``rules.thresholds`` (and ``config.cluster_label``, ``rules.runbookUrl``, the release
    namespace); it drops ``rules.disabled`` alerts and adds the extra labels and annotations.
    """
    t = _helm_placeholders()
    return _document(t, _all_alerts(t))
