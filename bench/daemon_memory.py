"""Daemon memory and cycle-time benchmark: the real ``kafka-txn-exporter run`` process.

Starts ``--brokers`` brokers from the test bed (loopback), creates ``--partitions`` partitions
(one 100-partition topic with transactional traffic, the rest in a second topic), puts
transactional state on it (committed and aborted transactions, open ones, one hanging
transaction; while the daemon runs, a producer commits a small transaction every second),
times Kafka's own ``kafka-transactions.sh find-hanging`` on the same cluster (once per broker,
JVM start included), then runs each variant of ``--variants``:

* ``512m``, ``1g``: one cluster, embedded local Spark with that ``spark.driver_memory``;
* ``5x512m``: five clusters (the same broker under five names) in one process;
* ``connect``: thin mode, ``spark.connect_url`` to a Spark Connect server this script starts
  from the pyspark wheel (the exporter starts no JVM; the server's RSS is reported apart);
* a ``+cli`` suffix (``512m+cli``): the daemon serves its warm engine on a loopback Connect
  endpoint (``spark.connect_server_port``) and, after the sampling, ``find-hanging`` of the
  CLI is timed against it (``--fresh``: collected and classified on the warm engine) and
  answered from the daemon's last cycle (``--exporter``, ``/api/v1/findings``); ``--cli``
  also times the CLI cold (no engine or exporter reachable);
* a ``+archive`` suffix (``512m+archive``): the embedded driver maps the class archive that
  ``kafka-txn-exporter class-archive`` writes first, as the image ships it (the Dockerfile
  writes one and sets ``$KAFKA_TXN_EXPORTER_SPARK_CLASS_ARCHIVE``); the variants without
  the suffix start the JVM without one, as a ``pip install`` does.

Each daemon runs (interval ``--interval``) for at least ``--duration`` seconds and
``--min-cycles`` cycles (cap ``--max-duration``), then gets SIGTERM. Every second (every 0.2 s
until the first cycle is published, which times it): the RSS
(VmRSS) of the Python process and of its descendant JVM (the Spark driver), CPU time of
both, and a scrape of ``/metrics``. Cycle durations come from the daemon's own
``kafka_txn_exporter_cycle_duration_seconds`` histogram, stage durations from
``kafka_txn_exporter_stage_duration_seconds``.

Peak = the largest sample; steady = the median of the samples taken after the second
completed cycle; the RSS slope is fitted over the samples after minute 2 when the run lasts
3 minutes or more (else after cycle 2). The recommended Kubernetes memory is peak total x 1.3,
rounded up to 64 MiB. The last lines, ``FIGURE<TAB>name<TAB>value``, are read by
``bench/run.py`` for its targets table.

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
import socket
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
from jvmstat import KINDS, code_cache_mib, cpu_delta, thread_cpu
from prometheus_client.parser import text_string_to_metric_families

from exporter.pipeline.class_archive import CLASS_ARCHIVE_ENV
from testbed.broker import KafkaCluster, free_port
from testbed.oracles import TransactionsCommand

log = logging.getLogger("bench.daemon")

PAGE_MIB = 1024 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")
HEADROOM = 1.3
ROUND_MIB = 64
CLUSTER = "bench"
CYCLE_METRIC = "kafka_txn_exporter_cycle_duration_seconds"
STAGE_METRIC = "kafka_txn_exporter_stage_duration_seconds"
CYCLES_METRIC = "kafka_txn_exporter_cycles"
SLOPE_AFTER_S = 120.0
#: The CLI's find-hanging on the warm engine: runs one after the other (median reported).
CLI_WARM_RUNS = 3


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
        name = text[text.index("(") + 1 : text.rindex(")")]
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

        producer = Producer(
            {
                "bootstrap.servers": self._bootstrap,
                "linger.ms": 0,
                "transactional.id": f"bench-commit-loop-{os.getpid()}",
                "logger": log,
            }
        )
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
    #: Resident MiB of the driver JVM's code cache (the JIT's compiled code).
    jit_code_mib: float = 0.0


@dataclass(frozen=True)
class Variant:
    """One daemon run: ``[Nx]MEMORY[+cli][+archive]`` or ``connect``."""

    name: str
    driver_memory: str = "512m"
    clusters: int = 1
    connect: bool = False
    cli: bool = False
    #: The embedded driver maps the class archive (as the image ships).
    archive: bool = False

    @classmethod
    def parse(cls, text: str) -> Variant:
        name = text.strip()
        rest, *suffixes = name.split("+")
        unknown = set(suffixes) - {"cli", "archive"}
        if unknown or not rest:
            raise ValueError(f"variant {name!r}: expected [Nx]MEMORY[+cli][+archive] or connect[+cli]")
        cli, archive = "cli" in suffixes, "archive" in suffixes
        if rest == "connect":
            if archive:
                raise ValueError(f"variant {name!r}: thin mode starts no JVM to map an archive")
            return cls(name, connect=True, cli=cli)
        count, _, memory = rest.rpartition("x")
        return cls(name, driver_memory=memory, clusters=int(count) if count else 1, cli=cli, archive=archive)

    @property
    def cluster_names(self) -> list[str]:
        return [CLUSTER] if self.clusters == 1 else [f"{CLUSTER}-{i}" for i in range(1, self.clusters + 1)]


@dataclass
class VariantResult:
    variant: Variant
    samples: list[Sample] = field(default_factory=list)
    cycle_seconds: list[float] = field(default_factory=list)
    #: Per cluster: the duration of each cycle (from the histogram's sum and count steps).
    cluster_cycles: dict[str, list[float]] = field(default_factory=dict)
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
    cli_warm_s: float = math.nan
    cli_warm_first_s: float = math.nan
    cli_warm_exit: int | None = None
    #: find-hanging --exporter: answered from the daemon's last cycle (median of the runs).
    cli_exporter_s: float = math.nan
    cli_exporter_exit: int | None = None
    #: The driver JVM's CPU seconds by thread kind (jvmstat.thread_cpu) and the cycles
    #: completed: when cycle 2 completed, and at the last sample.
    threads_steady: dict[str, float] = field(default_factory=dict)
    threads_last: dict[str, float] = field(default_factory=dict)
    cycles_steady: int = 0
    cycles_last: int = 0

    def jit_code_end_mib(self) -> float:
        return next((s.jit_code_mib for s in reversed(self.samples) if s.jit_code_mib), math.nan)

    def jvm_cpu_per_cycle(self) -> dict[str, float] | None:
        """The driver JVM's CPU seconds per cycle after cycle 2, by thread kind. Cycles are the
        first cluster's: with several clusters in the process, per round of all of them."""
        cycles = self.cycles_last - self.cycles_steady
        if cycles <= 0 or not self.threads_steady:
            return None
        return {kind: s / cycles for kind, s in cpu_delta(self.threads_steady, self.threads_last).items()}

    @property
    def driver_memory(self) -> str:
        return self.variant.name

    @property
    def steady(self) -> list[Sample]:
        return self.samples[self.steady_from :] or self.samples

    def peak(self, what: str) -> float:
        return max((value(s, what) for s in self.samples), default=0.0)

    def steady_median(self, what: str) -> float:
        return statistics.median(value(s, what) for s in self.steady) if self.samples else 0.0

    def growth_mib_per_min(self, what: str = "total") -> float:
        """Least-squares slope of RSS (``what``: see :func:`value`) after minute 2 (runs of 3
        minutes or more), else over the steady samples."""
        late = [s for s in self.samples if s.t >= SLOPE_AFTER_S]
        chosen = late if self.run_s >= SLOPE_AFTER_S + 60 else self.steady
        points = [(s.t, value(s, what)) for s in chosen]
        if len(points) < 10:
            return math.nan
        mean_t = statistics.fmean(t for t, _ in points)
        mean_v = statistics.fmean(v for _, v in points)
        den = sum((t - mean_t) ** 2 for t, _ in points)
        return 60 * sum((t - mean_t) * (v - mean_v) for t, v in points) / den if den else math.nan

    def slope_window(self) -> str:
        return "after minute 2" if self.run_s >= SLOPE_AFTER_S + 60 else "after cycle 2"

    def warm_cycle_s(self) -> float:
        return statistics.median(self.cycle_seconds[1:]) if len(self.cycle_seconds) > 1 else math.nan

    def rounds_s(self) -> list[float]:
        """Each round's seconds: its slowest cluster's cycle (all clusters' cycles of a round
        start together: the round lasts as long as its slowest cycle)."""
        cycles = list(self.cluster_cycles.values())
        return [max(c[i] for c in cycles) for i in range(min((len(c) for c in cycles), default=0))]

    def round_s(self) -> float:
        """Median over rounds 2.. of :meth:`rounds_s`."""
        rounds = self.rounds_s()[1:]
        return statistics.median(rounds) if rounds else math.nan


