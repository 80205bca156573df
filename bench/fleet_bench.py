"""Fleet benchmark: a round of 1, 3 and 5 real single-broker clusters in one daemon, against one
cluster's cycle and against Kafka's find-hanging run once per cluster.

Starts ``len(--partitions)`` single-broker clusters from the test bed (loopback), cluster i with
``--partitions[i]`` partitions (one 100-partition topic with transactional traffic, the rest in a
second topic) and the transactional state of ``bench/daemon_memory.py`` (committed, aborted and
open transactions, a hanging one; while the daemons run, a producer per cluster commits a small
transaction every second). Times Kafka's own ``kafka-transactions.sh find-hanging`` on every
cluster (one JVM each, as an operator's cron would run it), then runs the real
``kafka-txn-exporter run`` process (embedded Spark, 512m) watching the first 1, 3 and 5
clusters (``--rounds``), each for at least ``--duration`` seconds and ``--min-cycles`` rounds.

A round lasts as long as its slowest cluster's cycle (the clusters of a round collect together
and are computed together): the round's seconds are the median over rounds 2.. of the slowest
cycle, from the daemon's ``kafka_txn_exporter_cycle_duration_seconds`` (see daemon_memory.py).

``FIGURE`` lines for ``bench/run.py``: ``fleet_round_s@N``, ``fleet_round_vs_one@N`` (the round of
N clusters over the single cluster's cycle, same run), ``fleet_find_hanging_s@N`` (Kafka's tool
over the same N clusters) and ``fleet_round_vs_find_hanging@N``, ``fleet_rss_peak_mib@N``.

Run: ``.venv/bin/python bench/fleet_bench.py [--partitions 3000,2500,2000,1500,1000]``.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import logging
import math
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from collect_bench import make_traffic, settle
from daemon_memory import (
    CommitLoop,
    Variant,
    VariantResult,
    figure,
    fmt,
    kafka_find_hanging,
    progress,
    recommended_mib,
    run_variant,
    work_dir,
)

from testbed.broker import KafkaCluster

log = logging.getLogger("bench.fleet")


def start_clusters(stack: contextlib.ExitStack, partitions: Sequence[int]) -> list[KafkaCluster]:
    clusters = []
    for i, count in enumerate(partitions, start=1):
        started = time.monotonic()
        cluster = stack.enter_context(KafkaCluster(brokers=1))
        cluster.create_topic("bench-txn", partitions=100, timeout_s=120)
        cluster.create_topic("bench-bulk", partitions=count - 100, replication_factor=1, timeout_s=600)
        partial, settle_s, _ = settle(cluster.bootstrap_servers, timeout_s=300)
        progress(
            f"cluster {i}: {cluster.bootstrap_servers}, {count} partitions, up and settled in "
            f"{time.monotonic() - started:.0f} s ({partial} partial cycle(s) in {settle_s:.0f} s)"
        )
        clusters.append(cluster)
    return clusters


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--partitions", default="3000,2500,2000,1500,1000", help="partitions of each cluster, comma-separated"
    )
    parser.add_argument(
        "--rounds", default="1,3,5", help="daemon runs: how many of the clusters each watches"
    )
    parser.add_argument("--interval", type=float, default=10.0, help="cycle interval, seconds")
    parser.add_argument("--duration", type=float, default=90.0, help="minimum run per daemon, seconds")
    parser.add_argument("--min-cycles", type=int, default=6)
    parser.add_argument("--max-duration", type=float, default=240.0, help="hard cap per daemon, seconds")
    parser.add_argument("--keep", action="store_true", help="keep configs and daemon logs")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-ups: stop brokers
    faulthandler.register(signal.SIGUSR1)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    partitions = [int(p) for p in args.partitions.split(",") if p.strip()]
    sizes = sorted({int(n) for n in args.rounds.split(",") if n.strip()})
    if any(p < 120 for p in partitions) or not sizes or max(sizes) > len(partitions) or min(sizes) < 1:
        parser.error("--partitions >= 120 each; --rounds between 1 and the number of clusters")
    started = time.monotonic()
    results: dict[int, VariantResult] = {}
    find_hanging: list[float] = []
    with work_dir(args.keep) as work, contextlib.ExitStack() as stack:
        clusters = start_clusters(stack, partitions)
        traffics = [make_traffic(c, "bench-txn", open_timeout_ms=900_000) for c in clusters]
        for traffic in traffics:
            stack.callback(traffic.close)
        for i, cluster in enumerate(clusters, start=1):
            seconds, _ = kafka_find_hanging(cluster)
            find_hanging.append(seconds)
            progress(f"Kafka's find-hanging on cluster {i}: {seconds:.2f} s")
        loops = [
            stack.enter_context(CommitLoop(c.bootstrap_servers, "bench-txn", range(20, 100)))
            for c in clusters
        ]
        bootstraps = [c.bootstrap_servers for c in clusters]
        for n in sizes:
            variant = Variant(f"{n}x512m", driver_memory="512m", clusters=n)
            results[n] = run_variant(
                bootstraps[0],
                variant,
                interval_s=args.interval,
                duration_s=args.duration,
                min_cycles=args.min_cycles,
                max_duration_s=args.max_duration,
                work=work,
                bootstraps=bootstraps[:n],
            )
        committed = sum(loop.committed for loop in loops)
        print_report(results, partitions, find_hanging, args.interval, committed, traffics[0].describe())
        if args.keep:
            print(f"work dir kept: {work}")
    print(f"\nfleet_bench finished in {time.monotonic() - started:.0f} s")
    return 0 if all(r.exit_code == 0 and r.cycle_seconds for r in results.values()) else 1


def round_seconds(result: VariantResult) -> float:
    return result.warm_cycle_s() if result.variant.clusters == 1 else result.round_s()


def late_round_seconds(result: VariantResult) -> float:
    """Median over the second half of the run's rounds of the slowest cluster's cycle: the
    engine keeps warming (the JIT) for ten rounds or more, and rounds 2.. include that."""
    rounds = result.rounds_s()
    late = rounds[len(rounds) // 2 :]
    return statistics.median(late) if len(late) >= 2 else math.nan


def print_report(
    results: dict[int, VariantResult],
    partitions: Sequence[int],
    find_hanging: Sequence[float],
    interval_s: float,
    committed: int,
    traffic: str,
) -> None:
    print()
    print(
        f"== Fleet: kafka-txn-exporter run on {len(partitions)} single-broker clusters "
        f"({', '.join(map(str, partitions))} partitions), interval {interval_s:g} s =="
    )
    print(f"traffic per cluster: {traffic}; {committed} small transactions committed (1/s per cluster)")
    tools = " ".join(f"{s:.2f}" for s in find_hanging)
    print(f"Kafka's find-hanging per cluster (s, JVM start included): {tools}")
    one = results.get(1)
    one_s = round_seconds(one) if one else math.nan
    print(f"{'clusters':>9} {'round (s)':>10} {'/ one':>7} {'find-hanging (s)':>17} {'/ find-h.':>10} "
          f"{'rounds':>7} {'RSS peak (MiB)':>15} {'avg cores':>10} {'exit':>5}")  # fmt: skip
    for n, r in sorted(results.items()):
        seconds = round_seconds(r)
        tool = sum(find_hanging[:n])
        cores = (r.python_cpu_s + r.jvm_cpu_s) / r.run_s if r.run_s else math.nan
        print(
            f"{n:>9} {fmt(seconds, '.2f'):>10} {fmt(seconds / one_s, '.2f'):>7} {fmt(tool, '.2f'):>17} "
            f"{fmt(seconds / tool, '.2f'):>10} {len(r.cycle_seconds):>7} {fmt(r.peak('total'), '.0f'):>15} "
            f"{fmt(cores, '.2f'):>10} {r.exit_code!s:>5}"
        )
    for n, r in sorted(results.items()):
        print(f"cycle durations with {n} cluster(s) (s):")
        for cluster, cycles in sorted(r.cluster_cycles.items()):
            print(f"  {cluster}: " + " ".join(f"{s:.2f}" for s in cycles))
        stages = {k: v[1:] for k, v in sorted(r.stages.items()) if len(v) > 1}
        if stages:
            print(
                "  stages of its first cluster, median of cycles 2.. (s): "
                + ", ".join(f"{k} {statistics.median(v):.3f}" for k, v in stages.items())
            )
        if r.exit_code != 0 or not r.cycle_seconds:
            with contextlib.suppress(OSError):
                print("\n".join(Path(r.log_path).read_text(errors="replace").splitlines()[-30:]))
    late_one = late_round_seconds(one) if one else math.nan
    print("second half of each run's rounds, median (the engine still warms in the first half):")
    for n, r in sorted(results.items()):
        late = late_round_seconds(r)
        tool = sum(find_hanging[:n])
        print(
            f"  {n} cluster(s): {fmt(late, '.2f')} s, {fmt(late / late_one, '.2f')}x one cluster, "
            f"{fmt(late / tool, '.2f')}x Kafka's find-hanging"
        )
    print("Recommended Kubernetes memory (peak total RSS x 1.3, rounded up to 64 MiB): " + ", ".join(
        f"{n} cluster(s) {recommended_mib(r.peak('total'))}Mi" for n, r in sorted(results.items())
    ))  # fmt: skip
    print()
    for n, r in sorted(results.items()):
        seconds = round_seconds(r)
        tool = sum(find_hanging[:n])
        figure(f"fleet_round_s@{n}", seconds)
        figure(f"fleet_round_vs_one@{n}", seconds / one_s)
        figure(f"fleet_find_hanging_s@{n}", tool)
        figure(f"fleet_round_vs_find_hanging@{n}", seconds / tool)
        figure(f"fleet_rss_peak_mib@{n}", r.peak("total"))


if __name__ == "__main__":
    sys.exit(main())
