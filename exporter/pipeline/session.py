"""The Spark session the pipeline runs on.

Three deployments, chosen by config alone:

* embedded local mode (``master: local[2]``, the default): a JVM started by PySpark inside
  the exporter's process tree, sized and tuned for small data (a snapshot is kilobytes to a
  few MB): see :data:`LOCAL_DEFAULTS` and :data:`LEAN_JVM_OPTIONS`;
* a standalone/YARN/Kubernetes master (``master: spark://HOST:PORT`` ...);
* Spark Connect (``connect_url: sc://HOST:PORT``): no local JVM at all. The pipeline only uses
  the DataFrame API, so it runs unchanged there.

The session is expensive to start (seconds) and cheap to reuse: the daemon creates it once
and passes it to every cycle; :meth:`SparkSession.builder.getOrCreate` also returns the
already active session when called twice in one process.

A local session whose JVM died or hangs is torn down with :func:`kill_local` (SIGKILL by pid,
then PySpark's process-wide state is reset) so that :func:`spark_session` can start a new one
in the same process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from pyspark.sql import DataFrame, SparkSession

from exporter.config import SparkConfig, is_secret_spark_setting
from exporter.logs import JVM_LOGGER, jvm_line_level
from exporter.pipeline.class_archive import archive_options, mapped_archive, refuse_archive

log = logging.getLogger(__name__)
LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")

#: The smallest ``spark.driver_memory`` Spark's memory manager accepts: it reserves 300 MiB of
#: the heap and refuses to start below 1.5 x that (``Runtime.maxMemory()`` of a 512m heap is
#: about 491 MiB with the serial collector). ``exporter.config`` validates against it.
MIN_DRIVER_MEMORY_MB = 512

#: The Spark Connect plugin: loaded into the embedded driver when ``connect_server_port`` is
#: set, so that the CLI (``find-hanging``, ``abort``) runs on the daemon's warm JVM.
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"

#: JVM flags of the embedded driver. The heap holds a few MB of snapshot at a time, but
#: Spark's defaults size everything for a cluster node. Measured with bench/daemon_memory.py
#: (bench/results/daemon_memory.md):
#:
#: * the serial collector: no concurrent GC threads and no G1 remembered sets (tens of MiB of
#:   native memory), and with the free-ratio bounds it shrinks the committed heap after a full
#:   collection instead of keeping the high-water mark (tighter bounds, 10/30, were measured
#:   to spend a third of the JVM's CPU in full collections);
#: * a young generation of at most 48 MiB: by default a third of the heap, which the heap
#:   grows to fill between collections (JVM RSS 849 -> 752 MiB at 10k partitions, same speed);
#: * a bounded code cache and metaspace (the JIT's code and Spark's own ~23,500 classes; the
#:   embedded driver generates code only for the group family's aggregation, a dozen classes
#:   compiled once: see LOCAL_DEFAULTS and compiled_leaf);
#: * two JIT compiler threads (a 2-core pod), 512 KiB thread stacks (Spark starts ~60 threads,
#:   and its cached pools add one per broadcast or block removal, idle ones ending after 60 s);
#: * no cache of large temporary direct buffers: a thread doing I/O from a heap buffer (a
#:   socket that serves a round's result to Python, a file) copies it through a direct
#:   buffer, which the JDK keeps for that thread at the size of its largest I/O so far. At
#:   1M partitions those were ~25-35 MiB of native memory (NMT "Other": 47-60 MiB, 25 with
#:   the cap); above 256 KiB a buffer is now freed after its I/O;
#: * exit on OutOfMemoryError: a JVM in that state is useless; the daemon's supervision
#:   notices the death and starts a new session;
#: * no bytecode verification of the classpath's classes (Spark's jars from the pyspark
#:   package, which the JVM trusts like its own classes, never verified either; classes
#:   mapped from a class archive are not verified at run time anyway, and ``class-archive``
#:   writes its archive with these flags too). A fresh driver loads thousands of
#:   them before its first cycle is out, and on 2 cores that start is CPU-bound (the JVM kept
#:   1.7 cores busy through the first computation, half of it the JIT compilers): from the
#:   process's start to its first computation's end, 11.0-11.3 s against 11.7-13.0 s with
#:   verification (3 pairs alternated, bench/results/first_cycle.md). An operator who adds
#:   jars of their own can turn it back on: ``-XX:+BytecodeVerificationRemote`` in
#:   ``spark.driver.extraJavaOptions`` comes last and wins.
LEAN_JVM_OPTIONS: tuple[str, ...] = (
    "-XX:+UseSerialGC",
    "-XX:MaxNewSize=48m",
    "-XX:MinHeapFreeRatio=20",
    "-XX:MaxHeapFreeRatio=40",
    "-Xms64m",
    "-XX:ReservedCodeCacheSize=96m",
    "-XX:MaxMetaspaceSize=256m",
    "-XX:CICompilerCount=2",
    "-Xss512k",
    "-Djdk.nio.maxCachedBufferSize=262144",
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:+UnlockDiagnosticVMOptions",
    "-XX:-BytecodeVerificationRemote",
)

#: Extra JVM flags for a short-lived session (the CLI's cold fallback): C1 only, which halves
#: the JIT's CPU at start-up; the warm daemon keeps the optimising compiler.
SHORT_LIVED_JVM_OPTIONS: tuple[str, ...] = ("-XX:TieredStopAtLevel=1",)

#: The embedded driver's optimising JIT compiler (C2) runs at the lowest priority, nice 19
#: (:func:`background_optimiser`). The first cycle is CPU-bound on 2 cores and C2 took a
#: third of the JVM's CPU there; at nice 19 it compiles on a core the planning threads leave
#: idle: the daemon's first cycle was published after 12.2 s against 13.2 s (medians of 11
#: pairs alternated on a shared host, sooner in 8 of them).
#: C1, the quick compiler, keeps its priority: a large round's generated classes run as
#: bytecode until C1 compiles them (with every compiler at nice 19, a first round of 20 x 10k
#: partitions took 5.0 s against 3.7 s). Nice values weigh the threads of one cgroup (a
#: container, a systemd service): C2 waits for this process's own busy threads, not for the
#: node's other work. The CLI's short-lived driver runs C1 alone: nothing to lower there.
#: Measured: bench/results/first_cycle.md.
OPTIMISER_THREAD = "C2 CompilerThre"  # its name in /proc, cut at 15 characters
OPTIMISER_NICE = 19

#: Runtime SQL settings that give a cycle its plan shape, on every deployment (sent to a
#: Spark Connect server by the client too): every table is one partition
#: (``tables.one_partition``), so no join is broadcast (a broadcast is a Spark job of its
#: own), and a join of one-partition sides is kept in place while the planner's estimate of
#: their size stays under ``maxSinglePartitionBytes`` (128m by default). That estimate is the
#: product of a join's sides, so after two joins of a 10k-partition snapshot it passed 128m
#: and both sides were shuffled; raised, only the deepest joins of the classification still
#: pass it. A 10k-partition cycle runs as one job of 6 stages instead of 8 jobs, 16 stages
#: and 46 tasks (bench/results/pipeline.md, the plan's shape).
#: No constraint propagation: the optimiser would derive every join's and filter's
#: constraints (the cluster, the topic and the partition of each side, equal to each other) to
#: infer filters that a table already in memory gains nothing from; a warm 10k-partition cycle
#: took 1.07 s without against 1.16 s with it (medians of 10, alternated in one session).
PLAN_DEFAULTS: Mapping[str, str] = {
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.maxSinglePartitionBytes": str(2**62),
    "spark.sql.constraintPropagation.enabled": "false",
}

#: Settings for a snapshot-sized workload in local mode. ``SparkConfig.conf`` overrides them.
LOCAL_DEFAULTS: Mapping[str, str] = {
    **PLAN_DEFAULTS,
    # A cycle's tables are small: 200 shuffle partitions would mean 200 tiny tasks per stage.
    # One partition per shuffle and no adaptive re-planning: measured with
    # bench/pipeline_bench.py, half the cycle time of 2 partitions with AQE at 1k-10k partitions.
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "2",
    "spark.sql.adaptive.enabled": "false",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.eventLog.enabled": "false",
    "spark.sql.catalogImplementation": "in-memory",  # no Hive metastore, no derby files
    "spark.sql.session.timeZone": "UTC",
    # The embedded driver only talks to itself: never depend on the host name resolving.
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    # Even without the UI, Spark keeps every finished job, stage, task and SQL execution in
    # its in-memory status store (1000 jobs, 100000 tasks by default): a daemon running a few
    # jobs per cycle would grow its heap for hours. Keep a handful.
    "spark.ui.retainedJobs": "20",
    "spark.ui.retainedStages": "20",
    "spark.ui.retainedTasks": "200",
    "spark.ui.retainedDeadExecutors": "2",
    "spark.sql.ui.retainedExecutions": "10",
    "spark.ui.dagGraph.retainedRootRDDs": "20",
    # Cached frames and broadcasts of finished cycles are cleaned when the driver collects
    # them: collect every few minutes, not every 30.
    "spark.cleaner.periodicGC.interval": "3min",
    # Execution + storage share of the heap after Spark's 300 MiB reserve. The snapshot's
    # cached frames are small; the rest of the heap is for planning and the Arrow hand-over.
    "spark.memory.fraction": "0.5",
    "spark.memory.storageFraction": "0.3",
    # Every hash join's build side, hash aggregation and sort of a task takes its memory a
    # page at a time, and a cycle's plan is one task (tables.one_partition) that holds all of
    # them at once. Spark sizes a page from the execution pool (4 MiB with the 512m driver),
    # so a cycle with consumer groups took ~50 MiB of a ~67-95 MiB pool for tables of a few
    # hundred rows, and two cycles at once (clusters in parallel, or a cycle beside a stage of
    # another) failed with UNABLE_TO_ACQUIRE_MEMORY: three clusters' cycles with groups on one
    # session failed in three runs of three. With 1 MiB pages: none failed, and one cycle of
    # those fits in a pool a third the size (tests/integration/test_spark_memory.py).
    "spark.buffer.pageSize": "1m",
    # No code generation: a cycle's tables are thousands of rows, not billions, and Spark's
    # interpreted operators handle them faster than it compiles the generated classes.
    # Generated code inlines literals, so the cycle's clock made every warm cycle compile 5
    # new classes (never reused: metaspace grew ~0.3 MiB a cycle until a full collection) and
    # the first cycle ~140; without it nothing is compiled after start and warm cycles are
    # faster (bench/results/pipeline.md). One step without the clock runs compiled in a
    # session of its own (compiled_leaf): the group family's aggregation of the offsets.
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    # A large round runs compiled (large_round): its plan is ~260 generated classes, and
    # Spark's cache of compiled classes keeps 100 by default, so every round compiled ~170 of
    # them again (3.4-3.6 s a round of 10 x 10k partitions with 500, 4.7-5.8 s with 100).
    "spark.sql.codegen.cache.maxEntries": "500",
    # Interpreted, an expression used twice in a projection (the group family's "committed
    # offset at the LSO", three times) is shared through a cache that every row clears and
    # fills again: a fifth of the executor's samples at 1000 groups x 100 partitions, more
    # than evaluating the cheap expressions twice (bench/results/pipeline.md).
    "spark.sql.subexpressionElimination.enabled": "false",
    # PySpark 4 records the Python call site of every column function for error messages,
    # at the cost of four or five extra round trips to the JVM per call: about 5,800 of a
    # cycle's 8,900 round trips, 0.3 s of its plan building (bench/pipeline_bench.py).
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}

#: The settings :func:`compiled_leaf`'s session changes.
CODEGEN_CONF: Mapping[str, str] = {
    "spark.sql.codegen.wholeStage": "true",
    "spark.sql.codegen.factoryMode": "FALLBACK",
}

#: Settings for a remote master: the workload is still small.
CLUSTER_DEFAULTS: Mapping[str, str] = {
    **PLAN_DEFAULTS,
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.catalogImplementation": "in-memory",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.codegen.cache.maxEntries": "1000",
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}

#: The Spark setting that overrides ``tables.FILE_MIN_ROWS`` (the fewest rows of an input
#: table that leaves the plan: a Parquet file on an embedded JVM, a checkpoint on a remote
#: master or Spark Connect) for a session.
FILE_MIN_ROWS_CONF = "spark.kafkaTxnExporter.handoverFileMinRows"
#: That bound for a session that runs one computation (the CLI's local fallback). On a fresh
#: JVM the first file costs the Parquet reader's start (classes loaded, code interpreted): the
#: CLI's one cold ``find-hanging`` computation at 3000 / 10k / 30k / 100k partitions
#: (bench/pipeline_bench.py's snapshot) took 6.6-7.7 / 6.1-6.6 / 6.2 / 7.7 s with files and
#: 5.6-6.2 / 5.3-5.6 / 5.9 / 8.3 s with every table in the plan.
SHORT_LIVED_FILE_MIN_ROWS = 30_000

#: Environment of the embedded JVM: glibc gives each thread that allocates its own 64 MiB
#: malloc arena; Spark's ~60 threads make that hundreds of MiB of address space and tens of
#: MiB of RSS. Two arenas are plenty for a driver that does little native allocation.
LOCAL_JVM_ENV: Mapping[str, str] = {"MALLOC_ARENA_MAX": "2"}

_SIZE = re.compile(r"^(\d+)([kmgt])$")
_SIZE_MB = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}


def size_mb(size: str) -> float:
    """A JVM size such as ``512m`` or ``1g`` in MiB (ValueError when it is not one)."""
    m = _SIZE.match(size.strip().lower())
    if not m:
        raise ValueError(f"{size!r} is not a JVM size such as 512m or 1g")
    return int(m.group(1)) * _SIZE_MB[m.group(2)]


def is_local_master(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def is_embedded(config: SparkConfig) -> bool:
    """True when the pipeline's JVM is a child of this process (local master, no Connect)."""
    return config.connect_url is None and is_local_master(config.master)


