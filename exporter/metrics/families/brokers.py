"""Per broker: partitions it leads with late transactions, their largest LSO lag, confirmed
hanging transactions, and its transaction configs (verification, two-phase commit, the
maximum timeout)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from exporter.metrics import catalogue as c
from exporter.metrics.scrape import Scrape


def render(scrape: Scrape) -> Iterator[Metric]:
    late = scrape.metric(c.PARTITIONS_WITH_LATE_TRANSACTIONS)
    max_lag = scrape.metric(c.MAX_LAST_STABLE_OFFSET_LAG)
    hanging = scrape.metric(c.HANGING_TRANSACTIONS)
    verification = scrape.metric(c.BROKER_TRANSACTION_VERIFICATION_ENABLED)
    two_pc = scrape.metric(c.BROKER_TWO_PHASE_COMMIT_ENABLED)
    max_timeout = scrape.metric(c.BROKER_TRANSACTION_MAX_TIMEOUT)
    for s, r in scrape.results():
        for b in r.brokers:
            labels = [s.cluster, str(b.broker_id)]
            late.add_metric(labels, b.partitions_with_late_transactions)
            max_lag.add_metric(labels, b.max_last_stable_offset_lag)
            hanging.add_metric(labels, b.hanging_transactions)
            if b.verification_enabled is not None:  # absent, not a guess, when unread
                verification.add_metric(labels, 1.0 if b.verification_enabled else 0.0)
            if b.two_phase_commit_enabled is not None:
                two_pc.add_metric(labels, 1.0 if b.two_phase_commit_enabled else 0.0)
            max_timeout.add_metric(labels, b.transaction_max_timeout_ms / 1000)
    yield from (late, max_lag, hanging, verification, two_pc, max_timeout)
