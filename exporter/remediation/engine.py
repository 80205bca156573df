"""The daemon's guarded auto-remediation: a cycle listener and a worker thread of its own.

Per cluster with ``remediation.enabled``, after every cycle whose pipeline ran:

1. the listener (on the cycle's thread, no I/O but the state file) notes since when each
   transaction has been ``hanging`` (confirmed by the pipeline), and hands the worker those
   hanging for at least ``after``, on an allowed topic, never acted on before, as long as the
   hourly budget (``max_actions_per_hour``, dry-run reports included) allows;
2. the worker judges each one again on that cycle's evidence with the operator's own rules
   (:func:`exporter.operator.actions.judge_abort`: never ``unknown``, never a transaction a
   coordinator owns, never one that no coordinator lists while the cluster accepts
   two-phase-commit transactions), then, unless ``dry_run``, writes the ABORT marker through
   :func:`exporter.operator.actions.execute_abort`: both sides read again right before the
   write, as ``abort --yes`` does;
3. every action or would-be action is audited (one JSON log line, a row of the history's
   ``actions`` dataset when the history is on) and counted in
   ``kafka_txn_remediations_total{action, result}``.

Each transaction is acted on at most once: what was done is kept in ``state_dir``
(``remediation-<cluster>.json``, written atomically), so a restarted daemon never acts on
it again. Nothing here runs on the scrape path, and the cycle's thread never waits for Kafka.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from exporter.config import ClusterConfig
from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.errors import KafkaRequestError, KafkaUnavailable
from exporter.model import ClusterSnapshot, CycleResult, Finding, TxnClass

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
#: What was done is remembered this long (a transaction hanging for longer than this after an
#: action could be acted on again: none is, an aborted one is gone).
DONE_KEPT_MS = 7 * 24 * HOUR_MS
ACTION = "abort"


def key_of(f: Finding) -> str:
    """A transaction's identity as text: topic names never hold ``|``."""
    return f"{f.topic}|{f.partition}|{f.producer_id}|{f.start_offset}"


@dataclass
class ClusterState:
    """What one cluster's remediation remembers (and keeps in ``state_dir``)."""

    #: key -> when it was first seen hanging (epoch ms), for the transactions hanging now.
    hanging_since: dict[str, int] = field(default_factory=dict)
    #: key -> {"at_ms", "result"}: acted on (or reported, in a dry run): never again.
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: When each action (or report) of the last hour was started, for the hourly budget.
    recent: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"hanging_since": self.hanging_since, "done": self.done, "recent": self.recent}

    @classmethod
    def from_json(cls, data: Any) -> ClusterState:
        if not isinstance(data, dict):
            return cls()
        return cls(
            hanging_since={str(k): int(v) for k, v in dict(data.get("hanging_since", {})).items()},
            done={str(k): dict(v) for k, v in dict(data.get("done", {})).items()},
            recent=[int(v) for v in data.get("recent", [])],
        )


@dataclass(frozen=True)
class _Job:
    cluster: ClusterConfig
    snapshot: ClusterSnapshot
    result: CycleResult
    finding: Finding


AuditSink = Callable[[dict[str, Any]], None]


