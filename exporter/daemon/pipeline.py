"""The Spark session of the daemon, supervised, and the one pipeline entry point.

Supervision, what :class:`PipelineRunner` guarantees:

* **Every pipeline call has a deadline** (``spark.pipeline_timeout``, default 3 times the
  shortest cluster interval but at least 60 s). The call runs on a thread of its own, tagged; past the
  deadline the caller gets :class:`PipelineTimeoutError` at once, and the runner checks the session
  with a cheap call bounded by :data:`PING_TIMEOUT_S`: a live session has the call's jobs
  interrupted (by tag); a dead or hung one is torn down.
* **A dead or hung session is torn down and rebuilt with back-off**: its JVM is killed by pid
  (embedded mode; a paused JVM is killed too), PySpark's process-wide state is reset, and the
  next call starts a new session after 1, 2, 4 ... 60 s of back-off. A Connect client session
  is closed and opened again.
* **Clusters run in parallel**: no lock is held while Spark works. One SparkSession runs jobs
  from several threads; each cluster's call is its own thread with its own deadline, so one
  cluster's slow or failing run never delays another's.
* **Stop is bounded**: :meth:`PipelineRunner.stop` tries a clean stop for
  :data:`STOP_GRACE_S` and then kills the JVM, so SIGTERM ends the process in seconds even with
  a hung JVM. A round that fails because its session is being stopped ends there, without a
  word: its clusters are not computed again one by one.
* **Health**: :meth:`PipelineRunner.health` is unhealthy when pipeline runs were attempted and
  none succeeded for ``spark.unhealthy_after_intervals`` intervals (plus the start timeout
  before the first success), or when ``spark.unhealthy_after_failed_starts`` starts failed in
  a row (an engine that cannot start, e.g. its local directory not writable): ``/healthz``
  answers 503 and Kubernetes restarts the pod. Every failed start is logged as one line
  saying why.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from exporter.config import SparkConfig
from exporter.model import ClusterSnapshot, CycleResult, PipelineMemory, PipelineSettings

if TYPE_CHECKING:
    from exporter.pipeline.rounds import ClusterRun, RoundResult

log = logging.getLogger(__name__)

#: How long the liveness probe of a session may take (one trivial call into the JVM).
PING_TIMEOUT_S = 5.0
#: How long :meth:`PipelineRunner.stop` waits for Spark to stop cleanly before killing it.
STOP_GRACE_S = 5.0
#: How long :meth:`PipelineRunner.stop` waits to kill a JVM that is still being launched.
START_KILL_WAIT_S = 1.0
#: The default per-call deadline: this many intervals, at least MIN_DEFAULT_TIMEOUT_S. The
#: deadline detects a hung session; it must not cut runs that are merely slower than the
#: interval (a loaded node): those would then never complete (the cycle deadline is separate).
DEFAULT_TIMEOUT_INTERVALS = 3
MIN_DEFAULT_TIMEOUT_S = 60.0
BACKOFF_MAX_S = 60.0

ComputeFn = Callable[..., CycleResult]
#: ``compute_round(spark, runs)``: see :mod:`exporter.pipeline.rounds`.
RoundFn = Callable[[Any, "Sequence[ClusterRun]"], "RoundResult"]
T = TypeVar("T")


class PipelineUnavailableError(RuntimeError):
    """No Spark session to run on right now (starting, restarting after a failure, stopped)."""


class PipelineTimeoutError(RuntimeError):
    """A pipeline call ran past its deadline (its jobs are interrupted or its JVM killed)."""


#: A Java exception's line in a py4j error (``: java.io.IOException: ...``, ``Caused by: ...``).
_JAVA_EXCEPTION = re.compile(
    r"^(?:Caused by:\s*|:\s*)?((?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error)\b.*)$"
)
#: The longest reason a failed start logs and /healthz shows.
MAX_REASON_CHARS = 400


def one_line(error: BaseException) -> str:
    """``error`` as one line for the log and /healthz: for an error from the JVM (a py4j
    error's text is the Java stack trace) the Java exception's line and its root cause,
    otherwise the type and the message's first line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    java = [m.group(1) for line in lines if (m := _JAVA_EXCEPTION.match(line))]
    if java:
        text = java[0] if len(java) == 1 else f"{java[0]} (caused by {java[-1]})"
    else:
        text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 3] + "..."


