"""Exporter self-monitoring: is the exporter collecting, how fast, and what fails."""

from __future__ import annotations

from grafanalib.core import Dashboard

from dashboards.common import (
    ANY_RATE,
    CLUSTER,
    CLUSTER_LABEL,
    EXPORTER_UID,
    RED_BELOW_1,
    PanelSpec,
    Query,
    Section,
    cluster_variable,
    dashboard,
    data_age_stat,
    datasource_variable,
    exporter_up_stat,
    max_by,
    runbook,
)
from exporter.metrics import catalogue as m

DOWN = runbook("KafkaTxnExporterDown")
STALE = runbook("KafkaTxnExporterDataStale")


def _health() -> Section:
    return Section(
        "Health",
        (
            exporter_up_stat(
                title="Up",
                shows=f"{m.EXPORTER_UP} per cluster: 1 when every stage of the last "
                "collection cycle succeeded, 0 when any part failed (what succeeded is still "
                "exported).",
                when_red=f"Follow {DOWN}; the request errors panel names the failing Kafka API.",
                width=6,
            ),
            data_age_stat(
                title="Last successful cycle",
                shows="When the last complete collection cycle finished, per cluster.",
                when_red=f"Red when older than 5 minutes: follow {STALE}.",
                expr="time() - " + max_by("kafka_cluster", m.EXPORTER_LAST_SUCCESS_TIMESTAMP),
                width=6,
            ),
            data_age_stat(
                shows="Age of the snapshot the exporter serves on /metrics, per cluster.",
                when_red=f"Red above 5 minutes: follow {STALE}.",
                width=6,
            ),
            PanelSpec(
                kind="stat",
                title="Exporter version",
                shows=f"Versions of kafka-txn-exporter being scraped ({m.EXPORTER_BUILD_INFO})"
                ", with the number of instances running each.",
                when_red="Never red; more than one version outside a rollout means a stale "
                "deployment: check the Helm release (`helm history kafka-txn-exporter`). "
                f"Runbooks: {runbook('README')}",
                unit="none",
                queries=(
                    Query(
                        f"count by (version) ({m.EXPORTER_BUILD_INFO})",
                        legend="{{version}}",
                        instant=True,
                    ),
                ),
                width=6,
                height=5,
            ),
            PanelSpec(
                kind="stat",
                title="Transactional ids visible",
                shows="Whether the exporter's principal may Describe every transactional id "
                f"({m.EXPORTER_TRANSACTIONAL_IDS_VISIBLE}). Without it ListTransactions "
                "silently leaves transactions out and they are classed unknown.",
                when_red=f"BLIND SPOT: follow {runbook('KafkaTxnExporterBlindSpot')}: grant "
                "Describe on TransactionalId '*' with kafka-acls.sh.",
                unit="none",
                queries=(
                    Query(
                        f"min by ({CLUSTER_LABEL}) ({m.EXPORTER_TRANSACTIONAL_IDS_VISIBLE}{{{CLUSTER}}})",
                        legend="{{" + CLUSTER_LABEL + "}}",
                        instant=True,
                    ),
                ),
                width=12,
                height=5,
                steps=RED_BELOW_1,
                value_text={"0": ("BLIND SPOT", "red"), "1": ("all visible", "green")},
            ),
            PanelSpec(
                kind="timeseries",
                title="Cycles skipped",
                shows="Collection cycles skipped per second because the previous cycle was "
                "still running or the snapshot missed its round "
                f"({m.EXPORTER_CYCLES_SKIPPED}).",
                when_red=f"A sustained rate: follow {runbook('KafkaTxnExporterCyclesSkipped')}.",
                unit="ops",
                queries=(
                    Query(
                        f"max by ({CLUSTER_LABEL}) (rate("
                        f"{m.EXPORTER_CYCLES_SKIPPED}{{{CLUSTER}}}[$__rate_interval]))",
                        legend="{{" + CLUSTER_LABEL + "}}",
                    ),
                ),
                width=12,
                height=5,
                steps=ANY_RATE,
            ),
        ),
    )


def _cycles() -> Section:
    return Section(
        "Collection cycles",
        (
            PanelSpec(
                kind="timeseries",
                title="Cycle duration",
                shows="Duration of collection cycles per cluster: p50, p95 and p99 from the histogram.",
                when_red="p99 near the cluster's collection interval: cycles start to "
                f"overlap and data goes stale. Follow {STALE}.",
                unit="s",
                queries=(
                    *(
                        Query(
                            f"histogram_quantile({q}, sum by (kafka_cluster, le) (rate("
                            f"{m.EXPORTER_CYCLE_DURATION}_bucket{{{CLUSTER}}}"
                            "[$__rate_interval])))",
                            legend=f"{{{{kafka_cluster}}}} p{round(q * 100)}",
                        )
                        for q in (0.5, 0.95, 0.99)
                    ),
                ),
                width=12,
            ),
            PanelSpec(
                kind="timeseries",
                title="Stage durations",
                shows=f"How long each stage of the last cycle took ({m.EXPORTER_STAGE_DURATION}), "
                "per cluster and stage.",
                when_red="One stage dominating the cycle points at the slow Kafka API or the "
                f"computation; follow {STALE}.",
                unit="s",
                queries=(
                    Query(
                        max_by("kafka_cluster, stage", m.EXPORTER_STAGE_DURATION),
                        legend="{{kafka_cluster}} {{stage}}",
                    ),
                ),
                width=12,
            ),
            PanelSpec(
                kind="timeseries",
                title="Cycles by result",
                shows="Collection cycles per second by result: complete, partial (some stage "
                "failed, the rest is exported) or failed.",
                when_red=f"partial or failed above 0: follow {DOWN}.",
                unit="ops",
                queries=(
                    Query(
                        "sum by (kafka_cluster, result) (rate("
                        f"{m.EXPORTER_CYCLES}{{{CLUSTER}}}[$__rate_interval]))",
                        legend="{{kafka_cluster}} {{result}}",
                    ),
                ),
                width=12,
                stacked=True,
            ),
            PanelSpec(
                kind="timeseries",
                title="Request errors by API and error",
                shows="Kafka requests that failed per second, by API (DescribeProducers, "
                "ListTransactions, ...) and error code.",
                when_red="Any sustained rate: follow "
                f"{DOWN}. Authorization errors need ACLs (Describe on topics and "
                "TransactionalId); timeouts point at the network or overloaded brokers.",
                unit="ops",
                queries=(
                    Query(
                        "sum by (kafka_cluster, api, error) (rate("
                        f"{m.EXPORTER_REQUEST_ERRORS}{{{CLUSTER}}}"
                        "[$__rate_interval]))",
                        legend="{{kafka_cluster}} {{api}} {{error}}",
                    ),
                ),
                width=12,
                steps=ANY_RATE,
            ),
        ),
    )


def build() -> Dashboard:
    return dashboard(
        uid=EXPORTER_UID,
        title="Kafka transactions / Exporter self-monitoring",
        description="Health, collection cycles and Kafka request errors of kafka-txn-exporter.",
        variables=(datasource_variable(), cluster_variable()),
        sections=(_health(), _cycles()),
    )
