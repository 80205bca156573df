"""Benchmark of one pipeline cycle on synthetic snapshots.

Builds snapshots of several sizes with a realistic mix (most partitions without an active
producer, a share with idempotent or transactional producers, a few open transactions, a
handful of hanging/late/2PC/unreadable ones), runs :func:`exporter.pipeline.compute.compute`
warm a few times per size on one Spark session, and prints the figures side by side:
seconds per cycle (median and max of the warm runs), Spark actions per cycle, the driver's
resident memory (the Python process and, in local mode, the JVM it started).

    .venv/bin/python bench/pipeline_bench.py                  # 1k, 10k, 100k partitions
    .venv/bin/python bench/pipeline_bench.py --sizes 1000 --runs 5
    .venv/bin/python bench/pipeline_bench.py --conf spark.sql.shuffle.partitions=1
    .venv/bin/python bench/pipeline_bench.py --connect --sizes 1000 10000   # over Spark Connect

``--fleet 10 50 100`` adds a synthetic fleet (issue 37): that many clusters of
``--fleet-partitions`` partitions each (one synthetic snapshot per cluster, each its own
seed), computed as ONE round (:func:`exporter.pipeline.rounds.compute_round`: one plan, one
action) and, in the same run, cluster by cluster (a loop of ``compute``: one plan per
cluster, the design before rounds): seconds per round, the per-cluster share, and the RSS
after the round. The timed rounds come after ``--fleet-warmup`` untimed ones, once the JIT
has settled (a daemon computes its fleet every interval for days); the early rounds (the
third and fourth of a fleet, which were the timed ones before) are printed beside them.

"Warm" is the few runs after a size's first: what the daemon's first minutes look like. The
JIT keeps compiling Spark's analyser and optimiser for many cycles after that (thousands of
methods, each called a few times a cycle, cross its thresholds one by one), so the bench then
runs ``--steady-cycles`` more cycles at ``--steady-size`` and times ``--steady-runs`` after
them, with the driver JVM's CPU per cycle by thread kind (``jvmstat.py``): the steady state
of a daemon that has been up for a while. Beside it, the floor (:func:`floor_cycle`): the same
snapshot's tables into the JVM and one action out, nothing computed.

No assertion on time: the figures are for reading, not for CI.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from jvmstat import KINDS, cpu_delta, thread_cpu
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from exporter.config import SparkConfig
from exporter.daemon.heap import lean_heap, trim
from exporter.model import (
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    BatchTimestamp,
    Broker,
    BrokerConfig,
    ClusterSnapshot,
    CycleResult,
    ListedTransaction,
    PartitionOffsets,
    PipelineMemory,
    PipelineSettings,
    ProducerState,
    TopicPartition,
    TransactionDescription,
)
from exporter.pipeline.compute import ComputeStats, compute
from exporter.pipeline.rounds import ClusterRun, RoundResult, compute_round
from exporter.pipeline.session import spark_session, stop
from exporter.pipeline.tables import SNAPSHOT_TABLES, Handover, Tables
from testbed.broker import free_port

NOW = 1_700_000_000_000
MIN = 60_000
BROKERS = 6
PARTITIONS_PER_TOPIC = 24
#: Share of partitions with at least one active producer (DescribeProducers rows).
PRODUCER_SHARE = 0.3
#: Share of producer rows that are transactional with an open transaction right now.
OPEN_SHARE = 0.1
#: Among open transactions: hanging (no coordinator), late-but-owned, 2PC, unreadable.
HANGING_SHARE = 0.01
LATE_SHARE = 0.02
TWO_PHASE_SHARE = 0.005


def synthetic_snapshot(partitions: int, seed: int = 7, cluster: str = "bench") -> ClusterSnapshot:
    rng = random.Random(seed)
    brokers = tuple(Broker(b, f"broker-{b}", 9092) for b in range(1, BROKERS + 1))
    offsets: list[PartitionOffsets] = []
    producers: list[ProducerState] = []
    listed: list[ListedTransaction] = []
    described: list[TransactionDescription] = []
    batches: list[BatchTimestamp] = []
    next_pid = 1000
    # One name object per topic, held by each of its partitions' records, as in a collected
    # snapshot (the offsets take a topic's name from the metadata, the producers from each
    # response's topic); a new string per record added ~60 bytes a record.
    names = [f"topic-{t}" for t in range(-(-partitions // PARTITIONS_PER_TOPIC))]
    for i in range(partitions):
        topic, p = names[i // PARTITIONS_PER_TOPIC], i % PARTITIONS_PER_TOPIC
        leader = 1 + i % BROKERS
        hw = rng.randrange(0, 10_000_000)
        if rng.random() >= PRODUCER_SHARE:
            offsets.append(PartitionOffsets(topic, p, leader, hw, hw))
            continue
        lso = hw
        for _ in range(rng.randint(1, 3)):
            next_pid += 1
            pid, epoch = next_pid, rng.randrange(0, 50)
            open_txn = rng.random() < OPEN_SHARE
            start = hw - rng.randrange(1, 5000) if open_txn else -1
            last_ts = NOW - rng.randrange(1, 60_000)
            producers.append(
                ProducerState(
                    topic,
                    p,
                    leader,
                    pid,
                    epoch,
                    rng.randrange(0, 10**6),
                    last_ts,
                    rng.randrange(0, 20),
                    start,
                )
            )
            if not open_txn:
                continue
            lso = min(lso, start)
            tid = f"app-{pid}"
            coordinator = 1 + pid % BROKERS
            kind = rng.random()
            if kind < HANGING_SHARE:  # the coordinator forgot it (KIP-664)
                batches.append(BatchTimestamp(topic, p, start, NOW - 3 * 3_600_000))
                continue
            timeout, started = MIN, NOW - rng.randrange(1, 50_000)
            if kind < HANGING_SHARE + LATE_SHARE:
                started = NOW - 40 * MIN
            elif kind < HANGING_SHARE + LATE_SHARE + TWO_PHASE_SHARE:
                timeout, started = TWO_PHASE_COMMIT_TIMEOUT_MS, NOW - 3 * 86_400_000
            listed.append(ListedTransaction(coordinator, tid, pid, "Ongoing"))
            described.append(
                TransactionDescription(
                    coordinator,
                    tid,
                    None,
                    "Ongoing",
                    timeout,
                    started,
                    pid,
                    epoch,
                    (TopicPartition(topic, p),),
                )
            )
        offsets.append(PartitionOffsets(topic, p, leader, hw, lso))
    return ClusterSnapshot(
        cluster=cluster,
        taken_at_ms=NOW,
        brokers=brokers,
        broker_configs=tuple(BrokerConfig(b.broker_id) for b in brokers),
        partitions=tuple(offsets),
        producers=tuple(producers),
        listed_transactions=tuple(listed),
        transactions=tuple(described),
        batch_timestamps=tuple(batches),
        coordinators_listed=frozenset(b.broker_id for b in brokers),
    )


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _jvm_pids() -> list[int]:
    """Child processes of this one that run java (the local-mode Spark driver JVM)."""
    pids = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == me and "java" in (entry / "comm").read_text():
                pids.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return pids


@dataclass
class Figures:
    partitions: int
    producers: int
    open_txns: int
    build_s: float
    median_s: float
    max_s: float
    actions: int
    findings: int
    python_rss_mb: float
    jvm_rss_mb: float
    #: Seconds per named step of the last warm run (ComputeStats.seconds): what dominates.
    steps: dict[str, float] = field(default_factory=dict)


def bench(spark: SparkSession, partitions: int, runs: int) -> Figures:
    started = time.perf_counter()
    snap = synthetic_snapshot(partitions)
    build_s = time.perf_counter() - started
    settings = PipelineSettings()
    previous: CycleResult = compute(spark, snap, settings, None, NOW)
    times = []
    stats = ComputeStats()
    result = previous
    for i in range(runs):
        stats = ComputeStats()
        t = time.perf_counter()
        now = NOW + (i + 1) * 30_000
        result = compute(spark, snap, settings, previous.memory, now, stats=stats)
        times.append(time.perf_counter() - t)
        trim()
        previous = result
    return Figures(
        partitions=partitions,
        producers=len(snap.producers),
        open_txns=sum(1 for p in snap.producers if p.current_txn_start_offset >= 0),
        build_s=build_s,
        median_s=statistics.median(times),
        max_s=max(times),
        actions=stats.actions,
        findings=len(result.findings),
        python_rss_mb=_rss_mb(os.getpid()),
        jvm_rss_mb=sum(_rss_mb(pid) for pid in _jvm_pids()),
        steps=dict(getattr(stats, "seconds", {}) or {}),
    )


@dataclass
class Steady:
    partitions: int
    #: Cycles run (untimed) before the timed ones, after the size sweep.
    after_cycles: int
    median_s: float
    python_cpu_s: float
    #: JVM CPU seconds per timed cycle by thread kind (jvmstat.KINDS).
    jvm_cpu_s: dict[str, float]
    #: Median seconds of :func:`floor_cycle` on the same snapshot, timed after the cycles.
    floor_s: float


def floor_cycle(spark: SparkSession, snap: ClusterSnapshot) -> dict[str, int]:
    """What any cycle costs before it computes anything: every snapshot table into the JVM
    the way the pipeline hands them over (small ones in the plan, large ones as files) and
    one action bringing one row per table back (its row count), in one union, as the
    pipeline's one action does. Returns the row counts by table."""
    with Handover(spark) as handover:
        tables = Tables(spark, snap, handover)
        counts = [
            tables[name].select(F.lit(name).alias("_table"), F.count(F.lit(1)).alias("rows"))
            for name in SNAPSHOT_TABLES
        ]
        result = functools.reduce(lambda a, b: a.unionAll(b), counts).toArrow()
    return dict(zip(result.column("_table").to_pylist(), result.column("rows").to_pylist(), strict=True))


