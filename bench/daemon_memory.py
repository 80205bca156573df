"""Daemon memory and cycle-time benchmark: the real ``kafka-txn-exporter run`` process.

Starts a single-node broker from the test bed (loopback), creates ``--partitions`` partitions
(default 3000: one 100-partition topic with transactional traffic, the rest in a second
topic), puts transactional state on it (committed and aborted transactions, open ones, one
hanging transaction; while the daemon runs, a producer commits a small transaction every
second), then for each Spark driver-memory variant (``--variants 512m,1g``):

* runs ``.venv/bin/kafka-txn-exporter run --config.file ...`` (interval ``--interval``,
  embedded local Spark) in a subprocess for at least ``--duration`` seconds and at least
  ``--min-cycles`` cycles (hard cap ``--max-duration``), then stops it with SIGTERM;
* every second: the RSS (``/proc/<pid>/status`` VmRSS) of the Python process and of its
  descendant JVM (the Spark driver, found by walking ``/proc/*/stat`` parent ids), CPU time
  of both (``/proc/<pid>/stat``), and a scrape of ``/metrics``;
* cycle durations come from the daemon's own ``kafka_txn_exporter_cycle_duration_seconds``
  histogram (``_sum`` delta per ``_count`` step), stage durations from
  ``kafka_txn_exporter_stage_duration_seconds`` read after each cycle.

Peak = the largest sample; steady = the median of the samples taken after the second
completed cycle. The recommended Kubernetes memory request/limit is peak total x 1.3,
rounded up to 64 MiB (request = limit: the JVM does not give memory back).

Run: ``.venv/bin/python bench/daemon_memory.py [--variants 512m,1g] [--duration 75]``.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import logging
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from collect_bench import make_traffic, settle
from prometheus_client.parser import text_string_to_metric_families

from testbed.broker import KafkaCluster, free_port

log = logging.getLogger("bench.daemon")

PAGE_MIB = 1024 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")
HEADROOM = 1.3
ROUND_MIB = 64
CLUSTER = "bench"
CYCLE_METRIC = "kafka_txn_exporter_cycle_duration_seconds"
STAGE_METRIC = "kafka_txn_exporter_stage_duration_seconds"
CYCLES_METRIC = "kafka_txn_exporter_cycles"


def progress(message: str) -> None:
    print(f"[daemon_memory {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- /proc -------------------------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    """Resident set size of one process in MiB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0.0


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return text.rsplit(")", 1)[1].split()[0] != "Z"


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (its own threads, not its children)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def descendants(root: int) -> dict[int, str]:
    """``{pid: command name}`` of every process below ``root``."""
    parents: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        ppid = int(text.rsplit(")", 1)[1].split()[1])
        parents[int(entry.name)] = (ppid, name)
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, name) in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = name
                frontier.append(pid)
    return found


# -- background traffic ------------------------------------------------------------------------


class CommitLoop:
    """One transactional producer committing a small transaction every ``period_s``."""

    def __init__(self, bootstrap: str, topic: str, partitions: range, period_s: float = 1.0) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._partitions = partitions
        self._period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commit-loop", daemon=True)
        self.committed = 0
        self.failures = 0

    def __enter__(self) -> CommitLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self._bootstrap, "linger.ms": 0,
                             "transactional.id": f"bench-commit-loop-{os.getpid()}",
                             "logger": log})
        producer.init_transactions(30)
        i = 0
        while not self._stop.wait(self._period_s):
            partition = self._partitions[i % len(self._partitions)]
            i += 1
            try:
                producer.begin_transaction()
                for _ in range(5):
                    producer.produce(self._topic, value=b"loop", partition=partition)
                producer.commit_transaction(30)
                self.committed += 1
            except Exception as e:  # counted and reported; the benchmark goes on
                self.failures += 1
                log.warning("commit loop: %s", e)
                with contextlib.suppress(Exception):
                    producer.abort_transaction(30)
        producer.flush(10)


# -- the daemon under test -----------------------------------------------------------------------


@dataclass
class Sample:
    t: float
    python_mib: float
    jvm_mib: float
    cycles: int


