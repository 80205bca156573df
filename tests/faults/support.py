"""Black-box helpers of the fault suite: the exporter is a Daemon (or a process) and what it
exports; faults come from the test bed (``testbed.faults``, ``KafkaCluster``)."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from exporter.daemon import Daemon

FALSE_FINDING_CLASSES = ("hanging", "suspected_hanging")
#: Upper bound for one cycle under a fault: interval (5 s) x a generous factor for a loaded
#: 2-core machine. Only a bound to stop waiting, never an assertion on timing.
CYCLE_BOUND_S = 120.0


def samples(registry: CollectorRegistry, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    """Samples of ``name`` whose labels include ``labels`` (the cluster label is not matched,
    whatever its name)."""
    return [
        (dict(s.labels), s.value)
        for metric in registry.collect()
        for s in metric.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def total(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return sum(v for _, v in samples(registry, name, **labels))


def open_by_class(registry: CollectorRegistry) -> dict[str, float]:
    return {lab["class"]: v for lab, v in samples(registry, "kafka_txn_open_transactions")}


def false_findings(registry: CollectorRegistry) -> dict[str, float]:
    classes = open_by_class(registry)
    return {c: classes[c] for c in FALSE_FINDING_CLASSES if classes.get(c, 0)}


def hanging_keys(registry: CollectorRegistry, topic: str) -> set[tuple[int, int, int]]:
    """(partition, producer id, start offset) of every hanging series on ``topic``."""
    return {(int(lab["partition"]), int(lab["producer_id"]), int(lab["start_offset"]))
            for lab, _ in samples(registry, "kafka_txn_hanging_transaction_info", topic=topic)}  # fmt: skip


def cycles(registry: CollectorRegistry, result: str) -> float:
    return total(registry, "kafka_txn_exporter_cycles_total", result=result)


def up(registry: CollectorRegistry) -> float:
    return total(registry, "kafka_txn_exporter_up")


def strike_after_metadata(daemon: Daemon, fault: Callable[[], object], job: int = 0) -> None:
    """Make ``fault`` happen inside the job's next cycle, right after Metadata is answered
    (once): the cycle has its brokers and leaders, and every request after that meets the
    fault. Deterministic, unlike sleeping into a cycle that takes 0.2 s on an idle machine."""
    admin = daemon.jobs[job]._collector.admin
    answer = admin.metadata

    def metadata_then_fault(*args: Any, **kwargs: Any) -> Any:
        answered = answer(*args, **kwargs)
        admin.metadata = answer  # type: ignore[method-assign]
        fault()
        return answered

    admin.metadata = metadata_then_fault  # type: ignore[method-assign]


class CycleInThread:
    """One ``run_cycle`` of a daemon's job in a thread, so a fault can strike during it."""

    def __init__(self, daemon: Daemon, job: int = 0) -> None:
        self.error: BaseException | None = None
        self.elapsed_s = 0.0
        self._thread = threading.Thread(target=self._run, args=(daemon, job), daemon=True)

    def _run(self, daemon: Daemon, job: int) -> None:
        started = time.monotonic()
        try:
            daemon.jobs[job].run_cycle()
        except BaseException as exc:
            self.error = exc
        finally:
            self.elapsed_s = time.monotonic() - started

    def start(self) -> CycleInThread:
        self._thread.start()
        return self

    def finished(self, bound_s: float = CYCLE_BOUND_S) -> bool:
        """Wait (bounded) for the cycle; True when it ended without raising."""
        self._thread.join(timeout=bound_s)
        return not self._thread.is_alive() and self.error is None


def run_cycles(daemon: Daemon, n: int) -> list[CollectorRegistry]:
    """``n`` cycles, the registry after each (the same registry object, read in between)."""
    seen: list[CollectorRegistry] = []
    for _ in range(n):
        daemon.jobs[0].run_cycle()
        seen.append(snapshot(daemon.registry))
    return seen


def run_scheduled_cycles(daemon: Daemon, n: int, interval_s: float) -> list[CollectorRegistry]:
    """``n`` cycles started ``interval_s`` apart, as the scheduler would: "recovers within 2
    intervals" means within the daemon's next two cycles, not two cycles fired back to back
    the instant a broker process is back (it may still be loading its logs)."""
    seen: list[CollectorRegistry] = []
    for i in range(n):
        started = time.monotonic()
        daemon.jobs[0].run_cycle()
        seen.append(snapshot(daemon.registry))
        if i < n - 1:
            time.sleep(max(0.0, interval_s - (time.monotonic() - started)))
    return seen


def snapshot(registry: CollectorRegistry) -> CollectorRegistry:
    """A frozen copy of what a scrape would see now."""
    frozen = CollectorRegistry()
    metrics = list(registry.collect())

    class _Frozen:
        def collect(self) -> list[Any]:
            return metrics

    frozen.register(_Frozen())
    return frozen


def until(check: Callable[[], bool], *, bound_s: float, poll_s: float = 0.5) -> bool:
    """Poll ``check`` until true or the bound passes (then False)."""
    deadline = time.monotonic() + bound_s
    while True:
        if check():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)


def http_get(url: str, timeout_s: float = 30.0) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return int(response.status), response.read().decode()