def java_options(config: SparkConfig, *, short_lived: bool = False) -> str:
    """``spark.driver.extraJavaOptions`` of the embedded driver: ours, then the operator's
    (given in ``conf``; for a flag given twice the JVM takes the last one)."""
    options = [f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}", *LEAN_JVM_OPTIONS, *archive_options(config)]
    if short_lived:
        options += SHORT_LIVED_JVM_OPTIONS
    own = config.conf.get("spark.driver.extraJavaOptions")
    if own:
        options.append(own)
    return " ".join(options)


def session_conf(config: SparkConfig, *, short_lived: bool = False) -> dict[str, str]:
    """The Spark settings :func:`spark_session` applies (defaults, then the config's ``conf``)."""
    if config.connect_url:
        # Static settings (UI, memory, catalog) belong to the Connect server; only runtime
        # settings are sent: the plan's shape, then the operator's own.
        return {**PLAN_DEFAULTS, **config.conf}
    local = is_local_master(config.master)
    conf = dict(LOCAL_DEFAULTS if local else CLUSTER_DEFAULTS)
    conf["spark.driver.memory"] = config.driver_memory
    if config.local_dir:
        conf["spark.local.dir"] = config.local_dir
    conf.update(config.conf)
    if local:
        conf["spark.driver.extraJavaOptions"] = java_options(config, short_lived=short_lived)
        if short_lived:
            conf.setdefault(FILE_MIN_ROWS_CONF, str(SHORT_LIVED_FILE_MIN_ROWS))
        if config.connect_server_port:
            # The daemon's warm engine, for the CLI in the same pod: loopback only.
            plugins = [p for p in conf.get("spark.plugins", "").split(",") if p]
            conf["spark.plugins"] = ",".join([*plugins, CONNECT_PLUGIN])
            conf.setdefault("spark.connect.grpc.binding.address", "127.0.0.1")
            conf["spark.connect.grpc.binding.port"] = str(config.connect_server_port)
    return conf


