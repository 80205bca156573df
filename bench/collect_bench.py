"""Collection benchmark: our SnapshotCollector against the naive approach and Kafka's tool.

Starts real brokers from the test bed (loopback only), grows the cluster to N partitions
(N in ``--sizes``, default 100, 1000, 3000) with transactional traffic on the first topic
(committed and aborted transactions, open transactions, one genuinely hanging transaction,
plain records behind an open one), and measures at each size, side by side:

* **ours**: ``SnapshotCollector.collect()`` on a fresh ``ClusterAdmin`` (kafka-python client
  created first, see ``prime``): the first (cold) cycle,
  then the median of ``--repeats`` warm cycles (the daemon keeps its clients, so warm is the
  steady state), with the median of each stage (``snapshot.stage_seconds``; ``configs`` and
  ``offsets`` run in parallel with ``producers`` and ``list_transactions``) and the number of
  requests one warm cycle sends. Requests are counted on the wire, not estimated:
  kafka-python's by wrapping the ``send`` of that one client instance's connection manager,
  librdkafka's from its own statistics (``statistics.interval.ms``: per-broker request
  counters, before and after the cycle). Product code is not changed.
* **naive**: kafka-python's public ``KafkaAdminClient``, as a script would use it:
  ``describe_topics()`` to enumerate partitions, ``describe_producers(all partitions)`` (one
  request per leader, sent one after another, raising on the first partition error),
  ``list_transactions()`` (brokers one after another) and ``describe_transactions()`` of the
  listed ids. Same warm/cold rule, same request counting. It reads no offsets or configs.
* **kafka find-hanging**: ``kafka-transactions.sh find-hanging --broker-id B`` for every
  broker (the tool takes one broker or one topic per run), run by
  ``testbed.oracles.TransactionsCommand``: **JVM start included**, one JVM per
  broker. ``kafka list`` (one JVM, one round of ListTransactions) is printed as the JVM-start
  baseline.

Run: ``.venv/bin/python bench/collect_bench.py [--sizes 100,1000,3000] [--no-cluster3]``.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import gc
import json
import logging
import signal
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.collector import SnapshotCollector
from exporter.model import ClusterSnapshot
from testbed import scenarios
from testbed.broker import KafkaCluster
from testbed.oracles import TransactionsCommand

log = logging.getLogger("bench.collect")

DEFAULT_SIZES = (100, 1000, 3000)
DEFAULT_CLUSTER3_SIZES = (100, 1000)
TRAFFIC_TOPIC = "bench-txn"
STATS_INTERVAL_MS = 100


#: A collect() slower than this dumps every thread's stack to stderr (evidence, not a failure).
WATCHDOG_S = 60.0


@contextlib.contextmanager
def watchdog(what: str) -> Iterator[None]:
    faulthandler.dump_traceback_later(WATCHDOG_S, repeat=False, file=sys.stderr)
    started = time.monotonic()
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        if time.monotonic() - started > WATCHDOG_S:
            progress(f"SLOW: {what} took {time.monotonic() - started:.1f} s (stacks above)")


def prime(admin: ClusterAdmin) -> None:
    """Create the kafka-python client before the first collect(), from this one thread.

    Works around a product race (reported): ``ClusterAdmin._kafka_client()`` is created
    lazily and unlocked, while ``collect()`` calls it from two threads at once (``producers``
    on the caller, ``configs`` -> ``transaction_version`` on the collector's pool). Sometimes
    two clients are made; ``_send_all`` then waits on the other client's loop and a cycle
    can block until that loop's next timer (~300 s, seen here with a stack dump).
    """
    admin._kafka_client()


def progress(message: str) -> None:
    print(f"[collect_bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- traffic ---------------------------------------------------------------------------------


@dataclass
class Traffic:
    """Transactional state put on the first topic; ``close()`` aborts the open transactions."""

    committed: int = 0
    aborted: int = 0
    open_transactions: list[scenarios.OpenTransaction] = field(default_factory=list)
    hanging: list[scenarios.HangingTransaction] = field(default_factory=list)

    def close(self) -> None:
        for txn in self.open_transactions:
            with contextlib.suppress(Exception):  # the broker may be gone already
                txn.abort()
        self.open_transactions.clear()

    def describe(self) -> str:
        return (
            f"{self.committed} committed + {self.aborted} aborted transactions, "
            f"{len(self.open_transactions)} open, {len(self.hanging)} hanging"
        )


def make_traffic(
    cluster: KafkaCluster,
    topic: str,
    *,
    committed: int = 8,
    aborted: int = 2,
    open_count: int = 3,
    open_timeout_ms: int = 600_000,
) -> Traffic:
    """A realistic share of transactional state on ``topic`` (needs >= 20 partitions)."""
    bootstrap = cluster.bootstrap_servers
    traffic = Traffic()
    partition = 0
    for i in range(committed + aborted):
        scenarios.run_transaction(bootstrap, topic, partition=partition, records=3, commit=i < committed)
        partition += 1
    traffic.committed, traffic.aborted = committed, aborted
    for _ in range(open_count):
        txn = scenarios.OpenTransaction(
            bootstrap, topic, partition=partition, transaction_timeout_ms=open_timeout_ms
        )
        traffic.open_transactions.append(txn.begin(records=2))
        # Plain records behind the open transaction: last-stable-offset lag.
        scenarios.produce_plain(bootstrap, topic, partition=partition, records=20)
        partition += 1
    traffic.hanging.append(
        scenarios.create_hanging_transaction(
            cluster, topic, partition=partition, backdate_ms=scenarios.DEFAULT_LATE_BACKDATE_MS
        )
    )
    return traffic


def grow_to(cluster: KafkaCluster, total: int, existing: list[tuple[str, int]]) -> None:
    """Add one topic so that the bench topics hold ``total`` partitions together."""
    have = sum(n for _, n in existing)
    if total <= have:
        return
    name = f"bench-p{len(existing)}-{total - have}"
    started = time.monotonic()
    cluster.create_topic(name, partitions=total - have, timeout_s=300)
    existing.append((name, total - have))
    progress(f"created {name} ({total - have} partitions) in {time.monotonic() - started:.1f} s")


# -- request counting (benchmark-side instrumentation) ----------------------------------------


class KafkaPythonRequests:
    """Counts every request one kafka-python client's connection manager sends, by API."""

    def __init__(self, manager: Any) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        send = manager.send

        def counting_send(request: Any, node_id: Any = None, request_timeout_ms: Any = None) -> Any:
            # A request we wrap (exporter.kafka._protocol) answers to its API's name.
            api = str(getattr(request, "name", type(request).__name__))
            with self._lock:
                self.counts[api.removesuffix("Request")] += 1
            return send(request, node_id=node_id, request_timeout_ms=request_timeout_ms)

        manager.send = counting_send  # this instance only

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)


