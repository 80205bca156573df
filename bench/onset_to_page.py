"""From the onset of a hanging transaction to its page, at the default collection interval.

A single-node broker from the test bed (loopback only), the daemon in this process at its
default interval (30 s) with the default pipeline settings (two confirming cycles), and two
real Prometheus servers scraping it every 30 s and evaluating every 30 s: one with the
generated rules as they are now, one with the rules before this work (``hanging_for: 5m``).
For each reason a hanging transaction is created *now* (no back-dating) on its own partition:

* ``coordinator_not_open``: InitProducerId, then a raw transactional Produce (v11) without
  AddPartitionsToTxn, verification off on the leader (the coordinator stays ``Empty``);
* ``partition_not_in_transaction``: the same producer's open transaction on another
  partition (AddPartitionsToTxn and a write there), then the raw Produce to this one.

``transactional_id_not_found`` and ``producer_id_changed`` are not made: each needs the id to
vanish, or its producer id to change, between the cycle's ListTransactions and its
DescribeTransactions (a few milliseconds apart). Once it has happened, the next cycle no
longer lists the old producer id under any transactional id, so the transaction is
``no_transactional_id`` from then on: ``unknown`` (``unlisted_within_timeout``) until it is
older than its leader's ``transaction.max.timeout.ms`` plus ``pipeline.late_padding`` (20
minutes at the defaults), then hanging, two cycles later. The script prints that bound.

Figures (``FIGURE<TAB>name<TAB>value``): seconds from onset to the ``hanging`` class on
/metrics and to ``KafkaTransactionHanging`` firing, per reason, with both rule sets, beside
the broker's late-transaction gauge threshold (``transaction.max.timeout.ms`` + 5 min, from
the producer's LastTimestamp) and Kafka's find-hanging default (15 min).

Run: ``.venv/bin/python bench/onset_to_page.py [--interval 30] [--scrape 30]``.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from alerts.rules import Thresholds
from exporter.config import parse_config
from exporter.daemon import Daemon
from exporter.model import DEFAULT_TRANSACTION_MAX_TIMEOUT_MS, KAFKA_LATE_TRANSACTION_BUFFER_MS
from testbed.broker import KafkaCluster, free_port
from testbed.scenarios import create_hanging_transaction, create_partition_not_in_transaction
from tests.e2e.stack import http_get, query, render_rules, start_prometheus

ALERT = "KafkaTransactionHanging"
#: Kafka's find-hanging looks at transactions whose LastTimestamp is older than this.
FIND_HANGING_DEFAULT_S = 15 * 60
BROKER_LATE_GAUGE_S = (DEFAULT_TRANSACTION_MAX_TIMEOUT_MS + KAFKA_LATE_TRANSACTION_BUFFER_MS) / 1000
WAIT_S = 900.0


def figure(name: str, value: float) -> None:
    print(f"FIGURE\t{name}\t{value:.1f}", flush=True)


def prometheus_yaml(target: str, rule_file: Path, scrape_s: int) -> str:
    return (
        "global:\n"
        f"  scrape_interval: {scrape_s}s\n"
        f"  scrape_timeout: {min(10, scrape_s)}s\n"
        f"  evaluation_interval: {scrape_s}s\n"
        f"rule_files: ['{rule_file}']\n"
        "scrape_configs:\n"
        "  - job_name: kafka-txn-exporter\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n"
    )


def hanging_on_metrics(port: int, topic: str) -> set[str]:
    """Partitions of ``topic`` whose transaction /metrics shows as hanging."""
    status, body = http_get(f"http://127.0.0.1:{port}/metrics")
    if status != 200:
        return set()
    return {
        s.labels["partition"]
        for family in text_string_to_metric_families(body.decode())
        if family.name == "kafka_txn_hanging_transaction_info"
        for s in family.samples
        if s.labels.get("topic") == topic
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=int, default=30, help="collection interval, s (default 30)")
    parser.add_argument("--scrape", type=int, default=30, help="Prometheus scrape/evaluation interval, s")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="kte-onset-"))
    with KafkaCluster(brokers=1, abort_timed_out_transaction_cleanup_interval_ms=1000) as cluster:
        topic = cluster.create_topic(f"onset-{uuid.uuid4().hex[:6]}", partitions=3)
        config = parse_config(
            {
                "web": {"listen_address": f"127.0.0.1:{free_port()}"},
                "clusters": [
                    {
                        "name": "bench",
                        "bootstrap_servers": cluster.bootstrap_servers,
                        "interval": f"{args.interval}s",
                        "topics": {"allow": [topic]},
                    }
                ],
            },
            env={},
        )
        daemon = Daemon(config, registry=CollectorRegistry())
        daemon.start()
        servers = {}
        try:
            for name, thresholds in (
                ("now", Thresholds()),
                ("before", replace(Thresholds(), hanging_for="5m")),
            ):
                directory = work / name
                directory.mkdir()
                rule_file = directory / "kafka-txn-exporter.rules.yml"
                servers[name] = start_prometheus(
                    directory,
                    prometheus_yaml(f"127.0.0.1:{daemon.port}", rule_file, args.scrape),
                    render_rules(thresholds),
                    free_port(),
                )
            deadline = time.monotonic() + 300
            while not daemon.store.ready:
                if time.monotonic() > deadline:
                    raise TimeoutError("the daemon never completed a cycle")
                time.sleep(0.5)
            print(f"daemon ready, interval {args.interval} s; rules for: now 1m, before 5m", flush=True)
            makers: dict[str, Callable[[], object]] = {
                "coordinator_not_open": lambda: create_hanging_transaction(cluster, topic, partition=0),
                "partition_not_in_transaction": lambda: create_partition_not_in_transaction(
                    cluster, topic, owned_partition=1, hanging_partition=2
                ),
            }
            partition_of = {"coordinator_not_open": "0", "partition_not_in_transaction": "2"}
            onset: dict[str, float] = {}
            cycles_at_onset: dict[str, int] = {}
            for reason, make in makers.items():
                make()
                onset[reason] = time.monotonic()
                cycles_at_onset[reason] = daemon.store.get("bench").cycles_complete
                print(f"{reason}: hanging transaction created", flush=True)
            classed: dict[str, float] = {}
            cycles: dict[str, int] = {}
            paged: dict[tuple[str, str], float] = {}
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline and (
                len(classed) < len(makers) or len(paged) < 2 * len(makers)
            ):
                now = time.monotonic()
                shown = hanging_on_metrics(daemon.port, topic)
                for reason in makers:
                    if reason not in classed and partition_of[reason] in shown:
                        classed[reason] = now - onset[reason]
                        cycles[reason] = daemon.store.get("bench").cycles_complete - cycles_at_onset[reason]
                        print(f"{reason}: hanging on /metrics after {classed[reason]:.1f} s", flush=True)
                    for name, server in servers.items():
                        if (reason, name) in paged:
                            continue
                        expr = (
                            f'ALERTS{{alertname="{ALERT}",alertstate="firing",topic="{topic}",'
                            f'partition="{partition_of[reason]}"}}'
                        )
                        if query(server, expr):
                            paged[(reason, name)] = now - onset[reason]
                            took = paged[(reason, name)]
                            print(f"{reason}: {ALERT} firing ({name} rules) after {took:.1f} s", flush=True)
                time.sleep(1.0)
            durations = daemon.registry.get_sample_value(
                "kafka_txn_exporter_cycle_duration_seconds_sum", {"kafka_cluster": "bench"}
            )
            count = daemon.registry.get_sample_value(
                "kafka_txn_exporter_cycle_duration_seconds_count", {"kafka_cluster": "bench"}
            )
            if durations is not None and count:
                figure("onset_bench_mean_cycle_s", durations / count)
            for reason in makers:
                if reason in classed:
                    figure(f"onset_to_hanging_class_s@{reason}", classed[reason])
                    # Cycles that completed after the onset, the one that showed it included (a
                    # cycle in flight at the onset counts, whether or not it saw it).
                    figure(f"onset_to_hanging_class_cycles@{reason}", cycles[reason])
                for name in servers:
                    if (reason, name) in paged:
                        suffix = "" if name == "now" else "_before"
                        figure(f"onset_to_page{suffix}_s@{reason}", paged[(reason, name)])
            late_s = (DEFAULT_TRANSACTION_MAX_TIMEOUT_MS + config.pipeline.late_padding_ms) / 1000
            print(
                "transactional_id_not_found, producer_id_changed: not made (a race between "
                "ListTransactions and DescribeTransactions within one cycle); from the next "
                f"cycle on they are no_transactional_id, hanging once older than {late_s:.0f} s "
                "plus two cycles",
                flush=True,
            )
            figure("no_transactional_id_earliest_class_s", late_s + 2 * args.interval)
            figure("broker_late_gauge_threshold_s", BROKER_LATE_GAUGE_S)
            figure("find_hanging_default_threshold_s", FIND_HANGING_DEFAULT_S)
            return 0 if len(classed) == len(makers) and len(paged) == 2 * len(makers) else 1
        finally:
            for server in servers.values():
                server.process.stop()
            daemon.stop()


if __name__ == "__main__":
    raise SystemExit(main())
