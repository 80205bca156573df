"""Exporter self-monitoring: is the exporter collecting, how fast, and what fails."""

from __future__ import annotations

from grafanalib.core import Dashboard

from dashboards.common import (
    ANY_RATE,
    CLUSTER,
    EXPORTER_UID,
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

DOWN = runbook("KafkaTxnExporterDown")
STALE = runbook("KafkaTxnExporterDataStale")


def _health() -> Section:
    return Section(
        "Health",
        (
            exporter_up_stat(
                title="Up",
                shows="kafka_txn_exporter_up per cluster: 1 when every stage of the last "
                "collection cycle succeeded, 0 when any part failed (what succeeded is still "
                "exported).",
                when_red=f"Follow {DOWN}; the request errors panel names the failing Kafka API.",
                width=6,
            ),
            data_age_stat(
                title="Last successful cycle",
                shows="When the last complete collection cycle finished, per cluster.",
                when_red=f"Red when older than 5 minutes: follow {STALE}.",
                expr="time() - "
                + max_by("cluster", "kafka_txn_exporter_last_success_timestamp_seconds"),
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
                shows="Versions of kafka-txn-exporter being scraped (kafka_txn_exporter_build_info)"
                ", with the number of instances running each.",
                when_red="Never red; more than one version outside a rollout means a stale "
                "deployment: check the Helm release (`helm history kafka-txn-exporter`). "
                f"Runbooks: {runbook('README')}",
                unit="none",
                queries=(
                    Query(
                        "count by (version) (kafka_txn_exporter_build_info)",
                        legend="{{version}}",
                        instant=True,
                    ),
                ),
                width=6,
                height=5,
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
                shows="Duration of collection cycles per cluster: p50, p95 and p99 from the "
                "histogram.",
                when_red="p99 near the cluster's collection interval: cycles start to "
                f"overlap and data goes stale. Follow {STALE}.",
                unit="s",
                queries=(
                    *(
                        Query(
                            f"histogram_quantile({q}, sum by (cluster, le) (rate("
                            f"kafka_txn_exporter_cycle_duration_seconds_bucket{{{CLUSTER}}}"
                            "[$__rate_interval])))",
                            legend=f"{{{{cluster}}}} p{round(q * 100)}",
                        )
                        for q in (0.5, 0.95, 0.99)
                    ),
                ),
                width=12,
            ),
            PanelSpec(
                kind="timeseries",
                title="Stage durations",
                shows="How long each stage of the last cycle took (kafka_txn_exporter_stage_"
                "duration_seconds), per cluster and stage.",
                when_red="One stage dominating the cycle points at the slow Kafka API or the "
                f"computation; follow {STALE}.",
                unit="s",
                queries=(
                    Query(
                        max_by("cluster, stage", "kafka_txn_exporter_stage_duration_seconds"),
                        legend="{{cluster}} {{stage}}",
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
                        "sum by (cluster, result) (rate("
                        f"kafka_txn_exporter_cycles_total{{{CLUSTER}}}[$__rate_interval]))",
                        legend="{{cluster}} {{result}}",
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
                        "sum by (cluster, api, error) (rate("
                        f"kafka_txn_exporter_request_errors_total{{{CLUSTER}}}"
                        "[$__rate_interval]))",
                        legend="{{cluster}} {{api}} {{error}}",
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
