"""The postmortem report over a window of the history, computed with Spark.

:func:`build_report` reads the datasets (partition-pruned by cluster and date), computes on
Spark the incident timeline, the applications and topics rankings and the exporter's health,
and returns one plain, JSON-ready dict; ``exporter.history.render`` turns it into text, JSON
or HTML. Only small results (incidents, rankings, the worst topics' lag series) reach Python.

Time spent in a state is measured between cycles: each sighting counts the time since the
previous cycle of its cluster, capped at :data:`GAP_CAP_INTERVALS` intervals, so a blind spot
(the exporter down, or cycles failing) does not count as time seen.
"""

from __future__ import annotations

import contextlib
import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any

from exporter.history.store import HistoryStore
from exporter.progress import stage

#: A gap between two cycles longer than this many intervals is a blind spot.
GAP_CAP_INTERVALS = 2.5
#: Classes that make a transaction an incident.
INCIDENT_CLASSES = ("late", "suspected_hanging", "hanging", "unknown", "two_phase_commit")
#: Classes counted as "hanging time" for the applications ranking (late is counted apart).
HANGING_CLASSES = ("hanging", "suspected_hanging")
WORST_TOPICS = 5
#: The cluster name of a command run with --bootstrap-server (no name known): its actions
#: match any cluster's incidents by their target.
UNNAMED_CLUSTER = "cli"
IDENTITY = ("cluster", "topic", "partition", "producer_id", "start_offset")


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_report(
    store: HistoryStore, *, from_ms: int, to_ms: int, cluster: str | None = None, now_ms: int | None = None
) -> dict[str, Any]:
    """Everything the report shows, for ``[from_ms, to_ms]`` (and one cluster, if given)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    def window(name: str) -> Any:
        dataset = store.read(name)
        time_col = "at_ms" if name == "actions" else "cycle_ms"
        cond = (
            (F.col("date") >= _date(from_ms))
            & (F.col("date") <= _date(to_ms))
            & F.col(time_col).between(from_ms, to_ms)
        )
        if cluster is not None:
            names = [cluster, UNNAMED_CLUSTER] if name == "actions" else [cluster]
            cond = cond & F.col("cluster").isin(*names)
        return dataset.where(cond)

    report: dict[str, Any] = {
        "cluster": cluster,
        "from_ms": from_ms,
        "to_ms": to_ms,
        "from": iso(from_ms),
        "to": iso(to_ms),
        "generated_at": iso(now_ms),
        "history": store.config.redacted_path,
        # Files Spark could not read are skipped (the store reads with skip_corrupt) and named.
        "unreadable_files": store.unreadable_files((_date(from_ms), _date(to_ms)), cluster)
        if store.skip_corrupt
        else [],
    }
    stage("reading the cycles")
    cycles = window("cycles").cache()
    try:
        stats = (
            cycles.groupBy("cluster")
            .agg(
                F.count("*").alias("n"),
                F.min("cycle_ms").alias("first"),
                F.max("cycle_ms").alias("last"),
                F.sum(F.when(F.col("outcome") == "complete", 1).otherwise(0)).alias("complete"),
                F.sum(F.when(F.col("outcome") == "partial", 1).otherwise(0)).alias("partial"),
            )
            .collect()
        )
        actions = [_action(r.asDict()) for r in window("actions").orderBy("at_ms").collect()]
        report["actions"] = actions
        if not stats:
            report.update(empty=True, incidents=[], applications=[], topics=[], health={"clusters": []})
            report["empty"] = not actions
            return report
        report["empty"] = False
        by_cycle = Window.partitionBy("cluster").orderBy("cycle_ms")
        gaps = cycles.select(
            "cluster", "cycle_ms", (F.col("cycle_ms") - F.lag("cycle_ms").over(by_cycle)).alias("gap_ms")
        )
        medians = {
            r["cluster"]: int(r["median"] or 0)
            for r in gaps.groupBy("cluster").agg(F.percentile_approx("gap_ms", 0.5).alias("median")).collect()
        }
        caps = F.create_map(
            *[x for c, m in medians.items() for x in (F.lit(c), F.lit(int(m * GAP_CAP_INTERVALS)))]
        )
        # Each cycle's weight: the time since the previous cycle of its cluster, capped; the
        # first cycle of the window weighs one interval.
        weights = gaps.select(
            "cluster",
            "cycle_ms",
            F.when(F.col("gap_ms").isNull(), caps[F.col("cluster")] / GAP_CAP_INTERVALS)
            .otherwise(F.least(F.col("gap_ms"), caps[F.col("cluster")]))
            .cast("long")
            .alias("weight_ms"),
            F.col("gap_ms"),
        ).cache()
        stage("exporter health")
        report["health"] = _health(stats, medians, weights, window("errors"))
        stage("incidents")
        incidents = _incidents(window("transactions"), window("closed"), weights, actions)
        report["incidents"] = incidents
        report["applications"] = _applications(incidents)
        stage("topics")
        report["topics"] = _topics(window("lso_lag"), weights)
        weights.unpersist()
        return report
    finally:
        cycles.unpersist()


def _date(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d")


def _action(row: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(row)
    out.pop("date", None)
    out["at"] = iso(out["at_ms"])
    with contextlib.suppress(TypeError, ValueError):
        out["evidence"] = json.loads(out["evidence"])
    return out


def _health(stats: Sequence[Any], medians: Mapping[str, int], weights: Any, errors: Any) -> dict[str, Any]:
    from pyspark.sql import functions as F

    clusters = []
    for s in sorted(stats, key=lambda r: r["cluster"]):
        name = s["cluster"]
        interval = medians.get(name, 0)
        spots = (
            []
            if not interval
            else [
                {
                    "from_ms": r["cycle_ms"] - r["gap_ms"],
                    "to_ms": r["cycle_ms"],
                    "from": iso(r["cycle_ms"] - r["gap_ms"]),
                    "to": iso(r["cycle_ms"]),
                    "duration_ms": r["gap_ms"],
                    "cycles_missing": max(0, round(r["gap_ms"] / interval) - 1),
                }
                for r in weights.where(
                    (F.col("cluster") == name) & (F.col("gap_ms") > interval * GAP_CAP_INTERVALS)
                )
                .orderBy("cycle_ms")
                .collect()
            ]
        )
        errs = [
            {"api": r["api"], "error": r["error"], "count": r["count"]}
            for r in errors.where(F.col("cluster") == name)
            .groupBy("api", "error")
            .count()
            .orderBy(F.desc("count"), "api", "error")
            .collect()
        ]
        clusters.append(
            {
                "cluster": name,
                "cycles_complete": s["complete"],
                "cycles_partial": s["partial"],
                "cycles_missing": sum(b["cycles_missing"] for b in spots),
                "interval_ms": interval,
                "first_cycle_ms": s["first"],
                "last_cycle_ms": s["last"],
                "first_cycle": iso(s["first"]),
                "last_cycle": iso(s["last"]),
                "blind_spots": spots,
                "errors": errs,
            }
        )
    return {"clusters": clusters}


def _incidents(
    txns: Any, closed: Any, weights: Any, actions: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    c = F.col
    per_txn = Window.partitionBy(*IDENTITY).orderBy("cycle_ms")
    rows = txns.join(
        weights.select("cluster", "cycle_ms", "weight_ms"), ["cluster", "cycle_ms"], "left"
    ).withColumn("prev_class", F.lag("txn_class").over(per_txn))
    agg = rows.groupBy(*IDENTITY).agg(
        F.min("cycle_ms").alias("first_seen_ms"),
        F.max("cycle_ms").alias("last_seen_ms"),
        F.max("duration_ms").alias("peak_duration_ms"),
        F.count("*").alias("sightings"),
        F.max("transactional_id").alias("transactional_id"),
        F.max("application").alias("application"),
        F.max("producer_epoch").alias("producer_epoch"),
        F.min(F.when(c("start_time_ms") >= 0, c("start_time_ms"))).alias("start_time_ms"),
        F.array_sort(
            F.collect_list(
                F.when(
                    c("prev_class").isNull() | (c("prev_class") != c("txn_class")),
                    F.struct(c("cycle_ms").alias("at_ms"), c("txn_class").alias("class")),
                )
            )
        ).alias("changes"),
        F.sum(F.when(c("txn_class") == "late", c("weight_ms")).otherwise(0)).alias("late_ms"),
        F.sum(F.when(c("txn_class").isin(*HANGING_CLASSES), c("weight_ms")).otherwise(0)).alias("hanging_ms"),
    )
    ends = closed.groupBy(*IDENTITY).agg(
        F.min_by(F.struct("cycle_ms", "end", "coordinator_state"), c("cycle_ms")).alias("e")
    )
    joined = agg.join(ends, list(IDENTITY), "left").orderBy("first_seen_ms", *IDENTITY)
    last_cycle = {
        r["cluster"]: r["last"]
        for r in weights.groupBy("cluster").agg(F.max("cycle_ms").alias("last")).collect()
    }
    out = []
    for r in joined.collect():
        d = r.asDict(recursive=True)
        e = d.pop("e")
        changes = [
            {"at_ms": ch["at_ms"], "at": iso(ch["at_ms"]), "class": ch["class"]} for ch in d.pop("changes")
        ]
        mine = [a for a in actions if _targets(a, d)]
        end, end_ms, state = _ending(d, e, mine, last_cycle.get(d["cluster"]))
        out.append(
            {
                **d,
                "first_seen": iso(d["first_seen_ms"]),
                "last_seen": iso(d["last_seen_ms"]),
                "start_time": iso(d["start_time_ms"]),
                "classes": sorted({ch["class"] for ch in changes}),
                "class_changes": changes,
                "end": end,
                "end_ms": end_ms,
                "end_at": iso(end_ms),
                "end_coordinator_state": state,
                "actions": [
                    {k: a[k] for k in ("action", "at", "at_ms", "dry_run", "result", "os_user", "principal")}
                    for a in mine
                ],
            }
        )
    return out


def _targets(action: Mapping[str, Any], incident: Mapping[str, Any]) -> bool:
    if action["cluster"] not in (incident["cluster"], UNNAMED_CLUSTER):
        return False
    if action["action"] == "abort":
        return bool(
            action["topic"] == incident["topic"]
            and action["partition"] == incident["partition"]
            and action["producer_id"] == incident["producer_id"]
            and action["start_offset"] == incident["start_offset"]
        )
    return bool(
        incident["transactional_id"] is not None
        and action["transactional_id"] == incident["transactional_id"]
        and action["producer_id"] == incident["producer_id"]
    )


def _ending(
    incident: Mapping[str, Any],
    closed: Mapping[str, Any] | None,
    actions: Sequence[Mapping[str, Any]],
    last_cycle_ms: int | None,
) -> tuple[str, int | None, str | None]:
    """How it ended: the closing cycle's verdict, refined by the CLI actions on it."""
    done = [
        a
        for a in actions
        if not a["dry_run"] and a["result"] in ("aborted", "terminated", "marker_written_but_still_open")
    ]
    if closed is not None:
        end = closed["end"]
        if done and done[-1]["at_ms"] <= closed["cycle_ms"]:
            end = "aborted_by_" + done[-1]["action"].replace("-", "_")
        return end, closed["cycle_ms"], closed["coordinator_state"]
    if last_cycle_ms is not None and incident["last_seen_ms"] >= last_cycle_ms:
        return "open", None, None
    return "unknown", None, None