def steady(spark: SparkSession, partitions: int, cycles: int, runs: int) -> Steady | None:
    """The pipeline after ``cycles`` more cycles: seconds per cycle and CPU per cycle."""
    jvms = _jvm_pids()
    if not jvms:  # a remote engine: its threads are not ours to read
        return None
    snap = synthetic_snapshot(partitions)
    settings = PipelineSettings()
    previous = compute(spark, snap, settings, None, NOW)
    for i in range(cycles):
        previous = compute(spark, snap, settings, previous.memory, NOW + (i + 1) * 30_000)
    before, python_before = thread_cpu(jvms[0]), time.process_time()
    times = []
    for i in range(runs):
        started = time.perf_counter()
        previous = compute(spark, snap, settings, previous.memory, NOW + (cycles + i + 1) * 30_000)
        times.append(time.perf_counter() - started)
    delta = cpu_delta(before, thread_cpu(jvms[0]))
    for _ in range(5):  # its few code paths of its own warm up
        floor_cycle(spark, snap)
    floors = []
    for _ in range(runs):
        started = time.perf_counter()
        floor_cycle(spark, snap)
        floors.append(time.perf_counter() - started)
    return Steady(
        partitions=partitions,
        after_cycles=cycles,
        median_s=statistics.median(times),
        python_cpu_s=(time.process_time() - python_before) / runs,
        jvm_cpu_s={kind: seconds / runs for kind, seconds in delta.items()},
        floor_s=statistics.median(floors),
    )