class LibrdkafkaStats:
    """librdkafka's own per-broker request counters, read through ``stats_cb``."""

    def __init__(self) -> None:
        self._latest: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._seq = 0

    def properties(self) -> dict[str, Any]:
        return {"statistics.interval.ms": str(STATS_INTERVAL_MS), "stats_cb": self._on_stats}

    def _on_stats(self, text: str) -> None:
        with self._lock:
            self._latest = json.loads(text)
            self._seq += 1

    def snapshot(self, client: Any) -> Counter[str]:
        """Wait for a fresh statistics report, then sum its request counters over brokers."""
        with self._lock:
            seq = self._seq
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            client.poll(0.05)
            with self._lock:
                if self._seq >= seq + 2:  # a full interval after the call: nothing in flight
                    break
        with self._lock:
            counts: Counter[str] = Counter()
            for broker in self._latest.get("brokers", {}).values():
                for api, n in broker.get("req", {}).items():
                    if n:
                        counts[api] += int(n)
            return counts


def diff(after: Counter[str], before: Counter[str]) -> Counter[str]:
    return Counter({k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0})


def format_requests(counts: Counter[str]) -> str:
    return " ".join(f"{api}={n}" for api, n in sorted(counts.items()))


# -- the three contenders ----------------------------------------------------------------------


@dataclass
class OursResult:
    cold_s: float
    warm_s: float
    stages: dict[str, float]
    requests: Counter[str]
    partitions: int
    open_producers: int
    errors: Counter[str]