class Remediation:
    """The cycle listener of every cluster with remediation on, and their worker thread."""

    def __init__(
        self,
        clusters: Sequence[ClusterConfig],
        *,
        counter: Any,
        state_dir: str | None = None,
        history: Any = None,
        clock: Callable[[], float] = time.time,
        start: bool = True,
    ) -> None:
        self._counter = counter
        self._state_dir = Path(state_dir) if state_dir else None
        self._history = history
        self._clock = clock
        self._lock = threading.Condition()
        self._clusters: dict[str, ClusterConfig] = {}
        self._states: dict[str, ClusterState] = {}
        self._queue: collections.deque[_Job] = collections.deque()
        self._pending: set[tuple[str, str]] = set()
        self._admins: dict[str, ClusterAdmin] = {}
        self._stopping = False
        #: Audit entries written, newest last (bounded; what tests and /debug read).
        self.audit: collections.deque[dict[str, Any]] = collections.deque(maxlen=1000)
        self.configure(clusters)
        self._thread = threading.Thread(target=self._run, name="remediation", daemon=True)
        if start:
            self._thread.start()

    # --- configuration --------------------------------------------------------------------

    def configure(self, clusters: Iterable[ClusterConfig]) -> None:
        """The clusters with remediation on (a reload calls this again)."""
        with self._lock:
            self._clusters = {c.name: c for c in clusters if c.remediation.enabled}
            for name in self._clusters:
                if name not in self._states:
                    self._states[name] = self._load(name)
        if self._clusters and self._state_dir is None:
            log.warning(
                "remediation without state_dir: a restarted exporter forgets which transactions it acted on"
            )

    def _path(self, cluster: str) -> Path | None:
        return None if self._state_dir is None else self._state_dir / f"remediation-{cluster}.json"

    def _load(self, cluster: str) -> ClusterState:
        path = self._path(cluster)
        if path is None or not path.exists():
            return ClusterState()
        try:
            return ClusterState.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, TypeError) as e:
            log.warning("remediation: cannot read %s (%s); starting afresh", path, e)
            return ClusterState()

    def _save(self, cluster: str) -> None:
        """Atomically (caller holds the lock)."""
        path = self._path(cluster)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(json.dumps(self._states[cluster].to_json(), sort_keys=True))
            os.replace(tmp, path)
        except OSError as e:
            log.warning("remediation: cannot write %s: %s", path, e)

    # --- the cycle's side: no Kafka, returns at once ----------------------------------------

    def __call__(self, snapshot: ClusterSnapshot, result: CycleResult) -> None:
        with self._lock:
            cluster = self._clusters.get(result.cluster)
            if cluster is None or self._stopping:
                return
            config = cluster.remediation
            state = self._states[cluster.name]
            now = result.computed_at_ms
            hanging = {key_of(f): f for f in result.findings if f.txn_class is TxnClass.HANGING}
            state.hanging_since = {k: state.hanging_since.get(k, now) for k in hanging}
            state.recent = [t for t in state.recent if now - t < HOUR_MS]
            state.done = {k: v for k, v in state.done.items() if now - int(v.get("at_ms", 0)) < DONE_KEPT_MS}
            allowed = config.topic_matcher()
            due = sorted(
                (
                    (since, k)
                    for k, since in state.hanging_since.items()
                    if now - since >= config.after_ms
                    and k not in state.done
                    and (cluster.name, k) not in self._pending
                    and allowed(hanging[k].topic)
                ),
            )
            for _, k in due:
                if len(state.recent) >= config.max_actions_per_hour:
                    log.info(
                        "remediation of %s: %d transaction(s) due, held back by max_actions_per_hour %d",
                        cluster.name,
                        len(due),
                        config.max_actions_per_hour,
                    )
                    break
                state.recent.append(now)
                self._pending.add((cluster.name, k))
                self._queue.append(_Job(cluster, snapshot, result, hanging[k]))
            self._save(cluster.name)
            self._lock.notify_all()

    # --- the worker ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._stopping:
                    self._lock.wait(timeout=1.0)
                if self._stopping:
                    return
            self.process_pending()

    def process_pending(self) -> int:
        """Act on every queued transaction (the worker thread; tests call it with
        ``start=False``). Returns how many were handled."""
        handled = 0
        while True:
            with self._lock:
                if not self._queue or self._stopping:
                    return handled
                job = self._queue.popleft()
            try:
                result = self._act(job)
            except Exception:  # a bug must not kill the worker: the transaction is done with
                log.exception("remediation of %s failed unexpectedly", job.cluster.name)
                result = "failed"
            with self._lock:
                key = key_of(job.finding)
                self._pending.discard((job.cluster.name, key))
                state = self._states.get(job.cluster.name)
                if state is not None:
                    state.done[key] = {"at_ms": int(self._clock() * 1000), "result": result}
                    self._save(job.cluster.name)
            handled += 1

    def _admin(self, cluster: ClusterConfig) -> ClusterAdmin:
        admin = self._admins.get(cluster.name)
        if admin is None:
            admin = ClusterAdmin(
                bootstrap_servers=cluster.bootstrap_servers,
                properties=cluster.kafka,
                request_timeout_ms=cluster.request_timeout_ms,
            )
            self._admins[cluster.name] = admin
        return admin

    def _act(self, job: _Job) -> str:
        from exporter.operator import actions
        from exporter.operator.hanging import Classified
        from exporter.operator.requests import AbortRequest

        f, snapshot = job.finding, job.snapshot
        config = job.cluster.remediation
        classified = Classified(snapshot, job.result, job.result.computed_at_ms)
        key = (f.topic, f.partition, f.producer_id, f.start_offset)
        producer = next(
            (
                p
                for p in snapshot.producers
                if (p.topic, p.partition, p.producer_id, p.current_txn_start_offset) == key
            ),
            None,
        )
        if producer is None:  # not in the cycle's evidence: nothing to judge
            missing = {
                **_target_fields(f),
                "result": "refused",
                "refusal": "not open in the cycle's snapshot",
            }
            self._counter.labels(job.cluster.name, ACTION, "refused").inc()
            self._audit(job.cluster, missing)
            return "refused"
        leader = next(
            (p.leader for p in snapshot.partitions if (p.topic, p.partition) == (f.topic, f.partition)),
            producer.broker_id,
        )
        target = actions.AbortTarget(f.topic, f.partition, leader, producer)
        plan: dict[str, Any] = {"initiator": "remediation"}
        try:
            # The operator's own judgement on the cycle's evidence: hanging, not unknown, not
            # a transaction no coordinator lists in a cluster that accepts 2PC.
            finding = actions.judge_abort(classified, target)
            plan.update(
                actions.abort_plan(
                    target, finding, actions.partition_offsets(classified, f.topic, f.partition)
                )
            )
            plan["initiator"] = "remediation"
            if config.dry_run:
                plan["result"] = "dry_run"
            else:
                request = AbortRequest(topic=f.topic, partition=f.partition, start_offset=f.start_offset)
                outcome = actions.execute_abort(self._admin(job.cluster), target, request)
                plan.update(
                    result="marker_written_but_still_open" if outcome.still_open else "aborted",
                    lso_after=outcome.after.last_stable_offset,
                    high_watermark_after=outcome.after.high_watermark,
                )
        except (actions.Refused, actions.CannotVerify) as e:
            plan.update(_target_fields(f), result="refused", refusal=str(e))
        except (KafkaRequestError, KafkaUnavailable) as e:
            plan.update(_target_fields(f), result="failed", error=str(e))
        result = str(plan["result"])
        counted = {"aborted": "aborted", "dry_run": "dry_run", "refused": "refused"}.get(result, "failed")
        self._counter.labels(job.cluster.name, ACTION, counted).inc()
        self._audit(job.cluster, plan)
        return result

    def _audit(self, cluster: ClusterConfig, plan: dict[str, Any]) -> None:
        from exporter.history.audit import audit_entry

        entry = audit_entry(ACTION, plan, cluster=cluster.name, properties=cluster.kafka)
        entry["initiator"] = "remediation"
        for extra in ("refusal", "error"):
            if extra in plan:
                entry["evidence"][extra] = plan[extra]
        self.audit.append(entry)
        level = logging.INFO if entry["dry_run"] else logging.WARNING
        log.log(level, "remediation: %s", json.dumps(entry, default=str, sort_keys=True))
        if self._history is not None:
            try:
                self._history.record_action(entry)
            except Exception as e:  # the audit line above stands
                log.warning("remediation: the history row was not queued: %s", e)

    def close(self, timeout_s: float = 30.0) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        for admin in self._admins.values():
            admin.close()
        self._admins.clear()

    @property
    def queued(self) -> int:
        """Transactions handed to the worker and not yet handled."""
        with self._lock:
            return len(self._queue)

    def state(self, cluster: str) -> ClusterState:
        with self._lock:
            s = self._states.get(cluster, ClusterState())
            return replace(s, hanging_since=dict(s.hanging_since), done=dict(s.done), recent=list(s.recent))


def _target_fields(f: Finding) -> dict[str, Any]:
    return {
        "action": ACTION,
        "topic": f.topic,
        "partition": f.partition,
        "producer_id": f.producer_id,
        "producer_epoch": f.producer_epoch,
        "start_offset": f.start_offset,
        "transactional_id": f.transactional_id,
        "reason": f.hanging_reason.value if f.hanging_reason else None,
    }