@dataclass
class Fleet:
    clusters: int
    partitions: int
    #: Seconds of the timed rounds after the warm-up (median) and of one loop of compute()
    #: over the same fleet.
    round_s: float
    loop_s: float
    actions: int
    python_rss_mb: float
    jvm_rss_mb: float
    #: Seconds of each untimed round before the timed ones, in order.
    warmup_s: list[float]

    @property
    def share_s(self) -> float:
        return self.round_s / self.clusters

    @property
    def early_round_s(self) -> float:
        """The third and fourth rounds (median): the JIT still at work."""
        return statistics.median(self.warmup_s[2:4] or self.warmup_s[-1:])


def fleet(spark: SparkSession, clusters: int, partitions: int, runs: int, warmup: int) -> Fleet:
    """A round of ``clusters`` synthetic clusters (``warmup`` untimed rounds, at least two,
    then ``runs`` timed ones, memory carried), and the same fleet computed cluster by cluster
    (one loop, timed)."""
    snaps = [synthetic_snapshot(partitions, seed=7 + i, cluster=f"bench-{i}") for i in range(clusters)]
    settings = PipelineSettings()
    memory: dict[str, PipelineMemory | None] = {s.cluster: None for s in snaps}

    def one_round(at_ms: int) -> RoundResult:
        outcome = compute_round(spark, [ClusterRun(s, memory[s.cluster], at_ms, settings) for s in snaps])
        if outcome.failures:
            raise RuntimeError(
                f"round failed for {sorted(outcome.failures)[:3]}: {next(iter(outcome.failures.values()))}"
            )
        memory.update({name: result.memory for name, result in outcome.results.items()})
        return outcome

    # Untimed rounds first. The first has no memory, the second is the first with it: each
    # plans shapes of its own for the first time, and a large round compiles them
    # (session.LARGE_ROUND_PARTITIONS): ~150 generated classes in the first, ~100 more in the
    # second, then a handful a round. The JIT goes on compiling Spark's planner for a few
    # rounds more: at 20 x 10k in a fresh process, 8.0, 3.9, 2.6, 2.2, 2.1, 1.9 s, then
    # 1.6-2.1 s.
    warmup_s: list[float] = []
    times: list[float] = []
    outcome: RoundResult | None = None
    for i in range(max(2, warmup) + runs):
        started = time.perf_counter()
        outcome = one_round(NOW + i * 30_000)
        (warmup_s if i < max(2, warmup) else times).append(time.perf_counter() - started)
        trim()  # as the daemon does after each round, untimed as there
    assert outcome is not None
    python_rss, jvm_rss = _rss_mb(os.getpid()), sum(_rss_mb(pid) for pid in _jvm_pids())
    started = time.perf_counter()
    for s in snaps:
        compute(spark, s, settings, memory[s.cluster], NOW + (max(2, warmup) + runs) * 30_000)
    loop_s = time.perf_counter() - started
    return Fleet(
        clusters=clusters,
        partitions=partitions,
        round_s=statistics.median(times),
        loop_s=loop_s,
        actions=outcome.stats.actions,
        python_rss_mb=python_rss,
        jvm_rss_mb=jvm_rss,
        warmup_s=warmup_s,
    )


