"""Per coordinator: the age of its oldest open transaction (and of its oldest two-phase-commit
one), how long markers have been pending, and its transactional ids by state."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from exporter.metrics import catalogue as c
from exporter.metrics.scrape import Scrape
from exporter.model import COORDINATOR_STATES


def render(scrape: Scrape) -> Iterator[Metric]:
    open_time = scrape.metric(c.ACTIVE_TRANSACTION_OPEN_TIME_MAX)
    two_pc = scrape.metric(c.TWO_PHASE_COMMIT_OPEN_TIME_MAX)
    prepare_time = scrape.metric(c.COORDINATOR_PREPARE_TIME_MAX)
    by_state = scrape.metric(c.COORDINATOR_TRANSACTIONS)
    for s, r in scrape.results():
        for coordinator in r.coordinators:
            labels = [s.cluster, str(coordinator.coordinator_id)]
            open_time.add_metric(labels, coordinator.active_transaction_open_time_max_ms / 1000)
            two_pc.add_metric(labels, coordinator.two_phase_commit_open_time_max_ms / 1000)
            prepare_time.add_metric(labels, coordinator.prepare_time_max_ms / 1000)
            counts = dict(coordinator.transactions_by_state)
            for state in COORDINATOR_STATES:
                by_state.add_metric([*labels, state], counts.get(state, 0))
    yield from (open_time, two_pc, prepare_time, by_state)
