"""Soak: the real ``kafka-txn-exporter run`` process for a long time, watched for leaks.

Starts one broker from the test bed (loopback), ``--partitions`` partitions (a topic of up to
100 with one genuinely hanging transaction on partition 0 and a transactional producer
committing short transactions all the time on the others: churn, every 10th aborted; the rest
in a second topic), then the daemon (embedded local
Spark, interval ``--interval``) for ``--minutes``. Every ``--sample`` seconds it reads, for
the exporter's process tree (the Python process and its Spark JVM): RSS, threads, open file
descriptors, and a scrape of ``/metrics``.

It prints one row per ``--window`` minutes: RSS (median, max), threads and fds (max),
cycles completed, the cycle time p50/p95 of the window (from the daemon's own
``kafka_txn_exporter_cycle_duration_seconds`` buckets, interpolated as Prometheus'
``histogram_quantile`` does) and whether the hanging transaction was exported; then the
slopes (least squares over the samples after ``--warmup`` minutes): RSS in MiB/min,
threads and fds per hour. Flat means an RSS slope <= 1 MiB/min and no thread or fd growth.

The run stops by itself: SIGTERM to the daemon after ``--minutes`` (its exit code is
printed), the churn and the broker stopped.

    make soak                                                  # 60 minutes
    PYTHONPATH=. .venv/bin/python bench/soak.py --minutes 10 --window 2
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from daemon_memory import descendants, exporter_command, ready, rss_mib
from prometheus_client.parser import text_string_to_metric_families

from testbed.broker import KafkaCluster, free_port
from testbed.churn import LibrdkafkaChurn
from testbed.scenarios import create_hanging_transaction

CYCLE_METRIC = "kafka_txn_exporter_cycle_duration_seconds"
HANGING_METRIC = "kafka_txn_hanging_transaction_info"


def progress(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _status_field(pid: int, name: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{name}:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return 0


@dataclass
class Sample:
    at_s: float
    rss_mib: float
    threads: int
    fds: int
    #: Cumulative cycle-duration histogram: upper bound -> count (``+Inf`` included).
    buckets: dict[float, float] = field(default_factory=dict)
    hanging_exported: bool = False


def sample(pid: int, port: int, started: float) -> Sample:
    tree = [pid, *descendants(pid)]
    buckets: dict[float, float] = {}
    hanging = False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == f"{CYCLE_METRIC}_bucket":
                    le = float(s.labels["le"])
                    buckets[le] = buckets.get(le, 0.0) + s.value
                elif s.name == HANGING_METRIC:
                    hanging = True
    except (urllib.error.URLError, OSError, ValueError):
        pass
    return Sample(
        at_s=time.monotonic() - started,
        rss_mib=sum(rss_mib(p) for p in tree),
        threads=sum(_status_field(p, "Threads") for p in tree),
        fds=sum(_fds(p) for p in tree),
        buckets=buckets,
        hanging_exported=hanging,
    )


def quantile(q: float, first: dict[float, float], last: dict[float, float]) -> float:
    """``histogram_quantile`` over the increase of a cumulative histogram between two scrapes."""
    bounds = sorted(last)
    increase = [(b, last[b] - first.get(b, 0.0)) for b in bounds]
    total = increase[-1][1] if increase else 0.0
    if total <= 0:
        return float("nan")
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in increase:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            width = count - lower_count
            return lower_bound + (bound - lower_bound) * ((rank - lower_count) / width if width else 1.0)
        lower_bound, lower_count = bound, count
    return lower_bound


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points (0 with fewer than two)."""
    if len(points) < 2:
        return 0.0
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def report(samples: Sequence[Sample], window_s: float, warmup_s: float) -> list[str]:
    lines = [
        "| window (min) | RSS median / max (MiB) | threads max | fds max | cycles "
        "| cycle p50 / p95 (s) | hanging exported |",
        "|---|---|---|---|---|---|---|",
    ]
    start = 0.0
    end = samples[-1].at_s if samples else 0.0
    previous: Sample | None = None
    while start < end:
        window = [s for s in samples if start <= s.at_s < start + window_s]
        if window:
            first = previous.buckets if previous is not None else {}
            last = window[-1].buckets
            cycles = last.get(float("inf"), 0.0) - first.get(float("inf"), 0.0)
            rss = [s.rss_mib for s in window]
            lines.append(
                f"| {start / 60:.0f}-{(start + window_s) / 60:.0f} "
                f"| {statistics.median(rss):.0f} / {max(rss):.0f} "
                f"| {max(s.threads for s in window)} | {max(s.fds for s in window)} "
                f"| {cycles:.0f} | {quantile(0.5, first, last):.2f} / {quantile(0.95, first, last):.2f} "
                f"| {'yes' if all(s.hanging_exported for s in window) else 'not in every sample'} |"
            )
            previous = window[-1]
        start += window_s
    steady = [s for s in samples if s.at_s >= warmup_s]
    rss_slope = slope([(s.at_s / 60, s.rss_mib) for s in steady])
    threads_slope = slope([(s.at_s / 3600, s.threads) for s in steady])
    fds_slope = slope([(s.at_s / 3600, s.fds) for s in steady])
    lines += [
        "",
        f"slopes after minute {warmup_s / 60:.0f}: RSS {rss_slope:+.2f} MiB/min (target <= 1), "
        f"threads {threads_slope:+.1f}/h, fds {fds_slope:+.1f}/h",
        f"FIGURE\tsoak_rss_slope_mib_per_min\t{rss_slope:.3f}",
        f"FIGURE\tsoak_rss_peak_mib\t{max((s.rss_mib for s in samples), default=0):.1f}",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="how long the daemon runs")
    parser.add_argument("--window", type=float, default=5.0, help="minutes per table row")
    parser.add_argument("--warmup", type=float, default=2.0, help="minutes left out of the slopes")
    parser.add_argument("--interval", type=float, default=10.0, help="the daemon's interval, seconds")
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--partitions", type=int, default=100)
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.window <= 0 or args.interval <= 0 or args.sample <= 0:
        parser.error("--minutes, --window, --interval and --sample must be positive")

    duration_s = args.minutes * 60
    with tempfile.TemporaryDirectory(prefix="kte-soak-") as tmp, KafkaCluster(brokers=1) as cluster:
        work = Path(tmp)
        # The churn and the hanging transaction on a topic of 100 partitions, the rest in a
        # second topic: one CreateTopics request may not hold 10k partitions (Kafka refuses an
        # "excessively large batch operation").
        txn_partitions = min(100, args.partitions)
        topic = cluster.create_topic("soak", partitions=txn_partitions)
        watched = [topic]
        if args.partitions > txn_partitions:
            watched.append(
                cluster.create_topic("soak-bulk", partitions=args.partitions - txn_partitions, timeout_s=600)
            )
        create_hanging_transaction(cluster, topic, partition=0)
        port = free_port()
        config = work / "config.yml"
        request_timeout_s = max(1.0, min(10.0, args.interval - 1))
        config.write_text(json.dumps({  # JSON is YAML
            "web": {"listen_address": f"127.0.0.1:{port}"},
            "spark": {"local_dir": str(work / "spark")},
            "clusters": [{
                "name": "soak", "bootstrap_servers": cluster.bootstrap_servers,
                "interval": f"{args.interval}s", "request_timeout": f"{request_timeout_s}s",
                "topics": {"allow": watched},
            }],
        }))  # fmt: skip
        churn = LibrdkafkaChurn(
            cluster.bootstrap_servers,
            topic,
            duration_s=duration_s + 120,
            max_transactions=10_000_000,
            partitions=tuple(range(1, txn_partitions)),
            abort_every=10,
        )
        log_path = work / "daemon.log"
        with log_path.open("wb") as log_file:
            daemon = subprocess.Popen(
                [*exporter_command(), "run", "--config.file", str(config)],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        samples: list[Sample] = []
        try:
            churn.start()
            started = time.monotonic()
            progress(f"daemon pid {daemon.pid} on :{port}; {args.minutes:g} min, churn on {topic}")
            while time.monotonic() - started < 300 and not ready(port) and daemon.poll() is None:
                time.sleep(1)
            while time.monotonic() - started < duration_s and daemon.poll() is None:
                samples.append(sample(daemon.pid, port, started))
                if len(samples) % max(1, int(300 / args.sample)) == 0:
                    last = samples[-1]
                    progress(f"{last.at_s / 60:.0f} min: RSS {last.rss_mib:.0f} MiB, {last.threads} threads")
                time.sleep(args.sample)
        finally:
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
            try:
                code = daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                code = daemon.wait()
            churn.stop()
        stats = churn.stats
        print(f"soak: {args.minutes:g} min, interval {args.interval:g} s, {args.partitions} partitions; "
              f"churn {stats.transactions_committed} committed / {stats.transactions_aborted} aborted "
              f"transactions; daemon exit code {code} after SIGTERM")  # fmt: skip
        if not samples:
            print(
                f"no sample: the daemon ended early (exit {code}); its log:\n{log_path.read_text()[-3000:]}"
            )
            return 1
        print("\n".join(report(samples, args.window * 60, args.warmup * 60)))
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