def main() -> None:
    # The daemon's own heap (``kafka-txn-exporter run`` sets it first): two malloc arenas,
    # Arrow on the system allocator, freed pages given back after each computation. Without
    # it the RSS figures were the bench's allocator, not the daemon's. pyarrow is imported
    # already here, so its pool is set by call rather than by lean_heap's variable.
    lean_heap()
    pa.set_memory_pool(pa.system_memory_pool())
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--runs", type=int, default=3, help="warm runs per size")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="512m", help="the daemon's default")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting, repeatable"
    )
    parser.add_argument(
        "--connect",
        action="store_true",
        help="run the cycles over Spark Connect: the local driver serves Connect on a loopback "
        "port (as the daemon's spark.connect_server_port does) and a Connect client session runs "
        "the pipeline on it",
    )
    parser.add_argument(
        "--steady-cycles",
        type=int,
        default=20,
        help="after the sizes, run this many more cycles at --steady-size before timing the steady "
        "state (0: skip; skipped on Spark Connect, whose server threads serve the client too)",
    )
    parser.add_argument("--steady-size", type=int, default=10_000)
    parser.add_argument("--steady-runs", type=int, default=10, help="timed cycles of the steady state")
    parser.add_argument(
        "--fleet",
        type=int,
        nargs="*",
        default=[],
        metavar="CLUSTERS",
        help="fleet rounds of this many clusters",
    )
    parser.add_argument(
        "--fleet-partitions", type=int, default=10_000, help="partitions per cluster of a fleet"
    )
    parser.add_argument("--fleet-runs", type=int, default=3, help="timed rounds per fleet (median)")
    parser.add_argument(
        "--fleet-warmup",
        type=int,
        default=6,
        help="untimed rounds per fleet before the timed ones (at least 2)",
    )
    parser.add_argument("--skip-sizes", action="store_true", help="only the fleet (and the steady state)")
    args = parser.parse_args()

    conf = dict(item.split("=", 1) for item in args.conf)
    port = free_port() if args.connect else None
    server = spark_session(
        SparkConfig(master=args.master, driver_memory=args.driver_memory, conf=conf, connect_server_port=port)
    )
    spark = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").create() if port else server
    try:
        rows = [] if args.skip_sizes else [bench(spark, n, args.runs) for n in args.sizes]
        fleets = [
            fleet(spark, n, args.fleet_partitions, args.fleet_runs, args.fleet_warmup) for n in args.fleet
        ]
        settled = (
            steady(spark, args.steady_size, args.steady_cycles, args.steady_runs)
            if args.steady_cycles > 0 and not args.connect
            else None
        )
    finally:
        if spark is not server:
            spark.stop()
        stop(server)
    header = (
        f"{'partitions':>10} {'producers':>9} {'open':>6} {'snap_s':>7} {'cycle_s':>8} "
        f"{'max_s':>7} {'actions':>7} {'findings':>8} {'py_rss_mb':>9} {'jvm_rss_mb':>10}"
    )
    print(header)
    for r in rows:
        print(
            f"{r.partitions:>10} {r.producers:>9} {r.open_txns:>6} {r.build_s:>7.2f} "
            f"{r.median_s:>8.2f} {r.max_s:>7.2f} {r.actions:>7} {r.findings:>8} "
            f"{r.python_rss_mb:>9.0f} {r.jvm_rss_mb:>10.0f}"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"Arrow's memory pool: {pa.default_memory_pool().backend_name} (the daemon's: system)")
    print("\nwhere a warm run's time goes (ComputeStats.seconds of the last run, largest first):")
    for r in rows:
        top = sorted(r.steps.items(), key=lambda kv: -kv[1])[:6]
        print(f"  {r.partitions:>7}: " + ", ".join(f"{k} {v:.2f}s" for k, v in top))
    if settled is not None:
        jvm = sum(settled.jvm_cpu_s.values())
        print(
            f"\nsteady state, {settled.partitions} partitions, after {settled.after_cycles} more cycles: "
            f"{settled.median_s:.2f} s per cycle (median of {args.steady_runs})"
        )
        print(f"  CPU per cycle: Python {settled.python_cpu_s:.2f} s, driver JVM {jvm:.2f} s, of which")
        for kind in KINDS:
            print(f"    {kind:<34} {settled.jvm_cpu_s[kind]:.2f} s")
        print(
            f"  floor: the same snapshot's {len(SNAPSHOT_TABLES)} tables into the JVM and one action out, "
            f"nothing computed: {settled.floor_s:.2f} s (median of {args.steady_runs}); the cycle's "
            f"classification and outputs add {settled.median_s - settled.floor_s:.2f} s"
        )
    if fleets:
        print(
            f"\nfleet: {args.fleet_partitions} partitions per cluster, one round (one plan, one action) "
            "beside the same fleet cluster by cluster (a loop of compute); round_s: median of "
            f"{args.fleet_runs} round(s) after {max(2, args.fleet_warmup)} untimed, early_s: the "
            "third and fourth rounds"
        )
        print(
            f"{'clusters':>8} {'round_s':>8} {'share_s':>8} {'early_s':>8} {'early_share':>11} "
            f"{'actions':>7} {'loop_s':>8} {'loop_share_s':>12} {'py_rss_mb':>9} {'jvm_rss_mb':>10}"
        )
        for f in fleets:
            print(
                f"{f.clusters:>8} {f.round_s:>8.2f} {f.share_s:>8.3f} {f.early_round_s:>8.2f} "
                f"{f.early_round_s / f.clusters:>11.3f} {f.actions:>7} {f.loop_s:>8.2f} "
                f"{f.loop_s / f.clusters:>12.3f} {f.python_rss_mb:>9.0f} {f.jvm_rss_mb:>10.0f}"
            )
        for f in fleets:
            rounds = ", ".join(f"{t:.2f}" for t in f.warmup_s)
            print(f"  {f.clusters} clusters, the untimed rounds (s): {rounds}")
        print(f"driver memory: {args.driver_memory}; load average at the end: {os.getloadavg()[0]:.1f}")
    print()
    name = "pipeline_connect" if args.connect else "pipeline"
    for r in rows:  # read by bench/run.py for its targets table
        print(f"FIGURE\t{name}_warm_s@{r.partitions}\t{r.median_s:.4g}")
        print(f"FIGURE\t{name}_actions@{r.partitions}\t{r.actions}")
    for f in fleets:
        where = f"{f.clusters}x{f.partitions}"
        print(f"FIGURE\t{name}_fleet_round_s@{where}\t{f.round_s:.4g}")
        print(f"FIGURE\t{name}_fleet_share_s@{where}\t{f.share_s:.4g}")
        print(f"FIGURE\t{name}_fleet_early_share_s@{where}\t{f.early_round_s / f.clusters:.4g}")
        print(f"FIGURE\t{name}_fleet_loop_share_s@{where}\t{f.loop_s / f.clusters:.4g}")
        print(f"FIGURE\t{name}_fleet_rss_mib@{where}\t{f.python_rss_mb + f.jvm_rss_mb:.4g}")
    if settled is not None:
        print(f"FIGURE\t{name}_steady_s@{settled.partitions}\t{settled.median_s:.4g}")
        jit = settled.jvm_cpu_s["JIT compiler"]
        print(f"FIGURE\t{name}_steady_jit_cpu_s@{settled.partitions}\t{jit:.3g}")
        print(f"FIGURE\t{name}_floor_s@{settled.partitions}\t{settled.floor_s:.4g}")


if __name__ == "__main__":
    main()
