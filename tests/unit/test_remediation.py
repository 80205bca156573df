"""Auto-remediation's decisions on fixtures (no broker): the config section, which confirmed
hanging transactions are handed to the worker and when (after, topics, the hourly budget,
once per transaction, across a restart)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter

from exporter.config import ClusterConfig, ConfigError, parse_config
from exporter.model import (
    ClusterSnapshot,
    CycleResult,
    Finding,
    HangingReason,
    StartTimeSource,
    TxnClass,
)
from exporter.remediation.config import RemediationConfig, parse_remediation
from exporter.remediation.engine import Remediation

MINUTE = 60_000


def cluster(**remediation: object) -> ClusterConfig:
    raw = {"topics": ["orders-.*"], **remediation}
    config = parse_config(
        {"clusters": [{"name": "c", "bootstrap_servers": "h:1", "remediation": raw}]}, env={}
    )
    return config.clusters[0]


def hanging(
    topic: str = "orders-1", partition: int = 0, start: int = 10, cls: TxnClass = TxnClass.HANGING
) -> Finding:
    return Finding(
        topic=topic,
        partition=partition,
        broker_id=1,
        producer_id=4000 + partition,
        producer_epoch=0,
        coordinator_epoch=0,
        start_offset=start,
        last_timestamp_ms=0,
        start_time_ms=0,
        start_time_source=StartTimeSource.BATCH_TIMESTAMP,
        duration_ms=0,
        txn_class=cls,
        late=False,
        hanging_reason=HangingReason.COORDINATOR_NOT_OPEN if cls is TxnClass.HANGING else None,
    )


def cycle(at_ms: int, *findings: Finding) -> tuple[ClusterSnapshot, CycleResult]:
    return ClusterSnapshot("c", at_ms), CycleResult("c", at_ms, findings=findings)


def remediation(c: ClusterConfig, state_dir: Path | None = None) -> Remediation:
    counter = Counter("r", "r", ["kafka_cluster", "action", "result"], registry=CollectorRegistry())
    return Remediation([c], counter=counter, state_dir=str(state_dir) if state_dir else None, start=False)


def test_the_section_is_off_by_default_a_dry_run_when_on_and_every_error_is_named() -> None:
    assert parse_remediation(None, "r") == (RemediationConfig(), [])
    on = cluster().remediation
    assert (on.enabled, on.dry_run, on.after_ms, on.max_actions_per_hour) == (True, True, 30 * MINUTE, 1)
    with pytest.raises(ConfigError) as e:
        parse_config(
            {
                "clusters": [
                    {
                        "name": "c",
                        "bootstrap_servers": "h:1",
                        "remediation": {"after": "soon", "topics": ["("], "max_actions_per_hour": 0, "x": 1},
                    }
                ]
            },
            env={},
        )
    text = str(e.value)
    for key in (
        "remediation.after",
        "remediation.topics[0]",
        "remediation.max_actions_per_hour",
        "remediation.x",
    ):
        assert f"clusters[0].{key}:" in text
    _, problems = parse_remediation({"enabled": True}, "r")
    assert problems == [
        "r.topics: name the topics remediation may act on (full-match regexes); with none it would never act"
    ]


def test_only_transactions_hanging_for_after_on_allowed_topics_are_handed_over() -> None:
    r = remediation(cluster(after="10m", max_actions_per_hour=5))
    found = [hanging(), hanging("audit", 1), hanging(partition=2, cls=TxnClass.SUSPECTED_HANGING)]
    r(*cycle(0, *found))
    r(*cycle(9 * MINUTE, *found))
    assert r.queued == 0
    r(*cycle(10 * MINUTE, *found))
    assert r.queued == 1  # orders-1-0 only: audit is not allowed, suspected is not hanging
    # Handed over once: the next cycle does not queue it again.
    r(*cycle(11 * MINUTE, *found))
    assert r.queued == 1


def test_a_transaction_that_stops_hanging_starts_its_wait_again() -> None:
    r = remediation(cluster(after="10m"))
    r(*cycle(0, hanging()))
    r(*cycle(5 * MINUTE))
    r(*cycle(6 * MINUTE, hanging()))
    r(*cycle(15 * MINUTE, hanging()))
    assert r.queued == 0
    assert r.state("c").hanging_since == {"orders-1|0|4000|10": 6 * MINUTE}


def test_the_hourly_budget_and_what_was_done_survive_a_restart(tmp_path: Path) -> None:
    c = cluster(after="0s", max_actions_per_hour=2)
    r = remediation(c, tmp_path)
    three = [hanging(partition=p) for p in range(3)]
    r(*cycle(0, *three))
    assert r.queued == 2
    assert r.process_pending() == 2  # judged on the cycle's evidence (none here): refused
    assert [e["result"] for e in r.audit] == ["refused", "refused"]
    r.close()
    again = remediation(c, tmp_path)
    assert again.state("c").recent == [0, 0]
    again(*cycle(30 * MINUTE, *three))
    assert again.queued == 0  # the budget of the hour is spent
    again(*cycle(61 * MINUTE, *three))
    assert again.queued == 1  # a new hour: the third, and only the third, is due
    assert (tmp_path / "remediation-c.json").exists()
