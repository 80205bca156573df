"""The audit log of what changes a cluster: ``abort``, ``force-terminate`` (also as steps of
``recover``, with its selection) and the daemon's auto-remediation (``initiator``
``remediation``, written through :meth:`exporter.history.writer.HistoryWriter.record_action`).

Every run that got as far as a plan (dry runs too) is recorded: who (OS user, Kafka
principal from ``sasl.username``, host), when, the target, the evidence the command saw,
what it wrote, and the LSO before and after. Always as one JSON line on stderr (beginning
``{"audit":``); and, when a history is configured (the ``history:`` section of
``--config.file``, else ``$KAFKA_TXN_EXPORTER_HISTORY``), as a row of the ``actions``
dataset.

Recording never changes the command's outcome: a failure to append the row is reported on
stderr and in the log line's ``history`` field.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exporter.operator.connection import Target

import yaml

from exporter.history.config import HistoryConfig, parse_history_section
from exporter.history.rows import Row, utc_date
from exporter.history.schema import ACTIONS, CLUSTER_COLUMN, DATE_COLUMN

#: Plan keys kept as the evidence the command saw.
_EVIDENCE_KEYS = (
    "reason",
    "reason_text",
    "start_time_ms",
    "start_time",
    "start_time_source",
    "age_ms",
    "leader",
    "coordinator_epoch",
    "high_watermark_before",
    "before",
    "after",
    "high_watermark_after",
    "initiator",
    "selection",
    "blocked_groups",
)


#: For commands run with --bootstrap-server: the history to append the audit rows to.
HISTORY_ENV = "KAFKA_TXN_EXPORTER_HISTORY"


def history_of(config_file: str | None, env: Mapping[str, str] | None = None) -> HistoryConfig | None:
    """The history the audit row goes to: the ``history:`` section of ``--config.file``,
    else the path in ``$KAFKA_TXN_EXPORTER_HISTORY``; None when neither (only logged)."""
    raw: object = None
    if config_file:
        try:
            document = yaml.safe_load(Path(config_file).read_text())
        except (OSError, yaml.YAMLError):
            document = None  # the command itself reported it already
        raw = document.get("history") if isinstance(document, dict) else None
    if raw is None:
        path = (os.environ if env is None else env).get(HISTORY_ENV, "").strip()
        raw = {"path": path} if path else None
    history, problems = parse_history_section(raw)
    if problems:
        print(
            "kafka-txn-exporter: audit: the history is misconfigured, the action is only "
            f"logged: {'; '.join(problems)}",
            file=sys.stderr,
        )
    return history


def audit_entry(
    action: str,
    plan: Mapping[str, Any],
    *,
    cluster: str,
    properties: Mapping[str, str],
    now_ms: int | None = None,
) -> dict[str, Any]:
    """The audit record of one run, from the command's plan (the JSON it printed)."""
    at = int(time.time() * 1000) if now_ms is None else now_ms
    raw_before = plan.get("before")
    before: Mapping[str, Any] = raw_before if isinstance(raw_before, dict) else {}
    result = str(plan.get("result", "unknown"))
    dry = result == "dry_run"
    if action == "abort":
        written = (
            "nothing (dry run)"
            if dry
            else f"WriteTxnMarkers ABORT to broker {plan.get('leader')} for producer id "
            f"{plan.get('producer_id')}, epoch {plan.get('producer_epoch')}, coordinator "
            f"epoch {plan.get('coordinator_epoch')} on {plan.get('topic')}-"
            f"{plan.get('partition')}"
        )
        target = {
            "topic": plan.get("topic"),
            "partition": plan.get("partition"),
            "producer_id": plan.get("producer_id"),
            "producer_epoch": plan.get("producer_epoch"),
            "start_offset": plan.get("start_offset"),
            "transactional_id": plan.get("transactional_id"),
        }
    else:
        written = (
            "nothing (dry run)"
            if dry
            else f"InitProducerId(keepPreparedTxn=false) for transactional id "
            f"{before.get('transactional_id')!r} at coordinator broker "
            f"{before.get('coordinator_id')}: new producer epoch "
            f"{plan.get('new_producer_epoch')}"
        )
        target = {
            "topic": None,
            "partition": None,
            "producer_id": before.get("producer_id"),
            "producer_epoch": before.get("producer_epoch"),
            "start_offset": None,
            "transactional_id": before.get("transactional_id"),
        }
    evidence = {k: plan[k] for k in _EVIDENCE_KEYS if k in plan}
    return {
        "audit": action,
        "cluster": cluster,
        "at_ms": at,
        "dry_run": dry,
        "result": result,
        "os_user": _os_user(),
        "principal": properties.get("sasl.username") or None,
        "host": socket.gethostname(),
        **target,
        "evidence": evidence,
        "written": written,
        "lso_before": _int_or_none(plan.get("lso_before")),
        "lso_after": None if dry else _int_or_none(plan.get("lso_after")),
    }