@dataclass
class VariantResult:
    driver_memory: str
    samples: list[Sample] = field(default_factory=list)
    cycle_seconds: list[float] = field(default_factory=list)
    stages: dict[str, list[float]] = field(default_factory=dict)
    outcomes: dict[str, float] = field(default_factory=dict)
    jvm_seen_s: float = math.nan
    ready_s: float = math.nan
    first_cycle_at_s: float = math.nan
    run_s: float = 0.0
    stop_s: float = math.nan
    python_cpu_s: float = 0.0
    jvm_cpu_s: float = 0.0
    exit_code: int | None = None
    orphan_jvms: int = 0
    jvm_pids: int = 0
    log_path: str = ""
    steady_from: int = 0

    @property
    def steady(self) -> list[Sample]:
        return self.samples[self.steady_from:] or self.samples

    def peak(self, what: str) -> float:
        return max((value(s, what) for s in self.samples), default=0.0)

    def steady_median(self, what: str) -> float:
        return statistics.median(value(s, what) for s in self.steady) if self.samples else 0.0

    def growth_mib_per_min(self) -> float:
        """Least-squares slope of total RSS over the steady samples."""
        points = [(s.t, s.python_mib + s.jvm_mib) for s in self.steady]
        if len(points) < 10:
            return math.nan
        mean_t = statistics.fmean(t for t, _ in points)
        mean_v = statistics.fmean(v for _, v in points)
        den = sum((t - mean_t) ** 2 for t, _ in points)
        return 60 * sum((t - mean_t) * (v - mean_v) for t, v in points) / den if den else math.nan


def value(s: Sample, what: str) -> float:
    return {"python": s.python_mib, "jvm": s.jvm_mib, "total": s.python_mib + s.jvm_mib}[what]


@dataclass
class Scrape:
    cycles: int = 0
    cycle_sum: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)
    outcomes: dict[str, float] = field(default_factory=dict)


def scrape(port: int) -> Scrape | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError):
        return None
    result = Scrape()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("cluster") != CLUSTER:
                continue
            if sample.name == f"{CYCLE_METRIC}_count":
                result.cycles = int(sample.value)
            elif sample.name == f"{CYCLE_METRIC}_sum":
                result.cycle_sum = sample.value
            elif sample.name == STAGE_METRIC:
                result.stages[sample.labels["stage"]] = sample.value
            elif sample.name == f"{CYCLES_METRIC}_total":
                result.outcomes[sample.labels["result"]] = sample.value
    return result


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def write_config(directory: Path, bootstrap: str, port: int, driver_memory: str,
                 interval_s: float) -> Path:
    config = {
        "web": {"listen_address": f"127.0.0.1:{port}"},
        "log": {"level": "info"},
        "spark": {"driver_memory": driver_memory, "local_dir": str(directory / "spark")},
        "clusters": [{"name": CLUSTER, "bootstrap_servers": bootstrap,
                      "interval": f"{interval_s}s",
                      "request_timeout": f"{max(1.0, interval_s - 1)}s"}],
    }
    path = directory / f"config-{driver_memory}.yml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    return path


def exporter_command() -> list[str]:
    script = Path(sys.executable).parent / "kafka-txn-exporter"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "exporter.cli"]