@dataclass
class NaiveResult:
    cold_s: float
    warm_s: float
    producers_s: float
    requests: Counter[str]
    open_producers: int


@dataclass
class KafkaToolResult:
    find_hanging_s: float
    runs: int
    hanging: int
    list_s: float


def measure_ours(bootstrap: str, repeats: int, unprimed: bool = False) -> OursResult:
    stats = LibrdkafkaStats()
    admin = ClusterAdmin(
        bootstrap_servers=bootstrap, properties=stats.properties(), request_timeout_ms=10_000
    )
    collector = SnapshotCollector(cluster="bench", admin=admin)
    try:
        if not unprimed:
            prime(admin)
        started = time.monotonic()
        with watchdog("cold collect()"):
            snapshot = collector.collect()
        cold = time.monotonic() - started
        wire = KafkaPythonRequests(admin._kafka_client()._manager)
        confluent = admin._admin()
        warm: list[float] = []
        stages: dict[str, list[float]] = {}
        requests: list[Counter[str]] = []
        for _ in range(repeats):
            before = wire.snapshot() + stats.snapshot(confluent)
            started = time.monotonic()
            with watchdog("warm collect()"):
                snapshot = collector.collect()
            warm.append(time.monotonic() - started)
            requests.append(diff(wire.snapshot() + stats.snapshot(confluent), before))
            for name, seconds in snapshot.stage_seconds:
                stages.setdefault(name, []).append(seconds)
        return OursResult(
            cold_s=cold,
            warm_s=statistics.median(warm),
            stages={k: statistics.median(v) for k, v in stages.items()},
            requests=median_counts(requests),
            partitions=len(snapshot.partitions),
            open_producers=open_producers(snapshot),
            errors=Counter(f"{e.api}:{e.error}" for e in snapshot.errors),
        )
    finally:
        collector.close()
        gc.collect()  # destroy the librdkafka handle now, not while the brokers stop


def open_producers(snapshot: ClusterSnapshot) -> int:
    return sum(1 for p in snapshot.producers if p.current_txn_start_offset >= 0)


def median_counts(samples: Sequence[Counter[str]]) -> Counter[str]:
    keys = {k for s in samples for k in s}
    return Counter({k: int(statistics.median(s.get(k, 0) for s in samples)) for k in keys})


def naive_once(client: Any) -> tuple[float, float, int]:
    """One naive pass: (total seconds, describe_producers seconds, open producers)."""
    from kafka import TopicPartition

    started = time.monotonic()
    topics = client.describe_topics()
    partitions = [TopicPartition(t["name"], p["partition_index"]) for t in topics for p in t["partitions"]]
    producers_started = time.monotonic()
    producers = client.describe_producers(partitions)
    producers_s = time.monotonic() - producers_started
    listed = client.list_transactions()
    ids = sorted({t.transactional_id for txns in listed.values() for t in txns})
    if ids:
        client.describe_transactions(ids)
    total = time.monotonic() - started
    n_open = sum(
        1
        for state in producers.values()
        for p in state.active_producers
        if p.current_transaction_start_offset >= 0
    )
    return total, producers_s, n_open


def settle(bootstrap: str, timeout_s: float = 120.0) -> tuple[int, float, str]:
    """Collect until a cycle is complete (a fresh topic's partitions answer NOT_LEADER for a
    while after the metadata names their leader). Returns (partial cycles, seconds, first
    error seen)."""
    admin = ClusterAdmin(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    prime(admin)
    collector = SnapshotCollector(cluster="settle", admin=admin)
    started = time.monotonic()
    partial = 0
    first_error = ""
    try:
        while time.monotonic() - started < timeout_s:
            with watchdog("settle collect()"):
                snapshot = collector.collect()
            # DescribeConfigs fails on every multi-broker cycle (product bug, reported):
            # settle on the partition-level APIs only.
            if all(e.api == "DescribeConfigs" for e in snapshot.errors):
                break
            partial += 1
            if not first_error:
                e = snapshot.errors[0]
                first_error = f"{len(snapshot.errors)} x {e.api} {e.error}"
            time.sleep(0.5)
    finally:
        collector.close()
        gc.collect()  # destroy the librdkafka handle now, not while the brokers stop
    return partial, time.monotonic() - started, first_error


def measure_naive(bootstrap: str, repeats: int) -> NaiveResult:
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=10_000)
    try:
        cold, _, _ = naive_once(client)
        wire = KafkaPythonRequests(client._manager)
        totals: list[float] = []
        producers: list[float] = []
        requests: list[Counter[str]] = []
        n_open = 0
        for _ in range(repeats):
            before = wire.snapshot()
            total, producers_s, n_open = naive_once(client)
            requests.append(diff(wire.snapshot(), before))
            totals.append(total)
            producers.append(producers_s)
        return NaiveResult(
            cold_s=cold,
            warm_s=statistics.median(totals),
            producers_s=statistics.median(producers),
            requests=median_counts(requests),
            open_producers=n_open,
        )
    finally:
        client.close()