def spark_session(config: SparkConfig, *, short_lived: bool = False) -> SparkSession:
    """Start (or return the already running) Spark session described by ``config``.

    ``short_lived``: a session for one command (the CLI), tuned to start rather than to run.

    A classic session's settings reach its JVM on spark-submit's command line, which any
    local user reads in ``ps``: the secret ones (:func:`~exporter.config.is_secret_spark_setting`)
    go through a properties file only this process can read instead, deleted once the JVM
    has read it (:func:`secrets_file`). Spark Connect sends every setting over its channel.
    """
    conf = session_conf(config, short_lived=short_lived)
    secrets = {} if config.connect_url else {k: v for k, v in conf.items() if is_secret_spark_setting(k)}
    if config.connect_url:
        builder = SparkSession.builder.remote(config.connect_url)
        where = config.redacted_connect_url
    else:
        builder = SparkSession.builder.master(config.master).appName(config.app_name)
        where = config.master
    for key, value in conf.items():
        if key not in secrets:
            builder = builder.config(key, value)
    embedded = is_embedded(config)
    if not embedded:
        log.info("starting Spark session on %s", where)
    try:
        if embedded:
            launch_driver(driver_conf(config, short_lived=short_lived))  # unless launched early
        # The embedded driver got its secrets at launch; another classic one gets them here.
        with secrets_file({} if embedded else secrets):
            session = builder.getOrCreate()
    except Exception as e:
        archive = mapped_archive(config) if is_embedded(config) else None
        if archive is None:
            raise
        # The JVM refuses an archive of another build quietly, but crashes on a damaged one:
        # an archive may make a start faster, never make it fail.
        refuse_archive(archive, e)
        kill_local()  # whatever of that JVM is left, and PySpark's state pointing at it
        return spark_session(config, short_lived=short_lived)
    if not config.connect_url:
        # Only a classic session has a SparkContext; with Connect the server owns logging.
        session.sparkContext.setLogLevel("ERROR")
        cache_function_lookups(session)
    return session