def run_variant(bootstrap: str, driver_memory: str, *, interval_s: float, duration_s: float,
                min_cycles: int, max_duration_s: float, work: Path) -> VariantResult:
    port = free_port()
    config = write_config(work, bootstrap, port, driver_memory, interval_s)
    result = VariantResult(driver_memory, log_path=str(work / f"daemon-{driver_memory}.log"))
    cmd = [*exporter_command(), "run", "--config.file", str(config)]
    progress(f"[{driver_memory}] starting: {' '.join(cmd)}")
    with open(result.log_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    started = time.monotonic()
    last = Scrape()
    jvm_pids: set[int] = set()
    try:
        while proc.poll() is None:
            elapsed = time.monotonic() - started
            if elapsed >= max_duration_s or (elapsed >= duration_s and last.cycles >= min_cycles):
                break
            tick = time.monotonic()
            children = descendants(proc.pid)
            java = [pid for pid, name in children.items() if name == "java"]
            jvm_pids.update(java)
            if java and math.isnan(result.jvm_seen_s):
                result.jvm_seen_s = elapsed
            current = scrape(port)
            if current is not None:
                if math.isnan(result.ready_s) and ready(port):
                    result.ready_s = time.monotonic() - started
                if current.cycles > last.cycles:
                    steps = current.cycles - last.cycles
                    per_cycle = (current.cycle_sum - last.cycle_sum) / steps
                    result.cycle_seconds.extend([per_cycle] * steps)
                    for stage, seconds in current.stages.items():
                        result.stages.setdefault(stage, []).append(seconds)
                    if math.isnan(result.first_cycle_at_s):
                        result.first_cycle_at_s = elapsed
                    if current.cycles >= 2 and not result.steady_from:
                        result.steady_from = len(result.samples) + 1
                last = current
                result.outcomes = dict(current.outcomes)
            result.samples.append(Sample(elapsed, rss_mib(proc.pid), sum(rss_mib(p) for p in java),
                                         last.cycles))
            result.python_cpu_s = cpu_seconds(proc.pid) or result.python_cpu_s
            result.jvm_cpu_s = sum(cpu_seconds(p) for p in java) or result.jvm_cpu_s
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        result.run_s = time.monotonic() - started
    finally:
        stopping = time.monotonic()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            result.exit_code = proc.wait(timeout=60)
            result.stop_s = time.monotonic() - stopping
        except subprocess.TimeoutExpired:
            progress(f"[{driver_memory}] the daemon ignored SIGTERM for 60 s: killing its group")
            os.killpg(proc.pid, signal.SIGKILL)
            result.exit_code = proc.wait(timeout=10)
        grace = time.monotonic() + 15
        while time.monotonic() < grace and any(alive(p) for p in jvm_pids):
            time.sleep(0.2)
        left = sorted(p for p in jvm_pids if alive(p))
        result.orphan_jvms = len(left)
        result.jvm_pids = len(jvm_pids)
        if left:
            progress(f"[{driver_memory}] Spark JVM(s) {left} still alive 15 s after the daemon "
                     "exited: killing them")
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    progress(f"[{driver_memory}] {len(result.cycle_seconds)} cycles in {result.run_s:.0f} s, "
             f"peak total {result.peak('total'):.0f} MiB, exit {result.exit_code}")
    return result


# -- report --------------------------------------------------------------------------------------


def recommended_mib(peak: float) -> int:
    return int(math.ceil(peak * HEADROOM / ROUND_MIB) * ROUND_MIB)


def fmt(x: float, spec: str = ".1f") -> str:
    return "n/a" if math.isnan(x) else format(x, spec)


def print_report(results: Sequence[VariantResult], partitions: int, interval_s: float,
                 traffic: str) -> None:
    print()
    print(f"== Daemon: kafka-txn-exporter run, 1 broker, {partitions} partitions, interval "
          f"{interval_s:g}s, embedded Spark local[2] ==")
    print(f"traffic: {traffic}")
    print()
    names = [r.driver_memory for r in results]
    width = max(12, *(len(n) + 2 for n in names))

    def row(label: str, values: Sequence[str]) -> None:
        print(f"{label:<44}" + "".join(f"{v:>{width}}" for v in values))

    row("spark.driver_memory", names)
    row("run (s)", [fmt(r.run_s, ".0f") for r in results])
    row("RSS samples (1/s)", [str(len(r.samples)) for r in results])
    row("Spark JVM seen after (s)", [fmt(r.jvm_seen_s) for r in results])
    row("first cycle published after (s)", [fmt(r.first_cycle_at_s) for r in results])
    row("/readyz 200 after (s)", [fmt(r.ready_s) for r in results])
    for what in ("python", "jvm", "total"):
        row(f"peak RSS {what} (MiB)", [fmt(r.peak(what), ".0f") for r in results])
    for what in ("python", "jvm", "total"):
        row(f"steady RSS {what} (MiB, median after cycle 2)",
            [fmt(r.steady_median(what), ".0f") for r in results])
    row("RSS growth over steady window (MiB/min)",
        [fmt(r.growth_mib_per_min(), "+.1f") for r in results])
    row("cycles (complete/partial/failed)",
        ["/".join(str(int(r.outcomes.get(k, 0))) for k in ("complete", "partial", "failed"))
         for r in results])
    row("cycle 1 (s)", [fmt(r.cycle_seconds[0], ".2f") if r.cycle_seconds else "n/a"
                        for r in results])
    row("cycles 2.. median (s)", [fmt(statistics.median(r.cycle_seconds[1:]), ".2f")
                                  if len(r.cycle_seconds) > 1 else "n/a" for r in results])
    row("cycles 2.. max (s)", [fmt(max(r.cycle_seconds[1:]), ".2f")
                               if len(r.cycle_seconds) > 1 else "n/a" for r in results])
    stages = sorted({s for r in results for s in r.stages})
    for stage in stages:
        row(f"  stage {stage} median (s)",
            [fmt(statistics.median(r.stages[stage]), ".3f") if r.stages.get(stage) else "n/a"
             for r in results])
    row("CPU python (s) / run", [fmt(r.python_cpu_s, ".0f") for r in results])
    row("CPU Spark JVM (s) / run", [fmt(r.jvm_cpu_s, ".0f") for r in results])
    row("avg cores used (python+JVM)",
        [fmt((r.python_cpu_s + r.jvm_cpu_s) / r.run_s, ".2f") if r.run_s else "n/a"
         for r in results])
    row("SIGTERM to exit (s)", [fmt(r.stop_s) for r in results])
    row("exit code", [str(r.exit_code) for r in results])
    row("Spark JVMs seen / alive 15 s after exit", [f"{r.jvm_pids}/{r.orphan_jvms}" for r in results])
    print()
    for r in results:
        print(f"cycle durations [{r.driver_memory}] (s): "
              + " ".join(f"{s:.2f}" for s in r.cycle_seconds))
    print()
    print(f"Recommended Kubernetes memory (peak total RSS x {HEADROOM}, rounded up to "
          f"{ROUND_MIB} MiB; request = limit):")
    for r in results:
        mib = recommended_mib(r.peak("total"))
        print(f"  spark.driver_memory={r.driver_memory}: resources.requests.memory={mib}Mi, "
              f"resources.limits.memory={mib}Mi   (peak {r.peak('total'):.0f} MiB, "
              f"steady {r.steady_median('total'):.0f} MiB)")
    print("  CPU: see 'avg cores used' (the cycle is bursty; the Spark jobs use up to 2 cores).")
    for r in results:
        if r.exit_code != 0 or not r.cycle_seconds:
            print(f"daemon log [{r.driver_memory}] (tail):")
            with contextlib.suppress(OSError):
                print("\n".join(Path(r.log_path).read_text(errors="replace").splitlines()[-30:]))


@contextlib.contextmanager
def work_dir(keep: bool) -> Iterator[Path]:
    if keep:
        yield Path(tempfile.mkdtemp(prefix="kte-bench-daemon-"))
        return
    with tempfile.TemporaryDirectory(prefix="kte-bench-daemon-") as d:
        yield Path(d)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--variants", default="512m,1g",
                        help="spark.driver_memory values, one daemon run each (default 512m,1g)")
    parser.add_argument("--partitions", type=int, default=3000)
    parser.add_argument("--interval", type=float, default=5.0, help="cycle interval, seconds")
    parser.add_argument("--duration", type=float, default=60.0,
                        help="minimum run per variant, seconds (and at least --min-cycles)")
    parser.add_argument("--min-cycles", type=int, default=5)
    parser.add_argument("--max-duration", type=float, default=120.0,
                        help="hard cap per variant, seconds")
    parser.add_argument("--keep", action="store_true", help="keep configs and daemon logs")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-ups: stop brokers
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid>: every thread's stack to stderr
    logging.basicConfig(level=logging.WARNING,
                        format="%(asctime)s %(threadName)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    if args.partitions < 120:
        parser.error("--partitions must be >= 120")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    started = time.monotonic()
    results: list[VariantResult] = []
    with work_dir(args.keep) as work, KafkaCluster(brokers=1) as cluster:
        bootstrap = cluster.bootstrap_servers
        progress(f"broker up in {time.monotonic() - started:.1f} s ({bootstrap})")
        cluster.create_topic("bench-txn", partitions=100, timeout_s=120)
        cluster.create_topic("bench-bulk", partitions=args.partitions - 100, timeout_s=300)
        partial, settle_s, first_error = settle(bootstrap, timeout_s=180)
        progress(f"{args.partitions} partitions created; settled after {partial} partial "
                 f"cycle(s) in {settle_s:.1f} s {first_error}")
        traffic = make_traffic(cluster, "bench-txn", open_timeout_ms=900_000)
        progress(f"traffic: {traffic.describe()}")
        try:
            with CommitLoop(bootstrap, "bench-txn", range(20, 100)) as loop:
                for variant in variants:
                    results.append(run_variant(
                        bootstrap, variant, interval_s=args.interval, duration_s=args.duration,
                        min_cycles=args.min_cycles, max_duration_s=args.max_duration, work=work))
            description = (f"{traffic.describe()}; during the runs a producer committed "
                           f"{loop.committed} small transactions (1/s), {loop.failures} failed")
        finally:
            traffic.close()
        print_report(results, args.partitions, args.interval, description)
        if args.keep:
            print(f"work dir kept: {work}")
    print(f"\ndaemon_memory finished in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
