"""History benchmark: write cost per cycle, bytes on disk per day, and ``report`` over a
synthetic 7-day history, each printed beside its target. No assertion: figures only.

1. **Write cost per cycle** at 10k partitions: the time the cycle itself spends in the
   writer (the listener call: target <= 50 ms, or fully off the cycle's path) and, apart, the
   writer thread's time per cycle (rows + Spark appends), which runs off the cycle's path.
2. **Bytes on disk per day** at 10k partitions, 30 s interval: one hour of cycles written as
   the compaction leaves it (one file per dataset and hour), times 24.
3. **``report`` over 7 days** of that cluster (20,160 cycles), generated on Spark, on
   ``local[2]``: target <= 20 s.

Run: ``PYTHONPATH=. python bench/history_bench.py [--partitions 10000] [--lagging 0.02]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from exporter.config import SparkConfig
from exporter.config.history import HistoryConfig
from exporter.history.report import build_report
from exporter.history.rows import CycleRows
from exporter.history.schema import BY_NAME, PARTITION_COLUMNS, Row
from exporter.history.store import HistoryStore
from exporter.history.writer import HistoryWriter
from exporter.model import (
    ClusterSnapshot,
    CycleResult,
    Finding,
    PartitionMetrics,
    PartitionOffsets,
    ProducerState,
    StartTimeSource,
    TxnClass,
)
from exporter.pipeline.session import spark_session, stop

DAY_MS = 86_400_000
T0 = 1_795_000_000_000


def cycle(
    at_ms: int, partitions: int, lagging: int, stored: int, ongoing: int
) -> tuple[ClusterSnapshot, CycleResult]:
    """One cycle of a cluster with ``partitions`` partitions (20 topics), ``lagging`` of them
    with LSO lag, ``stored`` late/hanging transactions and ``ongoing`` ordinary ones."""
    names = [(f"topic-{p % 20:02d}", p // 20) for p in range(partitions)]
    open_ = names[: stored + ongoing]
    producers = tuple(
        ProducerState(t, p, 1, 1000 + i, 0, 0, at_ms - 60_000, 0, 10) for i, (t, p) in enumerate(open_)
    )
    findings = tuple(
        Finding(
            topic=t,
            partition=p,
            broker_id=1,
            producer_id=1000 + i,
            producer_epoch=0,
            coordinator_epoch=0,
            start_offset=10,
            last_timestamp_ms=at_ms - 60_000,
            start_time_ms=at_ms - 3_600_000,
            start_time_source=StartTimeSource.COORDINATOR,
            duration_ms=3_600_000,
            txn_class=TxnClass.LATE if i < stored else TxnClass.ONGOING,
            late=i < stored,
            transactional_id=f"app-{i}",
            coordinator_id=1,
            coordinator_state="Ongoing",
            transaction_timeout_ms=60_000,
        )
        for i, (t, p) in enumerate(open_)
    )
    snapshot = ClusterSnapshot(
        cluster="bench",
        taken_at_ms=at_ms - 1000,
        partitions=tuple(
            PartitionOffsets(t, p, 1, 1000, 1000 - (7 if i < lagging else 0))
            for i, (t, p) in enumerate(names)
        ),
        producers=producers,
    )
    result = CycleResult(
        cluster="bench",
        computed_at_ms=at_ms,
        partitions=tuple(
            PartitionMetrics(t, p, 1, 7 if i < lagging else 0, 3_600_000 if i < stored + ongoing else None)
            for i, (t, p) in enumerate(names)
        ),
        findings=findings,
        open_transactions_by_class=((TxnClass.LATE, stored), (TxnClass.ONGOING, ongoing)),
    )
    return snapshot, result


def bench_write(spark: Any, root: Path, args: argparse.Namespace) -> None:
    lagging = int(args.partitions * args.lagging)
    cycles = [
        cycle(T0 + i * 30_000, args.partitions, lagging, args.stored, args.ongoing)
        for i in range(args.cycles)
    ]
    writer = HistoryWriter(HistoryConfig(path=str(root / "write")), lambda: spark, start=False)
    writer(*cycles[0])
    writer.flush_once()  # warm: the first append pays for code generation
    listener_ms: list[float] = []
    thread_ms: list[float] = []
    for snapshot, result in cycles[1:]:
        started = time.perf_counter()
        writer(snapshot, result)
        listener_ms.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        writer.flush_once()
        thread_ms.append((time.perf_counter() - started) * 1000)
    print(
        f"write cost per cycle at {args.partitions} partitions ({lagging} lagging, "
        f"{args.stored} late, {args.ongoing} ongoing), {len(listener_ms)} cycles:"
    )
    print(
        f"  added to the cycle (listener call): median {statistics.median(listener_ms):.3f} ms, "
        f"max {max(listener_ms):.3f} ms   target <= 50 ms (or fully off the cycle's path)"
    )
    print(
        f"  writer thread, off the cycle's path: median {statistics.median(thread_ms):.0f} ms, "
        f"max {max(thread_ms):.0f} ms per cycle (rows + {len(BY_NAME) - 1} Spark appends)"
    )


def bench_bytes(spark: Any, root: Path, args: argparse.Namespace) -> None:
    lagging = int(args.partitions * args.lagging)
    rows = CycleRows()
    per_dataset: dict[str, list[Row]] = {}
    hour_cycles = 3_600_000 // 30_000
    for i in range(hour_cycles):
        snapshot, result = cycle(T0 + i * 30_000, args.partitions, lagging, args.stored, args.ongoing)
        for name, r in rows.rows(snapshot, result).items():
            per_dataset.setdefault(name, []).extend(r)
    store = HistoryStore(spark, HistoryConfig(path=str(root / "bytes")))
    for name, r in per_dataset.items():
        store.append(name, r)  # one append per dataset = what compaction leaves per hour
    total = sum(f.stat().st_size for f in (root / "bytes").rglob("*.parquet"))
    print(
        f"bytes on disk per day at {args.partitions} partitions / 30 s interval "
        f"({lagging} partitions lagging and {args.stored} late transactions all day): "
        f"{total * 24 / 1e6:.1f} MB/day ({total / 1e3:.0f} kB per compacted hour x 24); "
        f"30 days: {total * 24 * 30 / 1e9:.2f} GB   target: reported (chart default 2Gi)"
    )


def synthetic_week(spark: Any, base: str, args: argparse.Namespace) -> None:
    """Seven days of a 10k-partition cluster at 30 s, written on Spark: every cycle, the
    lagging partitions, and ``incidents`` transactions each open for a few hours."""
    from pyspark.sql import functions as F

    cycles_n = 7 * 2880
    lagging = int(args.partitions * args.lagging)
    cyc = spark.range(cycles_n).select((F.lit(T0) + F.col("id") * 30_000).alias("cycle_ms"))

    def date(col: str) -> Any:
        return F.date_format((F.col(col) / 1000).cast("timestamp"), "yyyy-MM-dd")

    def write(name: str, frame: Any) -> None:
        names = BY_NAME[name].names
        (
            frame.withColumn("cluster", F.lit("bench"))
            .withColumn("date", date(BY_NAME[name].time_column))
            .select(*names)
            .repartition(*PARTITION_COLUMNS)
            .write.mode("overwrite")
            .partitionBy(*PARTITION_COLUMNS)
            .parquet(f"{base}/{name}")
        )

    write(
        "cycles",
        cyc.select(
            "cycle_ms",
            (F.col("cycle_ms") - 1000).alias("snapshot_ms"),
            F.when(F.col("cycle_ms") % 97 == 0, "partial").otherwise("complete").alias("outcome"),
            F.lit(0).alias("errors"),
            F.lit(args.partitions).alias("partitions"),
            F.lit(lagging).alias("lagging_partitions"),
            F.lit(7).cast("long").alias("max_lso_lag"),
            *[
                F.lit(n).alias(c)
                for c, n in (
                    ("open_ongoing", args.ongoing),
                    ("open_late", 1),
                    ("open_suspected_hanging", 0),
                    ("open_hanging", 1),
                    ("open_two_phase_commit", 0),
                    ("open_unknown", 0),
                )
            ],
        ),
    )
    write(
        "lso_lag",
        cyc.crossJoin(spark.range(lagging).withColumnRenamed("id", "p")).select(
            "cycle_ms",
            F.concat(F.lit("topic-"), F.lpad((F.col("p") % 20).cast("string"), 2, "0")).alias("topic"),
            (F.col("p") / 20).cast("int").alias("partition"),
            F.lit(1).alias("leader"),
            ((F.col("cycle_ms") / 30_000 + F.col("p")) % 50 + 1).cast("long").alias("lso_lag"),
            F.lit(3_600_000).cast("long").alias("max_active_transaction_duration_ms"),
        ),
    )
    span = 360  # cycles an incident lasts (3 hours)
    txn = (
        spark.range(args.incidents)
        .withColumnRenamed("id", "i")
        .crossJoin(spark.range(span).withColumnRenamed("id", "k"))
        .select(
            "i",
            (
                F.lit(T0)
                + ((F.col("i") * (cycles_n - span) / args.incidents).cast("long") + F.col("k")) * 30_000
            ).alias("cycle_ms"),
            "k",
        )
    )
    write(
        "transactions",
        txn.select(
            "cycle_ms",
            F.concat(F.lit("topic-"), F.lpad((F.col("i") % 20).cast("string"), 2, "0")).alias("topic"),
            (F.col("i") / 20).cast("int").alias("partition"),
            F.lit(1).alias("broker_id"),
            (F.lit(5000) + F.col("i")).alias("producer_id"),
            F.lit(0).alias("producer_epoch"),
            F.lit(0).alias("coordinator_epoch"),
            F.lit(10).cast("long").alias("start_offset"),
            F.when(F.col("i") % 2 == 0, F.concat(F.lit("app-"), F.col("i").cast("string"))).alias(
                "transactional_id"
            ),
            F.lit(None).cast("string").alias("application"),
            F.when(F.col("i") % 2 == 0, "late")
            .when(F.col("k") < 1, "suspected_hanging")
            .otherwise("hanging")
            .alias("txn_class"),
            (F.col("i") % 2 == 0).alias("late"),
            F.lit(None).cast("string").alias("reason"),
            (F.col("cycle_ms") - F.col("k") * 30_000 - 1_500_000).alias("start_time_ms"),
            F.lit("coordinator").alias("start_time_source"),
            (F.col("k") * 30_000 + 1_500_000).alias("duration_ms"),
            F.lit(1).alias("coordinator_id"),
            F.lit("Ongoing").alias("coordinator_state"),
            F.lit(60_000).cast("long").alias("transaction_timeout_ms"),
            (F.col("cycle_ms") - 60_000).alias("last_timestamp_ms"),
        ),
    )
    write(
        "closed",
        txn.where(F.col("k") == span - 1).select(
            (F.col("cycle_ms") + 30_000).alias("cycle_ms"),
            F.concat(F.lit("topic-"), F.lpad((F.col("i") % 20).cast("string"), 2, "0")).alias("topic"),
            (F.col("i") / 20).cast("int").alias("partition"),
            (F.lit(5000) + F.col("i")).alias("producer_id"),
            F.lit(0).alias("producer_epoch"),
            F.lit(10).cast("long").alias("start_offset"),
            F.when(F.col("i") % 2 == 0, F.concat(F.lit("app-"), F.col("i").cast("string"))).alias(
                "transactional_id"
            ),
            F.when(F.col("i") % 2 == 0, "late").otherwise("hanging").alias("last_class"),
            F.col("cycle_ms").alias("last_seen_ms"),
            F.when(F.col("i") % 2 == 0, "committed").otherwise("no_coordinator").alias("end"),
            F.lit(None).cast("string").alias("coordinator_state"),
        ),
    )


def bench_report(spark: Any, root: Path, args: argparse.Namespace) -> None:
    base = str(root / "week")
    started = time.perf_counter()
    synthetic_week(spark, base, args)
    made_s = time.perf_counter() - started
    size = sum(f.stat().st_size for f in Path(base).rglob("*.parquet"))
    print(f"synthetic 7-day history: {size / 1e6:.0f} MB on disk, generated in {made_s:.0f} s")
    store = HistoryStore(spark, HistoryConfig(path=base))
    times = []
    for _ in range(args.report_runs):
        started = time.perf_counter()
        report = build_report(store, from_ms=T0, to_ms=T0 + 7 * DAY_MS, cluster="bench")
        times.append(time.perf_counter() - started)
    print(
        f"report over 7 days ({len(report['incidents'])} incidents, "
        f"{len(report['topics'])} topics) on local[2]: "
        f"{', '.join(f'{t:.1f} s' for t in times)}   target <= 20 s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument(
        "--lagging", type=float, default=0.02, help="fraction of partitions with LSO lag > 0 (default 0.02)"
    )
    parser.add_argument("--stored", type=int, default=20, help="late transactions per cycle")
    parser.add_argument("--ongoing", type=int, default=200, help="ongoing transactions")
    parser.add_argument("--cycles", type=int, default=11, help="cycles timed for the write cost")
    parser.add_argument("--incidents", type=int, default=200, help="incidents in the 7 days")
    parser.add_argument("--report-runs", type=int, default=2)
    parser.add_argument("--skip", default="", help="comma-separated: write,bytes,report")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    spark = spark_session(SparkConfig(master="local[2]", app_name="history-bench", driver_memory="1g"))
    try:
        with tempfile.TemporaryDirectory(prefix="kte-history-bench-") as tmp:
            root = Path(tmp)
            if "write" not in skip:
                bench_write(spark, root, args)
            if "bytes" not in skip:
                bench_bytes(spark, root, args)
            if "report" not in skip:
                bench_report(spark, root, args)
    finally:
        stop(spark)


if __name__ == "__main__":
    main()