def record_action(action: str, target: Target, plan: Mapping[str, Any]) -> dict[str, Any]:
    """Record one run of ``abort`` / ``force-terminate`` from the command's target and plan
    (the JSON it prints). Never raises: auditing never turns a done action into a failure."""
    try:
        cluster = target.cluster
        entry = audit_entry(action, plan, cluster=cluster.name, properties=cluster.kafka)
    except Exception as e:
        print(f"kafka-txn-exporter: audit: could not build the record: {e}", file=sys.stderr)
        return {}
    history = history_of(target.config_file)
    if history is not None:
        try:
            append_action(history, entry)
            entry["history"] = "written"
        except Exception as e:
            entry["history"] = f"not written: {type(e).__name__}"
            print(
                f"kafka-txn-exporter: audit: could not append to the history at "
                f"{history.redacted_path}: {type(e).__name__}: {e}",
                file=sys.stderr,
            )
    _log_line(entry)
    return entry


def _log_line(entry: Mapping[str, Any]) -> None:
    """One JSON line on stderr (the operator commands' channel for notes; stdout carries the
    command's own output, which scripts parse)."""
    print(json.dumps(entry, default=str), file=sys.stderr, flush=True)  # "audit" first


def action_row(entry: Mapping[str, Any]) -> Row:
    return (
        entry["cluster"],
        utc_date(entry["at_ms"]),
        entry["at_ms"],
        entry["audit"],
        entry["dry_run"],
        entry["result"],
        entry["os_user"],
        entry["principal"],
        entry["host"],
        entry["topic"],
        entry["partition"],
        entry["producer_id"],
        entry["producer_epoch"],
        entry["start_offset"],
        entry["transactional_id"],
        json.dumps(entry["evidence"], sort_keys=True, default=str),
        entry["written"],
        entry["lso_before"],
        entry["lso_after"],
    )


def append_action(history: HistoryConfig, entry: Mapping[str, Any]) -> None:
    """One row in ``actions``: a Parquet file written with Arrow for a local history (no
    JVM start for one row), through a local Spark session for any other URL."""
    row = action_row(entry)
    if history.is_local:
        import pyarrow.parquet as pq

        from exporter.history.store import arrow_rows

        table = arrow_rows(ACTIONS, [row]).drop_columns(["cluster", "date"])
        directory = (
            Path(history.local_path)
            / ACTIONS.name
            / f"cluster={row[CLUSTER_COLUMN]}"
            / f"date={row[DATE_COLUMN]}"
        )
        directory.mkdir(parents=True, exist_ok=True)
        name = f"part-audit-{uuid.uuid4().hex}.parquet"
        tmp = directory / f".{name}.tmp"  # hidden from readers until renamed
        pq.write_table(table, tmp)
        os.replace(tmp, directory / name)
        return
    from exporter.config import SparkConfig
    from exporter.history.store import HistoryStore
    from exporter.pipeline.session import spark_session, stop

    spark = spark_session(SparkConfig(master="local[1]", app_name="kafka-txn-exporter-audit"))
    try:
        HistoryStore(spark, history).append(ACTIONS.name, [row])
    finally:
        stop(spark)


def _os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name known (a container with an unnamed uid)
        return f"uid:{os.getuid()}"


def _int_or_none(value: object) -> int | None:
    """An offset, or the lowest known one of a ``{partition: offset}`` map (force-terminate
    reads every partition of the transaction); None when unknown."""
    if isinstance(value, dict):
        known = [v for v in (_int_or_none(x) for x in value.values()) if v is not None]
        return min(known) if known else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