def value(s: Sample, what: str) -> float:
    return {
        "python": s.python_mib,
        "jvm": s.jvm_mib,
        "total": s.python_mib + s.jvm_mib,
        "jit_code": s.jit_code_mib,
    }[what]


@dataclass
class Scrape:
    cycles: int = 0
    cycle_sum: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)
    outcomes: dict[str, float] = field(default_factory=dict)
    #: Per cluster: (cycle count, cycle seconds sum).
    clusters: dict[str, tuple[int, float]] = field(default_factory=dict)


def _cluster_of(labels: dict[str, str]) -> str | None:
    """The cluster label, whatever its name (``cluster`` or the configurable one)."""
    return labels.get("kafka_cluster") or labels.get("cluster")


def scrape(port: int, first: str = CLUSTER) -> Scrape | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError):
        return None
    result = Scrape()
    counts: dict[str, int] = {}
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            cluster = _cluster_of(sample.labels)
            if cluster is None:
                continue
            if sample.name == f"{CYCLE_METRIC}_count":
                counts[cluster] = int(sample.value)
            elif sample.name == f"{CYCLE_METRIC}_sum":
                sums[cluster] = sample.value
            if cluster != first:
                continue
            if sample.name == STAGE_METRIC:
                result.stages[sample.labels["stage"]] = sample.value
            elif sample.name == f"{CYCLES_METRIC}_total":
                result.outcomes[sample.labels["result"]] = sample.value
    result.clusters = {c: (counts[c], sums.get(c, 0.0)) for c in counts}
    result.cycles, result.cycle_sum = result.clusters.get(first, (0, 0.0))
    return result


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def write_config(
    directory: Path,
    bootstrap: str,
    port: int,
    variant: Variant,
    interval_s: float,
    *,
    connect_url: str | None = None,
    cli_port: int | None = None,
    bootstraps: Sequence[str] = (),
) -> Path:
    """The daemon's config; ``bootstraps``: cluster i's bootstrap servers (default: every
    cluster on ``bootstrap``)."""
    spark: dict[str, object] = {"local_dir": str(directory / "spark")}
    if variant.connect:
        assert connect_url
        spark["connect_url"] = connect_url
    else:
        spark["driver_memory"] = variant.driver_memory
    if cli_port:
        spark["connect_server_port"] = cli_port
    config = {
        "web": {"listen_address": f"127.0.0.1:{port}"},
        "log": {"level": "info"},
        "spark": spark,
        "clusters": [
            {
                "name": name,
                "bootstrap_servers": bootstraps[i] if bootstraps else bootstrap,
                "interval": f"{interval_s}s",
                "request_timeout": f"{max(1.0, interval_s - 1)}s",
            }
            for i, name in enumerate(variant.cluster_names)
        ],
    }
    path = directory / f"config-{variant.name}.yml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    return path