def local_dir_problem(spark_config: SparkConfig) -> str | None:
    """Why the embedded driver could not use its local directory, or None.

    Spark creates its scratch directories under ``SPARK_LOCAL_DIRS`` (which wins) or
    ``spark.local.dir`` at start and fails the start when it can use none of them (a volume
    mounted owned by another user, a read-only file system). Checked before the JVM starts,
    so that the log says which directory and why, in one line."""
    from exporter.pipeline.session import session_conf

    env = os.environ.get("SPARK_LOCAL_DIRS", "")
    configured = session_conf(spark_config).get("spark.local.dir", "")
    source, value = ("SPARK_LOCAL_DIRS", env) if env else ("spark.local_dir", configured)
    problems = []
    for path in (p.strip() for p in value.split(",") if p.strip()):
        try:
            os.makedirs(path, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=path, prefix=".kte-check-")
            os.close(fd)
            os.unlink(name)
            return None  # Spark needs one it can use
        except OSError as e:
            problems.append(f"{path}: {e.strerror or e}")
    if not problems:
        return None
    return f"no usable Spark local directory ({source}) for uid {os.getuid()}: " + "; ".join(problems)


def _bounded(fn: Callable[[], Any], timeout_s: float, name: str) -> tuple[bool, Any]:
    """Run ``fn`` on a daemon thread; (finished, result or exception). Never blocks longer."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # reported to the caller
            box["value"] = e

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return (not thread.is_alive()), box.get("value")


class PipelineRunner:
    """The Spark session, started once, kept warm and supervised; the pipeline entry point."""

    def __init__(
        self,
        spark_config: SparkConfig,
        settings: PipelineSettings,
        *,
        session: Any = None,
        interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        compute_fn: ComputeFn | None = None,
        round_fn: RoundFn | None = None,
    ) -> None:
        """``session``: an existing SparkSession to use and leave running (tests, the CLI);
        it is never killed or restarted. ``interval_s``: the shortest cluster interval, from
        which the default deadline and the health window derive (see :meth:`use_interval`).
        ``compute_fn``: the pipeline (default ``exporter.pipeline.compute.compute``).
        ``round_fn``: a round over several clusters (default
        ``exporter.pipeline.rounds.compute_round``; with only ``compute_fn`` given, a round
        that runs it cluster by cluster)."""
        self._spark_config = spark_config
        self.settings = settings
        self._clock = clock
        self._owns_session = session is None
        self._lock = threading.Lock()  # guards the fields below; never held while Spark works
        self._spark: Any = session
        self._pid: int | None = None
        self._generation = 0
        self._start_thread: threading.Thread | None = None
        self._start_done = threading.Event()
        self._start_began = 0.0
        self._retry_at = 0.0
        self._failed_starts = 0
        self._starts_failed_in_row = 0  # health: reset by a start that succeeds
        self._last_error = ""
        self._stopped = threading.Event()
        self._interval_s = interval_s
        self._created = clock()
        self._last_ok: float | None = None
        self._failing_since: float | None = None
        self._real_calls = 0
        self._warm_generation = -1
        self.restarts = 0
        self._compute: ComputeFn | None = compute_fn
        self._round: RoundFn | None = round_fn

    # --- configuration -------------------------------------------------------------------

    def use_interval(self, seconds: float) -> None:
        """The shortest cluster interval: the default deadline and the health window."""
        self._interval_s = seconds

    @property
    def call_timeout_s(self) -> float:
        if self._spark_config.pipeline_timeout_ms:
            return self._spark_config.pipeline_timeout_ms / 1000
        return max(DEFAULT_TIMEOUT_INTERVALS * (self._interval_s or 60.0), MIN_DEFAULT_TIMEOUT_S)

    @property
    def start_timeout_s(self) -> float:
        return self._spark_config.start_timeout_ms / 1000

    @property
    def jvm_pid(self) -> int | None:
        """The pid of the embedded driver JVM of the current session (None: not local/none)."""
        return self._pid

    def _compute_fn(self) -> ComputeFn:
        if self._compute is None:
            from exporter.pipeline.compute import compute

            self._compute = compute
        return self._compute

    def _round_fn(self) -> RoundFn:
        if self._round is None:
            if self._compute is not None:
                self._round = _round_of(self._compute)
            else:
                from exporter.pipeline.rounds import compute_round

                # A round failing as the session is torn down (stop) ends there, quietly.
                self._round = functools.partial(compute_round, stopping=self._stopped.is_set)
        return self._round

    # --- start ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start Spark (and warm it up) unless it runs; wait until it is ready or failed.

        Raises :class:`PipelineUnavailableError` when it failed or did not start in
        ``spark.start_timeout``."""
        self._acquire(self._clock() + self.start_timeout_s, first_start=True)

    def begin_start(self) -> None:
        """Start Spark in the background (returns at once): the daemon does this first, so
        that the JVM starts while the first cycle collects from Kafka."""
        with self._lock:
            if self._spark is None and self._start_thread is None and not self._stopped.is_set():
                self._launch_start_locked()

    def _launch_start_locked(self) -> None:
        self._start_done = threading.Event()
        self._start_began = self._clock()
        thread = threading.Thread(
            target=self._start_session, args=(self._generation,), name="spark-start", daemon=True
        )
        self._start_thread = thread
        thread.start()

    def _start_session(self, generation: int) -> None:
        from exporter.pipeline.session import driver_age_s, is_embedded, local_jvm_pid, spark_session

        started = self._clock()
        spark: Any = None
        pid: int | None = None
        problem = local_dir_problem(self._spark_config) if is_embedded(self._spark_config) else None
        if problem is not None:
            self._start_failed(generation, f"starting Spark failed: {problem}")
            return
        try:
            spark = spark_session(self._spark_config)
            if self._spark_config.connect_url is None:
                pid = local_jvm_pid(spark)
        except Exception as e:
            if self._spark_config.connect_url is None:
                from exporter.pipeline.session import kill_local

                kill_local(None)  # a JVM that started but failed to become a session
            self._start_failed(generation, f"starting Spark failed: {one_line(e)}")
            return
        with self._lock:
            current = generation == self._generation and not self._stopped.is_set()
            if current:
                self._spark, self._pid = spark, pid
                self._start_thread = None
                self._starts_failed_in_row = 0
                self._start_done.set()
        if not current:  # stopped (or superseded) while the JVM started
            self._teardown(spark, pid, graceful=True)
            return
        log.info(
            "Spark session ready in %.1f s (%s%s)",
            (pid and driver_age_s()) or self._clock() - started,  # launched early, or here
            self._spark_config.redacted_connect_url or self._spark_config.master,
            f", driver JVM pid {pid}" if pid else "",
        )
        if is_embedded(self._spark_config) and self._real_calls == 0:
            self._warm_up(spark)

    def _warm_up(self, spark: Any) -> None:
        """Run the pipeline once on a tiny snapshot, so that code generation happens before
        the first real cycle; skipped when a real cycle already asked (it warms up itself)."""
        from exporter.pipeline.rounds import ClusterRun
        from exporter.pipeline.warmup import warmup_snapshot

        started = self._clock()
        snapshot = warmup_snapshot()
        run = ClusterRun(snapshot, None, snapshot.taken_at_ms, settings=self.settings)
        try:
            outcome = self._round_fn()(spark, [run])
        except Exception as e:  # the first real cycle reports a broken session
            log.warning("Spark warm-up run failed: %s", e)
            return
        if outcome.failures:
            log.warning("Spark warm-up run failed: %s", next(iter(outcome.failures.values())))
            return
        log.info("Spark warm-up run in %.1f s", self._clock() - started)

    def _start_failed(self, generation: int, why: str) -> None:
        with self._lock:
            if generation != self._generation:
                return
            self._failed_starts += 1
            self._starts_failed_in_row += 1
            backoff = min(BACKOFF_MAX_S, 2.0 ** (self._failed_starts - 1))
            self._retry_at = self._clock() + backoff
            self._last_error = why
            self._start_thread = None
            self._start_done.set()
            self._mark_failure_locked()
        log.error("%s; next attempt in %.0f s", why, backoff)

    def current_session(self) -> Any:
        """The running Spark session (for the history writer); raises when there is none."""
        with self._lock:
            if self._spark is None:
                raise PipelineUnavailableError("no Spark session right now")
            return self._spark

    def _acquire(self, deadline: float, *, first_start: bool = False) -> tuple[Any, int]:
        """The ready session and its generation; starts one when needed. Waits for a start
        in progress until ``deadline`` (the start timeout, before the first success)."""
        while True:
            with self._lock:
                if self._stopped.is_set():
                    raise PipelineUnavailableError("the pipeline is stopped")
                if self._spark is not None:
                    return self._spark, self._generation
                if not self._owns_session:
                    raise PipelineUnavailableError("the given Spark session is gone")
                now = self._clock()
                if self._start_thread is None:
                    if now < self._retry_at:
                        raise PipelineUnavailableError(
                            f"Spark is restarting (next attempt in {self._retry_at - now:.0f} s); "
                            f"last error: {self._last_error}"
                        )
                    self._launch_start_locked()
                done, began = self._start_done, self._start_began
                if self._last_ok is None and not first_start:
                    # Before the first success, wait for the JVM as long as it may take.
                    deadline = max(deadline, began + self.start_timeout_s)
            if done.wait(max(0.0, deadline - self._clock())):
                continue  # ready, failed or stopped: look again
            if self._clock() - began >= self.start_timeout_s:
                self._abandon_start(began)
            raise PipelineUnavailableError(f"Spark is still starting ({self._clock() - began:.0f} s so far)")

    def _abandon_start(self, began: float) -> None:
        """A start that ran past ``start_timeout``: kill what it started, back off. The start
        thread's own outcome is then stale and ignored (its generation is over)."""
        from exporter.pipeline.session import kill_local

        with self._lock:
            if self._start_began != began or self._start_thread is None:
                return
            self._generation += 1
            self._start_thread = None
            self._start_done.set()
            self._failed_starts += 1
            self._starts_failed_in_row += 1
            backoff = min(BACKOFF_MAX_S, 2.0 ** (self._failed_starts - 1))
            self._retry_at = self._clock() + backoff
            self._last_error = f"Spark did not start within {self.start_timeout_s:.0f} s"
            self._mark_failure_locked()
        log.error("%s: killing it; next attempt in %.0f s", self._last_error, backoff)
        if self._spark_config.connect_url is None and self._owns_session:
            kill_local(None)

    # --- the pipeline call ---------------------------------------------------------------

    def compute(
        self, snapshot: ClusterSnapshot, memory: PipelineMemory | None, now_ms: int, **options: Any
    ) -> CycleResult:
        """Run the pipeline on ``snapshot`` within the deadline (see the module doc).

        Raises :class:`PipelineUnavailableError` (no session now), :class:`PipelineTimeoutError`, or
        whatever the pipeline raised."""
        compute = self._compute_fn()
        result: CycleResult = self._supervised(
            f"cluster {snapshot.cluster}",
            snapshot.cluster,
            lambda spark: compute(spark, snapshot, self.settings, memory, now_ms, **options),
        )
        return result

    def compute_round(self, runs: Sequence[ClusterRun]) -> RoundResult:
        """Run one round (:func:`exporter.pipeline.rounds.compute_round`) over ``runs`` within
        the deadline, supervised as :meth:`compute`. A cluster whose own input failed is in
        the result's ``failures``; a round in which every cluster failed counts as a failed
        pipeline run for health (one cluster's bad input alone never makes the process
        unhealthy while others succeed).

        Raises :class:`PipelineUnavailableError`, :class:`PipelineTimeoutError`, or whatever
        the round raised."""
        round_fn = self._round_fn()
        names = [r.cluster for r in runs]
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        outcome: RoundResult = self._supervised(
            f"round of {len(names)} cluster(s) ({shown})",
            "round",
            lambda spark: round_fn(spark, runs),
            failed=lambda r: bool(r.failures) and not r.results,
        )
        return outcome

    def _supervised(
        self,
        what: str,
        tag_name: str,
        fn: Callable[[Any], T],
        *,
        failed: Callable[[T], bool] = lambda _: False,
    ) -> T:
        """``fn(spark)`` on a thread of its own within the call deadline, its Spark jobs tagged:
        the one supervised path of every pipeline call (see the module doc). ``failed``: a
        returned value that counts as a failed run for health."""
        self._real_calls += 1
        timeout = self.call_timeout_s
        spark, generation = self._acquire(self._clock() + timeout)
        with self._lock:
            if self._owns_session and self._warm_generation != generation:
                # A fresh JVM compiles every plan the first time (code generation, JIT):
                # its first run may take as long as a start.
                timeout = max(timeout, self.start_timeout_s)
        deadline = self._clock() + timeout
        tag = f"kte-{tag_name}-{uuid.uuid4().hex[:12]}"
        box: dict[str, Any] = {}

        def run() -> None:
            tagged = False
            try:
                with contextlib.suppress(Exception):  # old servers: no interruption by tag
                    spark.addTag(tag)
                    tagged = True
                box["result"] = fn(spark)
            except BaseException as e:
                box["error"] = e
            finally:
                if tagged:
                    with contextlib.suppress(Exception):
                        spark.removeTag(tag)

        thread = threading.Thread(target=run, name=f"pipeline-{tag_name}", daemon=True)
        thread.start()
        while thread.is_alive() and self._clock() < deadline:
            thread.join(min(0.25, max(0.0, deadline - self._clock())))
            if self._stopped.is_set() and thread.is_alive():
                # Stopping: never keep the caller (a scheduler thread the interpreter joins
                # at exit) waiting for a run whose session is being torn down.
                raise PipelineUnavailableError("the pipeline is stopping")
        if thread.is_alive():
            self._on_deadline(spark, generation, tag, what, timeout)
            raise PipelineTimeoutError(f"pipeline run for {what} passed its deadline of {timeout:.0f} s")
        error = box.get("error")
        if error is not None:
            if self._stopped.is_set():
                # Failed as its session was torn down: the stop's doing, not the run's.
                raise PipelineUnavailableError("the pipeline is stopping") from error
            with self._lock:
                self._mark_failure_locked()
            if not self._alive(spark):
                self._restart(generation, f"Spark session failed ({type(error).__name__})")
            raise error
        result: T = box["result"]
        if failed(result):
            with self._lock:
                self._mark_failure_locked()
                self._last_error = "every cluster of the round failed"
            if not self._alive(spark):
                self._restart(generation, "Spark session failed (every cluster of the round failed)")
            return result
        with self._lock:
            self._last_ok = self._clock()
            self._warm_generation = generation
            self._failing_since = None
            self._failed_starts = 0
            self._last_error = ""
        return result

    def _mark_failure_locked(self) -> None:
        if self._failing_since is None:
            self._failing_since = self._clock()

    def _alive(self, spark: Any) -> bool:
        """A trivial round trip into the session, bounded by :data:`PING_TIMEOUT_S`."""
        if self._spark_config.connect_url is None:
            from pyspark import SparkContext

            proc = getattr(getattr(SparkContext, "_gateway", None), "proc", None)
            if proc is not None and self._pid is not None and proc.poll() is not None:
                return False  # the JVM exited
            probe: Callable[[], Any] = lambda: spark.sparkContext._jsc.sc().isStopped()  # noqa: E731
        else:
            probe = lambda: spark.range(1).collect()  # noqa: E731
        finished, value = _bounded(probe, PING_TIMEOUT_S, "spark-ping")
        return finished and not isinstance(value, BaseException) and value is not True

    def _on_deadline(self, spark: Any, generation: int, tag: str, what: str, timeout: float) -> None:
        with self._lock:
            self._mark_failure_locked()
        if self._alive(spark):
            finished, _ = _bounded(lambda: spark.interruptTag(tag), PING_TIMEOUT_S, "spark-interrupt")
            log.warning(
                "pipeline run for %s passed its deadline of %.0f s; its Spark jobs were %s",
                what,
                timeout,
                "interrupted" if finished else "not interruptible",
            )
            return
        self._restart(
            generation,
            f"Spark session does not answer (hung or dead) after the pipeline run for {what} "
            "passed its deadline",
        )

    def _restart(self, generation: int, why: str) -> None:
        """Tear the session of ``generation`` down; the next call starts a new one after
        back-off. Sessions given to the runner are never torn down."""
        if not self._owns_session:
            log.error("%s (the session is not the daemon's own: not restarted)", why)
            return
        with self._lock:
            if generation != self._generation or self._spark is None:
                return  # someone else did it already
            spark, pid = self._spark, self._pid
            self._spark, self._pid = None, None
            self._generation += 1
            self._failed_starts += 1
            backoff = min(BACKOFF_MAX_S, 2.0 ** (self._failed_starts - 1))
            self._retry_at = self._clock() + backoff
            self._last_error = why
            self.restarts += 1
        log.error(
            "%s: tearing it down%s; a new session starts in %.0f s",
            why,
            f" (killing driver JVM pid {pid})" if pid else "",
            backoff,
        )
        self._teardown(spark, pid, graceful=False)

    def _teardown(self, spark: Any, pid: int | None, *, graceful: bool) -> None:
        from exporter.pipeline.session import kill_local, stop

        if self._spark_config.connect_url is not None:
            # A Connect client: close its channel (the server and its JVM are not ours).
            _bounded(lambda: stop(spark), STOP_GRACE_S, "spark-stop")
            return
        if graceful:
            finished, value = _bounded(lambda: stop(spark), STOP_GRACE_S, "spark-stop")
            if finished and not isinstance(value, BaseException):
                return
            log.warning("Spark did not stop within %.0f s: killing its JVM", STOP_GRACE_S)
        kill_local(pid)

    # --- health and stop -----------------------------------------------------------------

    def health(self) -> tuple[bool, str]:
        """(False, why) when pipeline runs were attempted and none succeeded for
        ``spark.unhealthy_after_intervals`` intervals (plus the start timeout before the first
        success), or when the last ``spark.unhealthy_after_failed_starts`` starts of Spark
        failed: a restart of the process would help."""
        with self._lock:
            failing_since, last_ok, why = self._failing_since, self._last_ok, self._last_error
            failed_starts = self._starts_failed_in_row
        if failing_since is None or self._stopped.is_set():
            return True, "ok"
        if failed_starts >= self._spark_config.unhealthy_after_failed_starts:
            return False, f"Spark did not start: {failed_starts} attempt(s) in a row failed; last: {why}"
        intervals = self._spark_config.unhealthy_after_intervals
        window = intervals * (self._interval_s or 60.0)
        if last_ok is None:
            window += self.start_timeout_s
        since = last_ok if last_ok is not None else self._created
        age = self._clock() - since
        if age <= window:
            return True, "ok"
        what = "since start" if last_ok is None else f"for {age:.0f} s"
        return False, (
            f"no pipeline run succeeded {what} ({intervals} interval(s) allowed)"
            + (f"; last error: {why}" if why else "")
        )

    def stop(self) -> None:
        """Stop Spark for good, within :data:`STOP_GRACE_S` plus a kill, whatever it does."""
        self._stopped.set()
        with self._lock:
            spark, pid = self._spark, self._pid
            self._spark, self._pid = None, None
            self._generation += 1
            starting = self._start_thread is not None
            self._start_done.set()  # wake callers waiting for a start: they see "stopped"
        if spark is not None and self._owns_session:
            self._teardown(spark, pid, graceful=True)
        elif starting and self._owns_session and self._spark_config.connect_url is None:
            # A JVM still starting: kill it so that the process can exit now. Bounded: while
            # PySpark launches the JVM it holds the lock kill_local needs (for as long as the
            # launch takes, tens of seconds on a loaded node). A JVM left starting is torn
            # down by the start thread once launched (it sees the stop), or ends with this
            # process (PySpark's gateway exits when its stdin, our pipe, closes).
            from exporter.pipeline.session import kill_local

            _bounded(lambda: kill_local(None), START_KILL_WAIT_S, "spark-kill")


def _round_of(compute: ComputeFn) -> RoundFn:
    """A round that runs ``compute`` cluster by cluster, each failure the cluster's own (the
    contract of :func:`exporter.pipeline.rounds.compute_round`, for a pipeline given alone)."""

    def round_fn(spark: Any, runs: Sequence[ClusterRun]) -> RoundResult:
        from exporter.pipeline.compute import ComputeStats
        from exporter.pipeline.rounds import RoundResult

        results: dict[str, CycleResult] = {}
        failures: dict[str, str] = {}
        for run in runs:
            try:
                results[run.cluster] = compute(
                    spark,
                    run.snapshot,
                    run.settings,
                    run.memory,
                    run.now_ms,
                    groups=run.groups,
                    rules=run.rules,
                )
            except Exception as e:
                failures[run.cluster] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return RoundResult(results=results, failures=failures, stats=ComputeStats())

    return round_fn