def _applications(incidents: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Applications ranked by late + hanging time (the incidents are few: plain Python)."""
    apps: dict[tuple[str, str | None, int], dict[str, Any]] = {}
    for i in incidents:
        key = (i["cluster"], i["transactional_id"], i["producer_id"])
        a = apps.setdefault(
            key,
            {
                "cluster": key[0],
                "transactional_id": key[1],
                "producer_id": key[2],
                "application": i["application"],
                "incidents": 0,
                "late_ms": 0,
                "hanging_ms": 0,
                "peak_duration_ms": 0,
                "topics": set(),
            },
        )
        a["incidents"] += 1
        a["late_ms"] += i["late_ms"] or 0
        a["hanging_ms"] += i["hanging_ms"] or 0
        a["peak_duration_ms"] = max(a["peak_duration_ms"], i["peak_duration_ms"] or 0)
        a["topics"].add(i["topic"])
    ranked = sorted(
        apps.values(),
        key=lambda a: (-(a["late_ms"] + a["hanging_ms"]), -a["peak_duration_ms"], a["producer_id"]),
    )
    return [
        {**a, "topics": sorted(a["topics"]), "late_hanging_ms": a["late_ms"] + a["hanging_ms"]}
        for a in ranked
    ]


def _topics(lag: Any, weights: Any) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    per_cycle = (
        lag.groupBy("cluster", "topic", "cycle_ms")
        .agg(F.max("lso_lag").alias("max_lag"), F.count("*").alias("lagging_partitions"))
        .join(weights.select("cluster", "cycle_ms", "weight_ms"), ["cluster", "cycle_ms"], "left")
        .cache()
    )
    try:
        blocked = per_cycle.groupBy("cluster", "topic").agg(
            F.sum(F.coalesce("weight_ms", F.lit(0))).alias("blocked_ms"),
            F.max("lagging_partitions").alias("peak_lagging_partitions"),
        )
        stats = lag.groupBy("cluster", "topic").agg(
            F.max("lso_lag").alias("peak_lso_lag"),
            F.percentile_approx("lso_lag", [0.5, 0.9, 0.99]).alias("pct"),
            F.countDistinct("partition").alias("partitions_lagging"),
        )
        ranked = (
            blocked.join(stats, ["cluster", "topic"])
            .orderBy(F.desc("blocked_ms"), F.desc("peak_lso_lag"), "topic")
            .collect()
        )
        worst = [(r["cluster"], r["topic"]) for r in ranked[:WORST_TOPICS]]
        series: dict[tuple[str, str], list[list[int]]] = {k: [] for k in worst}
        if worst:
            cond = F.lit(False)
            for cl, t in worst:
                cond = cond | ((F.col("cluster") == cl) & (F.col("topic") == t))
            for r in per_cycle.where(cond).orderBy("cycle_ms").collect():
                series[(r["cluster"], r["topic"])].append([r["cycle_ms"], r["max_lag"]])
        return [
            {
                "cluster": r["cluster"],
                "topic": r["topic"],
                "blocked_ms": r["blocked_ms"],
                "peak_lso_lag": r["peak_lso_lag"],
                "lso_lag_p50": r["pct"][0],
                "lso_lag_p90": r["pct"][1],
                "lso_lag_p99": r["pct"][2],
                "partitions_lagging": r["partitions_lagging"],
                "peak_lagging_partitions": r["peak_lagging_partitions"],
                "lag_series": series.get((r["cluster"], r["topic"])),
            }
            for r in ranked
        ]
    finally:
        per_cycle.unpersist()