def exporter_command() -> list[str]:
    """The exporter's command line, from this checkout (``PYTHONPATH`` set by bench/run.py)."""
    return [sys.executable, "-c", "import sys; from exporter.cli import main; sys.exit(main())"]


def write_class_archive(work: Path) -> Path | None:
    """``kafka-txn-exporter class-archive`` into ``work`` (None when it failed: see its log)."""
    archive = work / "spark-classes.jsa"
    with (work / "class-archive.log").open("ab") as out:
        code = subprocess.run(
            [*exporter_command(), "class-archive", "--out", str(archive)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=300,
            check=False,
        ).returncode
    if code != 0:
        progress(f"class-archive failed (exit {code}): see {work / 'class-archive.log'}")
        return None
    return archive


def time_cli_find_hanging(
    bootstrap: str,
    *,
    engine_port: int,
    log_path: Path,
    class_archive: Path | None = None,
    exporter: str | None = None,
) -> tuple[float, int]:
    """Wall seconds and exit code of ``kafka-txn-exporter find-hanging`` on the whole cluster
    (exit 1 = found). ``engine_port`` 0: no warm engine probed (the cold local fallback).
    ``class_archive``: the JVM class archive the local fallback maps (None: none).
    ``exporter``: answered from that exporter's last cycle (``--exporter``); else
    ``--fresh``: collected and classified by the command."""
    env = {**os.environ, "KAFKA_TXN_EXPORTER_SPARK_CONNECT_PORT": str(engine_port)}
    env.pop("SPARK_REMOTE", None)
    env.pop(CLASS_ARCHIVE_ENV, None)
    if class_archive is not None:
        env[CLASS_ARCHIVE_ENV] = str(class_archive)
    source = ["--exporter", exporter] if exporter else ["--fresh"]
    started = time.monotonic()
    with log_path.open("ab") as out:
        code = subprocess.run(
            [
                *exporter_command(),
                "find-hanging",
                "--bootstrap-server",
                bootstrap,
                "--max-transaction-timeout",
                "0",
                *source,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            timeout=300,
            check=False,
        ).returncode
    return time.monotonic() - started, code


def record_scrape(
    result: VariantResult, last: Scrape, current: Scrape, *, elapsed: float, java: Sequence[int]
) -> None:
    """What a scrape adds to the run: the cycles completed since ``last`` (each cluster's and
    the daemon's), the stage durations, and the start of the steady state (cycle 2)."""
    for name, (count, total) in current.clusters.items():
        before = last.clusters.get(name, (0, 0.0))
        if count > before[0]:
            per_cycle = (total - before[1]) / (count - before[0])
            result.cluster_cycles.setdefault(name, []).extend([per_cycle] * (count - before[0]))
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
            if java:
                result.threads_steady = thread_cpu(java[0])
                result.cycles_steady = current.cycles
    result.outcomes = dict(current.outcomes)


def reap_jvms(result: VariantResult, jvm_pids: set[int]) -> None:
    """Counts the Spark JVMs seen and those still alive 15 s after the daemon exited (then
    killed: an orphan JVM would skew the next variant)."""
    grace = time.monotonic() + 15
    while time.monotonic() < grace and any(alive(p) for p in jvm_pids):
        time.sleep(0.2)
    left = sorted(p for p in jvm_pids if alive(p))
    result.orphan_jvms = len(left)
    result.jvm_pids = len(jvm_pids)
    if left:
        progress(
            f"[{result.variant.name}] Spark JVM(s) {left} still alive 15 s after the daemon exited: "
            "killing them"
        )
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def run_variant(
    bootstrap: str,
    variant: Variant,
    *,
    interval_s: float,
    duration_s: float,
    min_cycles: int,
    max_duration_s: float,
    work: Path,
    connect_url: str | None = None,
    class_archive: Path | None = None,
    bootstraps: Sequence[str] = (),
) -> VariantResult:
    """One daemon run; ``class_archive``: the archive a ``+archive`` variant maps;
    ``bootstraps``: one cluster each (default: every cluster on ``bootstrap``)."""
    if variant.archive and class_archive is None:
        raise ValueError(f"variant {variant.name}: no class archive was written")
    port = free_port()
    cli_port = free_port() if variant.cli and not variant.connect else None
    config = write_config(
        work,
        bootstrap,
        port,
        variant,
        interval_s,
        connect_url=connect_url,
        cli_port=cli_port,
        bootstraps=bootstraps,
    )
    result = VariantResult(variant, log_path=str(work / f"daemon-{variant.name}.log"))
    first = variant.cluster_names[0]
    cmd = [*exporter_command(), "run", "--config.file", str(config)]
    env = {k: v for k, v in os.environ.items() if k != CLASS_ARCHIVE_ENV}
    if variant.archive:
        env[CLASS_ARCHIVE_ENV] = str(class_archive)
    progress(f"[{variant.name}] starting: {' '.join(cmd)}")
    with open(result.log_path, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
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
            current = scrape(port, first)
            if current is not None:
                if math.isnan(result.ready_s) and ready(port):
                    result.ready_s = time.monotonic() - started
                record_scrape(result, last, current, elapsed=elapsed, java=java)
                last = current
            # Every descendant counts: the JVM, and Python workers it may fork (pyspark.daemon).
            result.samples.append(
                Sample(
                    elapsed,
                    rss_mib(proc.pid),
                    sum(rss_mib(p) for p in children),
                    last.cycles,
                    sum(code_cache_mib(p) for p in java),
                )
            )
            if java and result.threads_steady:
                threads = thread_cpu(java[0])
                if threads:  # empty once the JVM is gone: keep the last reading
                    result.threads_last, result.cycles_last = threads, last.cycles
            result.python_cpu_s = cpu_seconds(proc.pid) or result.python_cpu_s
            result.jvm_cpu_s = sum(cpu_seconds(p) for p in java) or result.jvm_cpu_s
            # Every 0.2 s until the first cycle is published (the first-cycle figure), then 1/s.
            time.sleep(max(0.0, (1.0 if last.cycles else 0.2) - (time.monotonic() - tick)))
        result.run_s = time.monotonic() - started
        if cli_port and proc.poll() is None:
            # Three runs one after the other: the first is also the first Connect session the
            # daemon's driver serves (its Connect code paths still cold), reported beside.
            runs = [
                time_cli_find_hanging(bootstrap, engine_port=cli_port, log_path=work / "cli-warm.log")
                for _ in range(CLI_WARM_RUNS)
            ]
            result.cli_warm_first_s = runs[0][0]
            result.cli_warm_s = statistics.median(s for s, _ in runs)
            result.cli_warm_exit = max(code for _, code in runs)
            progress(
                f"[{variant.name}] CLI find-hanging on the warm engine: "
                + ", ".join(f"{s:.2f} s (exit {code})" for s, code in runs)
            )
            answered = [
                time_cli_find_hanging(
                    bootstrap,
                    engine_port=cli_port,
                    log_path=work / "cli-exporter.log",
                    exporter=f"http://127.0.0.1:{port}",
                )
                for _ in range(CLI_WARM_RUNS)
            ]
            result.cli_exporter_s = statistics.median(s for s, _ in answered)
            result.cli_exporter_exit = max(code for _, code in answered)
            progress(
                f"[{variant.name}] CLI find-hanging --exporter (the daemon's last cycle): "
                + ", ".join(f"{s:.2f} s (exit {code})" for s, code in answered)
            )
    finally:
        stopping = time.monotonic()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            result.exit_code = proc.wait(timeout=60)
            result.stop_s = time.monotonic() - stopping
        except subprocess.TimeoutExpired:
            progress(f"[{variant.name}] the daemon ignored SIGTERM for 60 s: killing its group")
            os.killpg(proc.pid, signal.SIGKILL)
            result.exit_code = proc.wait(timeout=10)
        reap_jvms(result, jvm_pids)
    progress(
        f"[{variant.name}] {len(result.cycle_seconds)} cycles in {result.run_s:.0f} s, "
        f"peak total {result.peak('total'):.0f} MiB, exit {result.exit_code}"
    )
    return result


# -- a Spark Connect server from the pyspark wheel (thin mode) ----------------------------------


@contextlib.contextmanager
def connect_server(work: Path) -> Iterator[tuple[str, int]]:
    """A Spark Connect server on 127.0.0.1 (local[2], 512m driver, the exporter's lean JVM
    flags and small-data settings); yields (URL, pid of its JVM)."""
    import pyspark

    from exporter.pipeline.session import LEAN_JVM_OPTIONS, LOCAL_DEFAULTS

    home = Path(pyspark.__file__).resolve().parent
    port = free_port()
    conf = {
        **LOCAL_DEFAULTS,
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.local.dir": str(work / "connect"),
    }
    cmd = [
        str(home / "bin" / "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master",
        "local[2]",
        "--driver-memory",
        "512m",
        "--driver-java-options",
        " ".join(LEAN_JVM_OPTIONS),
        *(a for k, v in conf.items() for a in ("--conf", f"{k}={v}")),
        "spark-internal",
    ]
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_CONNECT_MODE": "0",
        "MALLOC_ARENA_MAX": "2",
    }
    env.pop("SPARK_REMOTE", None)
    with (work / "connect-server.log").open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 300
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the Spark Connect server did not start: see {work / 'connect-server.log'}"
                )
            time.sleep(0.5)
        java = [p for p, name in descendants(proc.pid).items() if name == "java"] or [proc.pid]
        progress(f"Spark Connect server up on 127.0.0.1:{port}")
        yield f"sc://127.0.0.1:{port}", java[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


# -- report --------------------------------------------------------------------------------------


def recommended_mib(peak: float) -> int:
    return int(math.ceil(peak * HEADROOM / ROUND_MIB) * ROUND_MIB)


def fmt(x: float, spec: str = ".1f") -> str:
    return "n/a" if math.isnan(x) else format(x, spec)


@dataclass
class Extra:
    """Figures measured outside the daemon runs."""

    find_hanging_s: float = math.nan
    find_hanging_runs: int = 0
    cli_cold_s: float = math.nan
    cli_cold_exit: int | None = None
    #: The same with the class archive of ``kafka-txn-exporter class-archive`` mapped.
    cli_cold_archive_s: float = math.nan
    cli_cold_archive_exit: int | None = None
    connect_server_rss_mib: float = math.nan


def print_report(
    results: Sequence[VariantResult],
    brokers: int,
    partitions: int,
    interval_s: float,
    traffic: str,
    extra: Extra,
) -> None:
    print()
    print(
        f"== Daemon: kafka-txn-exporter run, {brokers} broker(s), {partitions} partitions, "
        f"interval {interval_s:g}s =="
    )
    print(f"traffic: {traffic}")
    print()
    names = [r.variant.name for r in results]
    width = max(16, *(len(n) + 2 for n in names))

    def row(label: str, values: Sequence[str]) -> None:
        print(f"{label:<44}" + "".join(f"{v:>{width}}" for v in values))

    row("variant", names)
    row("clusters in the process", [str(r.variant.clusters) for r in results])
    row("Spark", ["Connect" if r.variant.connect else f"embedded {r.variant.driver_memory}" for r in results])
    row("run (s)", [fmt(r.run_s, ".0f") for r in results])
    row("RSS samples (1/s)", [str(len(r.samples)) for r in results])
    row("Spark JVM seen after (s)", [fmt(r.jvm_seen_s) for r in results])
    row("first cycle published after (s)", [fmt(r.first_cycle_at_s) for r in results])
    row("/readyz 200 after (s)", [fmt(r.ready_s) for r in results])
    print("(RSS 'jvm' = every descendant of the daemon: the Spark JVM and any Python worker)")
    for what in ("python", "jvm", "total"):
        row(f"peak RSS {what} (MiB)", [fmt(r.peak(what), ".0f") for r in results])
    for what in ("python", "jvm", "total"):
        row(
            f"steady RSS {what} (MiB, median after cycle 2)",
            [fmt(r.steady_median(what), ".0f") for r in results],
        )
    row("RSS slope (MiB/min)", [fmt(r.growth_mib_per_min(), "+.1f") for r in results])
    row("  slope window", [r.slope_window() for r in results])
    for what, label in (("python", "python"), ("jvm", "JVM"), ("jit_code", "  of it the JIT's code")):
        row(f"  {label} (MiB/min)", [fmt(r.growth_mib_per_min(what), "+.1f") for r in results])
    row("JIT code cache at the end (MiB)", [fmt(r.jit_code_end_mib(), ".0f") for r in results])
    row(
        "cycles (complete/partial/failed), 1st cluster",
        [
            "/".join(str(int(r.outcomes.get(k, 0))) for k in ("complete", "partial", "failed"))
            for r in results
        ],
    )
    row("cycle 1 (s)", [fmt(r.cycle_seconds[0], ".2f") if r.cycle_seconds else "n/a" for r in results])
    row("cycles 2.. median (s)", [fmt(r.warm_cycle_s(), ".2f") for r in results])
    row(
        "cycles 2.. max (s)",
        [fmt(max(r.cycle_seconds[1:]), ".2f") if len(r.cycle_seconds) > 1 else "n/a" for r in results],
    )
    row("round, slowest cluster, median (s)", [fmt(r.round_s(), ".2f") for r in results])
    stages = sorted({s for r in results for s in r.stages})
    for stage in stages:
        row(
            f"  stage {stage} median (s)",
            [
                fmt(statistics.median(r.stages[stage]), ".3f") if r.stages.get(stage) else "n/a"
                for r in results
            ],
        )
    row("CPU python (s) / run", [fmt(r.python_cpu_s, ".0f") for r in results])
    row("CPU Spark JVM (s) / run", [fmt(r.jvm_cpu_s, ".0f") for r in results])
    per_cycle = [r.jvm_cpu_per_cycle() for r in results]
    totals = [fmt(sum(c.values()), ".2f") if c else "n/a" for c in per_cycle]
    row("JVM CPU per cycle after cycle 2 (s)", totals)
    for kind in KINDS:
        cells = [fmt(c[kind], ".2f") if c else "n/a" for c in per_cycle]
        row(f"  {kind} (s)", cells)
    row(
        "avg cores used (python+JVM)",
        [fmt((r.python_cpu_s + r.jvm_cpu_s) / r.run_s, ".2f") if r.run_s else "n/a" for r in results],
    )
    row(
        f"CLI find-hanging, warm engine (s, median of {CLI_WARM_RUNS})",
        [fmt(r.cli_warm_s, ".2f") for r in results],
    )
    row("CLI find-hanging, warm engine, first run (s)", [fmt(r.cli_warm_first_s, ".2f") for r in results])
    row(
        f"CLI find-hanging --exporter (s, median of {CLI_WARM_RUNS})",
        [fmt(r.cli_exporter_s, ".2f") for r in results],
    )
    row("SIGTERM to exit (s)", [fmt(r.stop_s) for r in results])
    row("exit code", [str(r.exit_code) for r in results])
    row("Spark JVMs seen / alive 15 s after exit", [f"{r.jvm_pids}/{r.orphan_jvms}" for r in results])
    print()
    print(
        f"Kafka's find-hanging over the {brokers} broker(s) ({extra.find_hanging_runs} runs, JVM "
        f"start included): {fmt(extra.find_hanging_s, '.2f')} s"
    )
    if not math.isnan(extra.cli_cold_s):
        print(
            f"CLI find-hanging cold (local Spark started for the command): "
            f"{extra.cli_cold_s:.2f} s (exit {extra.cli_cold_exit})"
        )
    if not math.isnan(extra.cli_cold_archive_s):
        print(
            f"CLI find-hanging cold with the class archive mapped: "
            f"{extra.cli_cold_archive_s:.2f} s (exit {extra.cli_cold_archive_exit})"
        )
    if not math.isnan(extra.connect_server_rss_mib):
        print(
            f"Spark Connect server JVM (thin mode's shared engine), RSS at the end: "
            f"{extra.connect_server_rss_mib:.0f} MiB"
        )
    print()
    for r in results:
        print(f"cycle durations [{r.variant.name}] (s): " + " ".join(f"{s:.2f}" for s in r.cycle_seconds))
    print()
    print(f"Recommended Kubernetes memory (peak total RSS x {HEADROOM}, rounded up to {ROUND_MIB} MiB):")
    for r in results:
        mib = recommended_mib(r.peak("total"))
        print(
            f"  {r.variant.name}: resources.requests.memory={mib}Mi, "
            f"resources.limits.memory={mib}Mi   (peak {r.peak('total'):.0f} MiB, "
            f"steady {r.steady_median('total'):.0f} MiB)"
        )
    print("  CPU: see 'avg cores used' (the cycle is bursty; the Spark jobs use up to 2 cores).")
    for r in results:
        if r.exit_code != 0 or not r.cycle_seconds:
            print(f"daemon log [{r.variant.name}] (tail):")
            with contextlib.suppress(OSError):
                print("\n".join(Path(r.log_path).read_text(errors="replace").splitlines()[-30:]))
    print_figures(results, brokers, partitions, extra)


def figure(name: str, value: float) -> None:
    if not math.isnan(value):
        print(f"FIGURE\t{name}\t{value:.4g}")


def print_figures(results: Sequence[VariantResult], brokers: int, partitions: int, extra: Extra) -> None:
    """Machine-readable figures for bench/run.py's targets table."""
    where = f"{brokers}b_{partitions}p"
    one = [r for r in results if r.variant.clusters == 1 and not r.variant.connect]
    single = [r for r in one if not r.variant.archive]
    archived = [r for r in one if r.variant.archive]
    many = [r for r in results if r.variant.clusters > 1]
    thin = [r for r in results if r.variant.connect]
    print()
    if single:
        r = single[0]
        figure(f"daemon_cycle_s@{where}", r.warm_cycle_s())
        figure(f"find_hanging_s@{where}", extra.find_hanging_s)
        figure(f"daemon_vs_find_hanging@{where}", r.warm_cycle_s() / extra.find_hanging_s)
        figure(f"first_cycle_s@{where}", r.first_cycle_at_s)
        figure(f"rss_peak_mib@{where}", r.peak("total"))
        figure(f"rss_slope_mib_min@{where}", r.growth_mib_per_min())
        figure(f"rss_slope_jit_code_mib_min@{where}", r.growth_mib_per_min("jit_code"))
        figure(f"run_s@{where}", r.run_s)
    if archived:
        # As the image ships: the driver maps the class archive the Dockerfile writes.
        r = archived[0]
        figure(f"first_cycle_archive_s@{where}", r.first_cycle_at_s)
        figure(f"daemon_cycle_archive_s@{where}", r.warm_cycle_s())
        figure(f"rss_peak_archive_mib@{where}", r.peak("total"))
        figure(f"rss_slope_archive_mib_min@{where}", r.growth_mib_per_min())
        figure(f"rss_slope_archive_jit_code_mib_min@{where}", r.growth_mib_per_min("jit_code"))
    warm = [r for r in results if not math.isnan(r.cli_warm_s)]
    if warm:
        figure("cli_warm_s", warm[0].cli_warm_s)
        figure("cli_warm_first_s", warm[0].cli_warm_first_s)
        figure("cli_exporter_s", warm[0].cli_exporter_s)
    figure("cli_cold_s", extra.cli_cold_s)
    figure("cli_cold_archive_s", extra.cli_cold_archive_s)
    if not math.isnan(extra.cli_cold_s) or warm:
        figure("kafka_find_hanging_s", extra.find_hanging_s)
    if many and single:
        figure(
            f"clusters{many[0].variant.clusters}_round_vs_one@{where}",
            many[0].round_s() / single[0].warm_cycle_s(),
        )
    if thin:
        figure("thin_rss_mib", thin[0].peak("total"))


@contextlib.contextmanager
def work_dir(keep: bool) -> Iterator[Path]:
    if keep:
        yield Path(tempfile.mkdtemp(prefix="kte-bench-daemon-"))
        return
    with tempfile.TemporaryDirectory(prefix="kte-bench-daemon-") as d:
        yield Path(d)


def kafka_find_hanging(cluster: KafkaCluster) -> tuple[float, int]:
    """Wall seconds of Kafka's find-hanging over every broker (one JVM per broker)."""
    tools = TransactionsCommand(cluster.dist, cluster.bootstrap_servers)
    started = time.monotonic()
    for broker_id in sorted(cluster.nodes):
        tools.find_hanging(broker_id=broker_id, max_transaction_timeout_min=0)
    return time.monotonic() - started, len(cluster.nodes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--variants", default="512m,1g", help="daemon runs: [Nx]MEMORY[+cli] or connect (default 512m,1g)"
    )
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=3000)
    parser.add_argument("--interval", type=float, default=5.0, help="cycle interval, seconds")
    parser.add_argument(
        "--duration",
        type=float,
        default=60.0,
        help="minimum run per variant, seconds (and at least --min-cycles)",
    )
    parser.add_argument("--min-cycles", type=int, default=5)
    parser.add_argument("--max-duration", type=float, default=120.0, help="hard cap per variant, seconds")
    parser.add_argument(
        "--cli", action="store_true", help="also time the CLI's find-hanging cold (no warm engine)"
    )
    parser.add_argument("--keep", action="store_true", help="keep configs and daemon logs")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-ups: stop brokers
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid>: every thread's stack to stderr
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(threadName)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    if args.partitions < 120:
        parser.error("--partitions must be >= 120")
    try:
        variants = [Variant.parse(v) for v in args.variants.split(",") if v.strip()]
    except ValueError as e:
        parser.error(str(e))
    started = time.monotonic()
    results: list[VariantResult] = []
    extra = Extra()
    with work_dir(args.keep) as work, KafkaCluster(brokers=args.brokers) as cluster:
        bootstrap = cluster.bootstrap_servers
        progress(f"{args.brokers} broker(s) up in {time.monotonic() - started:.1f} s ({bootstrap})")
        cluster.create_topic("bench-txn", partitions=100, timeout_s=120)
        cluster.create_topic(
            "bench-bulk", partitions=args.partitions - 100, replication_factor=1, timeout_s=600
        )
        partial, settle_s, first_error = settle(bootstrap, timeout_s=300)
        progress(
            f"{args.partitions} partitions created; settled after {partial} partial "
            f"cycle(s) in {settle_s:.1f} s {first_error}"
        )
        traffic = make_traffic(cluster, "bench-txn", open_timeout_ms=900_000)
        progress(f"traffic: {traffic.describe()}")
        extra.find_hanging_s, extra.find_hanging_runs = kafka_find_hanging(cluster)
        progress(f"Kafka's find-hanging: {extra.find_hanging_s:.2f} s")
        if args.cli:
            extra.cli_cold_s, extra.cli_cold_exit = time_cli_find_hanging(
                bootstrap, engine_port=0, log_path=work / "cli-cold.log"
            )
            progress(f"CLI find-hanging cold: {extra.cli_cold_s:.2f} s (exit {extra.cli_cold_exit})")
        archive = write_class_archive(work) if args.cli or any(v.archive for v in variants) else None
        if archive is None and any(v.archive for v in variants):
            progress("no class archive: the +archive variants are skipped")
            variants = [v for v in variants if not v.archive]
        if args.cli and archive is not None:
            extra.cli_cold_archive_s, extra.cli_cold_archive_exit = time_cli_find_hanging(
                bootstrap, engine_port=0, log_path=work / "cli-cold.log", class_archive=archive
            )
            progress(
                f"CLI find-hanging cold, class archive mapped: {extra.cli_cold_archive_s:.2f} s "
                f"(exit {extra.cli_cold_archive_exit})"
            )
        try:
            with CommitLoop(bootstrap, "bench-txn", range(20, 100)) as loop:
                for variant in variants:
                    common = {
                        "interval_s": args.interval,
                        "duration_s": args.duration,
                        "min_cycles": args.min_cycles,
                        "max_duration_s": args.max_duration,
                        "work": work,
                    }
                    if variant.connect:
                        with connect_server(work) as (url, server_pid):
                            results.append(run_variant(bootstrap, variant, connect_url=url, **common))
                            extra.connect_server_rss_mib = rss_mib(server_pid)
                    else:
                        results.append(run_variant(bootstrap, variant, class_archive=archive, **common))
            description = (
                f"{traffic.describe()}; during the runs a producer committed "
                f"{loop.committed} small transactions (1/s), {loop.failures} failed"
            )
        finally:
            traffic.close()
        print_report(results, args.brokers, args.partitions, args.interval, description, extra)
        if args.keep:
            print(f"work dir kept: {work}")
    print(f"\ndaemon_memory finished in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