def measure_kafka_tool(cluster: KafkaCluster) -> KafkaToolResult:
    tools = TransactionsCommand(cluster.dist, cluster.bootstrap_servers)
    started = time.monotonic()
    tools.list_transactions()
    list_s = time.monotonic() - started
    started = time.monotonic()
    # --broker-id B covers every partition B holds a replica of: count each hanging
    # transaction once.
    hanging: set[tuple[str, int, int]] = set()
    for broker_id in sorted(cluster.nodes):
        hanging.update((h.topic, h.partition, h.producer_id) for h in tools.find_hanging(broker_id=broker_id))
    return KafkaToolResult(
        find_hanging_s=time.monotonic() - started,
        runs=len(cluster.nodes),
        hanging=len(hanging),
        list_s=list_s,
    )


# -- driver ------------------------------------------------------------------------------------


@dataclass
class Row:
    brokers: int
    partitions: int
    ours: OursResult
    naive: NaiveResult
    tool: KafkaToolResult


def bench_cluster(brokers: int, sizes: Sequence[int], repeats: int, with_tool: bool) -> Iterator[Row]:
    progress(f"starting a {brokers}-node cluster")
    started = time.monotonic()
    with KafkaCluster(brokers=brokers) as cluster:
        progress(f"{brokers} node(s) up in {time.monotonic() - started:.1f} s ({cluster.bootstrap_servers})")
        first = min(sizes)
        topics: list[tuple[str, int]] = []
        cluster.create_topic(TRAFFIC_TOPIC, partitions=first, timeout_s=120)
        topics.append((TRAFFIC_TOPIC, first))
        started = time.monotonic()
        traffic = make_traffic(cluster, TRAFFIC_TOPIC)
        progress(f"traffic: {traffic.describe()} in {time.monotonic() - started:.1f} s")
        try:
            for size in sorted(sizes):
                grow_to(cluster, size, topics)
                partial, settle_s, first_error = settle(cluster.bootstrap_servers)
                if partial:
                    progress(
                        f"{partial} partial cycle(s) before the cluster settled "
                        f"({settle_s:.1f} s; first: {first_error})"
                    )
                ours = measure_ours(cluster.bootstrap_servers, repeats)
                naive = measure_naive(cluster.bootstrap_servers, repeats)
                tool = (
                    measure_kafka_tool(cluster)
                    if with_tool
                    else KafkaToolResult(float("nan"), 0, 0, float("nan"))
                )
                progress(
                    f"{brokers} broker(s), {size} partitions: ours {ours.warm_s:.3f} s, "
                    f"naive {naive.warm_s:.3f} s, find-hanging {tool.find_hanging_s:.1f} s"
                )
                yield Row(brokers, size, ours, naive, tool)
        finally:
            traffic.close()


STAGE_ORDER = (
    "metadata",
    "producers",
    "list_transactions",
    "configs",
    "offsets",
    "describe_transactions",
    "batch_timestamps",
)