def driver_conf(config: SparkConfig, *, short_lived: bool = False) -> dict[str, str]:
    """What ``spark-submit`` is given to launch the embedded driver described by ``config``."""
    return {
        "spark.master": config.master,
        "spark.app.name": config.app_name,
        **session_conf(config, short_lived=short_lived),
    }


#: When the current embedded driver was launched (``time.monotonic()``), None: none.
_launched_at: list[float] = []


def driver_age_s() -> float | None:
    """Seconds since the current embedded driver JVM was launched (None: not launched)."""
    return time.monotonic() - _launched_at[-1] if _launched_at else None


#: Held while this process launches a driver JVM (never around a Spark call).
_launch_lock = threading.Lock()


def launch_driver(conf: Mapping[str, str]) -> None:
    """Launch the embedded driver JVM as PySpark would (``spark-submit`` with ``conf``), unless
    one runs, but with its standard output and error on a pipe: :func:`relay_driver_output`
    logs its lines (``exporter.pipeline.jvm``), so that its start-up banner is not printed on
    the daemon's log or the CLI's stderr at the default level, and nothing of it reaches the
    CLI's standard output (a JSON document). ``getOrCreate`` then finds the gateway ready.

    The secret settings (:func:`~exporter.config.is_secret_spark_setting`) go through
    :func:`secrets_file`, never on spark-submit's command line."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    with _launch_lock:
        if SparkContext._gateway is not None:
            return
        # The embedded driver binds to loopback; without this Spark looks up the host name.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        for key, value in LOCAL_JVM_ENV.items():  # inherited by the JVM PySpark starts
            os.environ.setdefault(key, value)
        log.info("starting Spark session on %s", conf.get("spark.master", "local"))
        _launched_at[:] = [time.monotonic()]
        secrets = {k: v for k, v in conf.items() if is_secret_spark_setting(k)}
        spark_conf = SparkConf()
        for key, value in conf.items():
            if key not in secrets:
                spark_conf.set(key, value)
        with secrets_file(secrets):
            gateway = launch_gateway(  # type: ignore[no-untyped-call]
                spark_conf, popen_kwargs={"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
            )
        with SparkContext._lock:
            SparkContext._gateway = gateway
            SparkContext._jvm = gateway.jvm
    proc = getattr(gateway, "proc", None)
    if proc is not None:
        background_optimiser(proc.pid)
    if proc is not None and proc.stdout is not None:
        threading.Thread(
            target=relay_driver_output, args=(proc.stdout,), name="spark-driver-output", daemon=True
        ).start()


def background_optimiser(pid: int) -> int:
    """Lower the JVM ``pid``'s optimising compiler threads to :data:`OPTIMISER_NICE` (any
    user may lower a priority); how many it lowered. Without /proc (not Linux), none."""
    lowered = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                if (task / "comm").read_text().startswith(OPTIMISER_THREAD):
                    os.setpriority(os.PRIO_PROCESS, int(task.name), OPTIMISER_NICE)
                    lowered += 1
    if not lowered:
        log.debug("the JVM %d runs no optimising compiler thread to lower", pid)
    return lowered


def relay_driver_output(stream: IO[bytes]) -> None:
    """Log every line the driver JVM writes, at the level :func:`exporter.logs.jvm_line_level`
    gives it, until the JVM closes its end. Reading never stops early: a full pipe would
    block the JVM."""
    jvm_log = logging.getLogger(JVM_LOGGER)
    level = logging.WARNING
    with contextlib.suppress(Exception), stream:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                level = jvm_line_level(line, level)
                jvm_log.log(level, "%s", line)


#: How PySpark is told to launch spark-submit (its extra arguments; "pyspark-shell" alone
#: by default).
SUBMIT_ARGS_ENV = "PYSPARK_SUBMIT_ARGS"
_submit_lock = threading.Lock()


@contextlib.contextmanager
def secrets_file(settings: Mapping[str, str]) -> Iterator[Path | None]:
    """While a JVM is launched: ``settings`` in a properties file readable by this process
    only (mode 0600, in a directory of its own), named to spark-submit by
    ``--properties-file`` in :data:`SUBMIT_ARGS_ENV` (the file's name is on the command line,
    never its content). Deleted, and the variable restored, on leaving. Nothing without
    settings."""
    if not settings:
        yield None
        return
    with _submit_lock, tempfile.TemporaryDirectory(prefix="kte-spark-") as directory:
        path = Path(directory) / "secrets.properties"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(f"{_escape(k)}={_escape(v)}\n" for k, v in settings.items())
        before = os.environ.get(SUBMIT_ARGS_ENV)
        named = f"--properties-file {shlex.quote(str(path))}"
        os.environ[SUBMIT_ARGS_ENV] = f"{named} {before or 'pyspark-shell'}"
        try:
            yield path
        finally:
            if before is None:
                os.environ.pop(SUBMIT_ARGS_ENV, None)
            else:
                os.environ[SUBMIT_ARGS_ENV] = before


def _escape(text: str) -> str:
    """A key or value as java.util.Properties reads it back (spark-submit reads UTF-8 and
    trims the value)."""
    out = []
    for i, c in enumerate(text):
        if c in "\\=:#!" or (c == " " and i == 0):
            out.append("\\" + c)
        elif c in "\n\r\t\f":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}[c])
        else:
            out.append(c)
    return "".join(out)


#: The JVM classes a classic session reaches through py4j for every column expression and
#: DataFrame step, by the name PySpark uses (its JVM view imports their packages) and by their
#: full name: ``pyspark.sql.functions`` (``F.col``, ``F.lit``, ``F.when`` ..., and every column
#: named by a string or literal), the conversion of argument lists, Arrow input tables.
LOOKED_UP_ONCE: Mapping[str, str] = {
    "functions": "org.apache.spark.sql.functions",
    "PythonUtils": "org.apache.spark.api.python.PythonUtils",
    "PythonSQLUtils": "org.apache.spark.sql.api.python.PythonSQLUtils",
    "ClassicSparkSession": "org.apache.spark.sql.classic.SparkSession",
}


class _StaticMembers:
    """A py4j ``JavaClass`` whose static methods (and nested classes) are looked up once: the
    first lookup of a name asks the JVM, as py4j does every time, and keeps the member on this
    object. A static field is read from the JVM at every lookup, as before (its value may
    change)."""

    def __init__(self, java_class: Any) -> None:
        self._java_class = java_class

    def __getattr__(self, name: str) -> Any:
        from py4j.java_gateway import JavaClass, JavaMember

        member = getattr(self._java_class, name)
        if isinstance(member, JavaMember | JavaClass):
            setattr(self, name, member)  # found on the instance from now on: no __getattr__
        return member


def cache_function_lookups(session: SparkSession) -> None:
    """Let a classic session reach the classes of :data:`LOOKED_UP_ONCE` without reflection.

    For every ``F.col`` (and every other function, column named by a string, list of
    arguments) PySpark finds the class and then the method by name through py4j: two round
    trips to the JVM before the call itself, and py4j caches neither. A warm cycle at 10 000
    partitions of bench/pipeline_bench.py's snapshot made 3333 round trips, 964 of them such
    lookups; answered here, a cycle makes a fifth fewer round trips (bench/results/pipeline.md,
    "py4j"). The JVM calls themselves are the same ones.

    The methods are static, bound to no JVM object, and are kept on the gateway's JVM view:
    a new gateway (a restarted session) starts without them. A Connect session has no JVM
    view and is left alone."""
    context = getattr(session, "_sc", None)
    jvm = getattr(context, "_jvm", None)
    if jvm is None:
        return
    for name, fqn in LOOKED_UP_ONCE.items():
        if isinstance(vars(jvm).get(name), _StaticMembers):
            continue
        members = _StaticMembers(getattr(jvm, fqn))
        vars(jvm)[fqn] = members  # getattr(jvm, full name): pyspark.sql.functions
        vars(jvm)[name] = members  # jvm.functions.col, jvm.PythonUtils.toSeq, ...


_codegen_sessions: weakref.WeakKeyDictionary[SparkSession, SparkSession] = weakref.WeakKeyDictionary()
_codegen_lock = threading.Lock()


def compiled_leaf(spark: SparkSession, build: Callable[[SparkSession], DataFrame]) -> DataFrame:
    """``build``'s frame planned and run with whole-stage code generation, as one leaf of
    ``spark``'s plan: ``build`` is given a session of the same SparkContext with code
    generation on (:data:`CODEGEN_CONF`, made once per session), makes its large inputs
    there and returns the step; the step becomes a lazy local checkpoint, computed inside
    the round's action, which ``spark`` then reads like any other frame.

    Why a second session: the embedded driver runs interpreted (``LOCAL_DEFAULTS``) because
    generated code inlines literals, and the round's clock made every cycle compile new
    classes. A step whose plan holds no literal that changes from round to round compiles
    once and is found in Spark's code cache from then on, and compiled it runs about twice as
    fast as interpreted over many rows (the consumer-group family's aggregation of 1000
    groups x 100 partitions: bench/results/groups.md). Only that step is built here.

    ``build(spark)`` itself where it already generates code (a remote master) or no JVM
    object can be reached (Spark Connect)."""
    child = _codegen_session(spark)
    leaf = build(child).localCheckpoint(eager=False)
    return _rehome(leaf, spark)


def _codegen_session(spark: SparkSession) -> SparkSession:
    """The session of :func:`compiled_leaf` (``spark`` itself where there is none)."""
    if getattr(spark, "_sc", None) is None:
        return spark
    with _codegen_lock:
        child = _codegen_sessions.get(spark)
        if child is None and spark in _large_users:
            # A large round generates code with settings that are the round's, not the
            # session's: build there now, and decide (and remember) outside a large round.
            return spark
        if child is None:
            child = spark
            if spark.conf.get("spark.sql.codegen.wholeStage", "true") != "true":
                candidate = spark.newSession()
                for key, value in CODEGEN_CONF.items():
                    candidate.conf.set(key, value)
                try:
                    _rehome(candidate.range(0), spark)
                    child = candidate
                except Exception as e:  # a Spark without the seam: stay interpreted
                    log.warning("no code generation for the large steps: %s", str(e)[:200])
            _codegen_sessions[spark] = child
        return child


#: A round of at least this many partitions (every cluster's together) is a large round: it
#: is planned and run with :data:`LARGE_ROUND_CONF` (:func:`large_round`), its partition frame
#: is computed once (``families.partitions``) and each cluster's values are arrays
#: (``families.base.Context.value``). A fleet's round is where a cycle's tables stop being
#: small. Alternated in one process (bench/results/fleet.md, "Large rounds"): at 100 clusters
#: x 10k partitions a round took 9.1-11.3 s against 16.7-20.4 s interpreted (its one action
#: 4.4-6.4 s against 13.5-15.2 s); at 10 x 10k 3.64 s against 3.98 s; one cluster of 100k
#: partitions 3.11 s against 3.23 s. Below the bound a cycle stays as LOCAL_DEFAULTS says,
#: interpreted: a first large round compiles ~150 classes, ~100 more in the next, seconds
#: that a fresh driver's first cycle of a few thousand partitions does not need to pay.
LARGE_ROUND_PARTITIONS = 100_000

#: A large round's settings (:func:`large_round`): whole-stage code generation, and the
#: union of the round's output tables split into one task per table, so that both cores
#: of the embedded driver run them (Spark 4 makes a union of one-partition frames one
#: partition: the round's dozen tables ran as one task). At 20 x 10k partitions, 3.97 s a
#: round with the split against 4.32 s without (5 pairs alternated).
LARGE_ROUND_CONF: Mapping[str, str] = {
    **CODEGEN_CONF,
    "spark.sql.unionOutputPartitioning": "false",
}

_large_lock = threading.Lock()
#: Per session: how many large rounds run on it now, and the settings to restore when the
#: last one ends.
_large_users: weakref.WeakKeyDictionary[SparkSession, tuple[int, dict[str, str]]] = (
    weakref.WeakKeyDictionary()
)


@contextlib.contextmanager
def large_round(spark: SparkSession, large: bool) -> Iterator[None]:
    """Within the block, ``spark`` plans and runs with :data:`LARGE_ROUND_CONF` when
    ``large``; the previous settings come back when the last large round on the session
    ends. Nothing changes for a session that has them already (a remote master generates
    code by default).

    The session's own settings rather than a session of its own (as :func:`compiled_leaf`
    has): the daemon tags a round's jobs on its session and interrupts them by that tag at
    the round's deadline, and another session's jobs would not carry it. Another computation
    planned on the session meanwhile (the daemon runs one at a time) is planned the same way:
    the same results, only its speed differs."""
    if not large:
        yield
        return
    with _large_lock:
        users, saved = _large_users.get(spark, (0, {}))
        if users == 0:
            # "" is a setting the session leaves to Spark's default (or that its Spark does not
            # know: asked without a default, an older Connect server fails the round).
            saved = {key: spark.conf.get(key, None) or "" for key in LARGE_ROUND_CONF}
            for key, value in LARGE_ROUND_CONF.items():
                if saved[key] != value:
                    spark.conf.set(key, value)
        _large_users[spark] = (users + 1, saved)
    try:
        yield
    finally:
        with _large_lock:
            users, saved = _large_users[spark]
            if users == 1:
                del _large_users[spark]
                for key, value in saved.items():
                    if not value:
                        spark.conf.unset(key)
                    elif value != LARGE_ROUND_CONF[key]:
                        spark.conf.set(key, value)
            else:
                _large_users[spark] = (users - 1, saved)


def _rehome(frame: DataFrame, spark: SparkSession) -> DataFrame:
    """``frame``, made in another session of the same SparkContext, as a DataFrame of
    ``spark``: the same logical plan, analysed and planned by ``spark`` (with its settings)
    from now on. Meant for a leaf (a checkpoint), whose plan is already fixed. Through
    Spark's own constructor of a DataFrame from a plan (``classic.Dataset.ofRows``,
    ``private[sql]`` in Scala, public in the bytecode that py4j calls);
    tests/unit/test_pipeline.py checks it on the installed Spark."""
    if frame.sparkSession is spark:
        return frame
    jvm: Any = spark._jvm
    dataset = jvm.org.apache.spark.sql.classic.Dataset.ofRows(spark._jsparkSession, frame._jdf.logicalPlan())
    return DataFrame(dataset, spark)


def local_jvm_pid(session: Any) -> int | None:
    """The pid of the JVM behind a classic local session started by this process, else None.

    PySpark's launcher ``exec``s the JVM in the process it spawned, so the gateway's process
    is the JVM itself (checked: a child of ours running ``java``).
    """
    from pyspark import SparkContext

    gateway = getattr(SparkContext, "_gateway", None)
    proc = getattr(gateway, "proc", None)
    pid = getattr(proc, "pid", None)
    if not isinstance(pid, int) or getattr(session, "_sc", None) is None:
        return None
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return pid  # no /proc (not Linux): trust the gateway
    return pid if comm == "java" else None


def kill_local(pid: int | None = None) -> None:
    """Tear down a classic session whose JVM died or hangs: SIGKILL the JVM (``pid``, and the
    process PySpark launched as its gateway; also when stopped by SIGSTOP), reap it, and reset
    PySpark's process-wide state so that the next :func:`spark_session` launches a new JVM.
    Never calls into the old JVM."""
    from pyspark import SparkContext
    from pyspark.sql import SQLContext

    gateway = getattr(SparkContext, "_gateway", None)
    proc = getattr(gateway, "proc", None)
    targets = {p for p in (pid, getattr(proc, "pid", None)) if isinstance(p, int)}
    for target in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(target, signal.SIGKILL)
    if proc is not None:
        with contextlib.suppress(Exception):
            proc.wait(timeout=10)
    context = SparkContext._active_spark_context
    with SparkContext._lock:
        if context is not None:
            context._jsc = None
            server = getattr(context, "_accumulatorServer", None)
            if server is not None:
                with contextlib.suppress(Exception):
                    server.shutdown()
                    server.server_close()
                context._accumulatorServer = None  # type: ignore[assignment]
        SparkContext._active_spark_context = None
        SparkContext._gateway = None
        SparkContext._jvm = None
    if gateway is not None:
        with contextlib.suppress(Exception):
            gateway.close()
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SQLContext._instantiatedContext = None
    _launched_at.clear()


def stop(session: SparkSession | None) -> None:
    """Stop a session started by :func:`spark_session`; safe to call with ``None`` or twice."""
    if session is None:
        return
    log.info("stopping Spark session")
    session.stop()


def connect_port_answers(port: int, host: str = "127.0.0.1", timeout_s: float = 0.3) -> bool:
    """Whether something accepts TCP connections on ``host:port`` (a Connect endpoint)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False
