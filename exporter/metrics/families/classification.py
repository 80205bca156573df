"""The classification of open partition-level transactions: counts by class, the unknown
ones by why, and one series per hanging and per late transaction."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from exporter.metrics import catalogue as c
from exporter.metrics.scrape import Scrape
from exporter.model import Finding, TxnClass


def render(scrape: Scrape) -> Iterator[Metric]:
    by_class = scrape.metric(c.OPEN_TRANSACTIONS)
    unknown = scrape.metric(c.OPEN_TRANSACTIONS_UNKNOWN)
    hanging = scrape.metric(c.HANGING_TRANSACTION_INFO)
    late = scrape.metric(c.LATE_TRANSACTION_INFO)
    for s, r in scrape.results():
        counts = dict(r.open_transactions_by_class)
        for txn_class in TxnClass:
            by_class.add_metric([s.cluster, txn_class.value], counts.get(txn_class, 0))
        for reason, count in r.open_transactions_unknown:
            unknown.add_metric([s.cluster, reason.value], count)
        for f in r.findings:
            if f.hanging:
                hanging.add_metric(
                    [
                        *_where(s.cluster, f),
                        str(f.coordinator_epoch),
                        str(f.start_offset),
                        f.transactional_id or "",
                        f.hanging_reason.value if f.hanging_reason else "",
                        f.start_time_source.value,
                    ],
                    1.0,
                )
            if f.late:
                late.add_metric(
                    [
                        *_where(s.cluster, f),
                        str(f.start_offset),
                        f.transactional_id or "",
                        f.txn_class.value,
                        f.start_time_source.value,
                    ],
                    1.0,
                )
    yield from (by_class, unknown, hanging, late)


def _where(cluster: str, f: Finding) -> list[str]:
    return [cluster, str(f.broker_id), f.topic, str(f.partition), str(f.producer_id), str(f.producer_epoch)]