def print_report(rows: Sequence[Row], repeats: int) -> None:
    print()
    print(
        f"== Collection: ours vs naive vs Kafka's find-hanging "
        f"(warm = median of {repeats} cycles; loopback brokers from the test bed) =="
    )
    header = (
        f"{'brokers':>7} {'partitions':>10} | {'ours s':>7} {'ours cold':>9} {'ours req':>8} "
        f"| {'naive s':>7} {'naive cold':>10} {'naive req':>9} {'dp s':>6} "
        f"| {'find-hanging s':>14} {'(JVMs)':>6} {'kafka list s':>12}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r.brokers:>7} {r.partitions:>10} | {r.ours.warm_s:>7.3f} {r.ours.cold_s:>9.3f} "
            f"{sum(r.ours.requests.values()):>8} | {r.naive.warm_s:>7.3f} {r.naive.cold_s:>10.3f} "
            f"{sum(r.naive.requests.values()):>9} {r.naive.producers_s:>6.3f} "
            f"| {r.tool.find_hanging_s:>14.2f} {r.tool.runs:>6} {r.tool.list_s:>12.2f}"
        )
    print()
    print(
        "ours: per-stage seconds (median of the warm cycles; configs+offsets overlap "
        "producers+list_transactions)"
    )
    print(f"{'brokers':>7} {'partitions':>10} | " + " ".join(f"{s:>12.12}" for s in STAGE_ORDER))
    for r in rows:
        print(
            f"{r.brokers:>7} {r.partitions:>10} | "
            + " ".join(f"{r.ours.stages.get(s, float('nan')):>12.4f}" for s in STAGE_ORDER)
        )
    print()
    print("requests per warm cycle, by API (counted on the wire)")
    for r in rows:
        print(
            f"  {r.brokers} broker(s), {r.partitions:>5} partitions  ours : "
            f"{format_requests(r.ours.requests)}"
        )
        print(
            f"  {r.brokers} broker(s), {r.partitions:>5} partitions  naive: "
            f"{format_requests(r.naive.requests)}"
        )
    print()
    print(
        "seen: open producer states (ours / naive), hanging reported by Kafka's find-hanging, "
        "collection errors in ours' last warm cycle"
    )
    for r in rows:
        print(
            f"  {r.brokers} broker(s), {r.partitions:>5} partitions: open {r.ours.open_producers} / "
            f"{r.naive.open_producers}, find-hanging {r.tool.hanging}, errors "
            f"{format_requests(r.ours.errors) or 'none'}"
        )
    print()
    print(
        "ours s / naive s: one full cycle, warm clients. ours also reads offsets (HWM+LSO of every "
        "partition) and broker configs; naive does not. dp s = naive describe_producers alone."
    )
    print(
        "find-hanging s: kafka-transactions.sh find-hanging --broker-id B for each broker, "
        "one JVM start per run INCLUDED; kafka list s = one JVM running 'list' (JVM-start baseline)."
    )


def parse_sizes(text: str) -> tuple[int, ...]:
    return tuple(sorted({int(x) for x in text.split(",") if x.strip()}))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=DEFAULT_SIZES,
        help="partition counts, single node (default 100,1000,3000)",
    )
    parser.add_argument(
        "--cluster3-sizes",
        type=parse_sizes,
        default=DEFAULT_CLUSTER3_SIZES,
        help="partition counts on the 3-node cluster (default 100,1000)",
    )
    parser.add_argument("--no-cluster3", action="store_true", help="skip the 3-node cluster")
    parser.add_argument("--repeats", type=int, default=5, help="warm cycles per size (median)")
    parser.add_argument("--no-kafka-tool", action="store_true", help="skip find-hanging (JVM)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-ups: stop brokers
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid>: every thread's stack to stderr
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(threadName)s %(levelname)s %(name)s: %(message)s"
    )
    # kafka-python logs every refused reconnect of its IO thread while the brokers stop.
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    if min(args.sizes) < 20:
        parser.error("the smallest size must be >= 20 partitions (traffic uses 14)")
    started = time.monotonic()
    rows: list[Row] = []
    plans: list[tuple[int, tuple[int, ...]]] = [(1, args.sizes)]
    if not args.no_cluster3:
        plans.append((3, args.cluster3_sizes))
    for brokers, sizes in plans:
        rows.extend(bench_cluster(brokers, sizes, args.repeats, not args.no_kafka_tool))
    print_report(rows, args.repeats)
    print(f"\ncollect_bench finished in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
