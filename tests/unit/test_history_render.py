"""The report's renderings on a hand-made report (no Spark): the text and the HTML show the
same incident, application and topic rows, built by one function each."""

from __future__ import annotations

import html
from typing import Any

from exporter.history.render import application_table, incident_table, to_html, to_text, topic_table

T0 = 1_795_000_000_000


def incident(topic: str, partition: int, *, actions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "first_seen": "2026-11-18T08:26:40Z",
        "first_seen_ms": T0,
        "last_seen": "2026-11-18T08:28:10Z",
        "last_seen_ms": T0 + 90_000,
        "topic": topic,
        "partition": partition,
        "producer_id": 4001,
        "start_offset": 17,
        "transactional_id": None,
        "class_changes": [
            {"at_ms": T0, "class": "suspected_hanging"},
            {"at_ms": T0 + 60_000, "class": "hanging"},
        ],
        "peak_duration_ms": 3_690_000,
        "end": "aborted_by_abort",
        "end_ms": T0 + 120_000,
        "actions": actions,
    }


REPORT: dict[str, Any] = {
    "from": "2026-11-17T08:26:40Z",
    "to": "2026-11-19T08:26:40Z",
    "cluster": "prod",
    "history": "/var/lib/kte/history",
    "generated_at": "2026-11-19T08:26:40Z",
    "incidents": [
        incident("orders", 1, actions=[{"action": "abort", "dry_run": False, "os_user": "ops"}]),
        incident("pay<ments>", 0, actions=[]),
    ],
    "applications": [
        {
            "transactional_id": "payments-app",
            "producer_id": 5001,
            "incidents": 1,
            "late_ms": 90_000,
            "hanging_ms": 0,
            "peak_duration_ms": 960_000,
            "topics": ["orders", "payments"],
        }
    ],
    "topics": [
        {
            "topic": "orders",
            "blocked_ms": 120_000,
            "peak_lso_lag": 50,
            "lso_lag_p50": 50,
            "lso_lag_p90": 50,
            "lso_lag_p99": 50,
            "partitions_lagging": 1,
        }
    ],
    "health": {"clusters": []},
    "actions": [],
}


def test_incident_rows_say_where_who_how_it_changed_and_what_was_done() -> None:
    headers, rows = incident_table(REPORT)
    first = dict(zip(headers, rows[0], strict=True))
    assert first["topic-partition"] == "orders-1"
    assert first["classes"] == "suspected_hanging > hanging"
    assert first["peak duration"] == "1h01m"
    assert first["actions"] == "abort by ops"
    assert dict(zip(headers, rows[1], strict=True))["actions"] is None


def test_text_and_html_show_the_same_rows() -> None:
    text, page = to_text(REPORT), to_html(REPORT)
    for table in (incident_table, application_table, topic_table):
        headers, rows = table(REPORT)
        for header in headers:
            assert header in text and f"<th>{html.escape(header)}</th>" in page, header
        for row in rows:
            cells = ["-" if v is None else str(v) for v in row]
            assert any(line.split() == " ".join(cells).split() for line in text.splitlines()), row
            assert "".join(f"<td>{html.escape(c)}</td>" for c in cells) in page, row
