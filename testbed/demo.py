"""``python -m testbed.demo`` (``make demo``): the daemon against an embedded local Kafka.

Starts a single-node KRaft broker from the test bed, drives scenario traffic (committed and
aborted transactions, a long legitimate transaction with read_committed lag behind it, and
a genuinely hanging transaction), runs the exporter on it and says where to look. Ctrl-C
stops everything it started.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
import time
from pathlib import Path

from exporter.cli import SignalStop
from exporter.config import Config, ConfigError, parse_config
from exporter.daemon import Daemon
from exporter.logs import setup_logging
from exporter.model import ClusterSnapshot, CycleResult, TxnClass
from testbed.broker import KafkaCluster
from testbed.scenarios import (
    OpenTransaction,
    create_hanging_transaction,
    produce_plain,
    run_transaction,
)

log = logging.getLogger("testbed.demo")
LATE_BACKDATE_MS = 30 * 60 * 1000  # older than transaction.max.timeout.ms + 5 min: late at once


def _traffic(bootstrap: str, stop: threading.Event) -> None:
    """Steady transactional traffic, one commit or abort every two seconds."""
    n = 0
    while not stop.wait(2.0):
        n += 1
        try:
            run_transaction(
                bootstrap,
                "orders",
                partition=n % 3,
                records=5,
                commit=n % 4 != 0,
                transactional_id=f"demo-orders-{n % 3}",
            )
            produce_plain(bootstrap, "payments", partition=0, records=3)
        except Exception as e:  # the demo keeps going; the exporter will show what broke
            log.warning("demo traffic: %s", e)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.demo", description=__doc__)
    parser.add_argument("--web.listen-address", dest="listen", default="127.0.0.1:9851")
    parser.add_argument("--interval", default="5s", help="collection interval (default 5s)")
    args = parser.parse_args(argv)
    try:  # bad flags are reported before anything starts
        _config(args.listen, args.interval, "127.0.0.1:9092")
    except ConfigError as e:
        parser.error(str(e))
    # The demo speaks for itself: one status line per cycle. The exporter's and the test
    # bed's INFO lines would only repeat it; their warnings still show.
    setup_logging("warning")
    logging.getLogger("testbed").setLevel(logging.ERROR)
    signals = SignalStop()
    stop = threading.Event()  # stops the traffic thread; set from the main thread only
    work = Path(tempfile.mkdtemp(prefix="kte-demo-"))
    print("Starting a local Kafka broker (the first run downloads the jars with Maven)...", flush=True)
    with KafkaCluster(brokers=1, work_dir=work / "kafka") as cluster:
        bootstrap = cluster.bootstrap_servers
        cluster.create_topic("orders", partitions=3)
        cluster.create_topic("payments", partitions=2)
        config = _config(args.listen, args.interval, bootstrap)
        traffic = threading.Thread(target=_traffic, args=(bootstrap, stop), daemon=True)
        with OpenTransaction(bootstrap, "payments", partition=0, transaction_timeout_ms=600_000) as long_txn:
            long_txn.begin(records=2)
            hanging = create_hanging_transaction(cluster, "orders", partition=1, backdate_ms=LATE_BACKDATE_MS)
            status = CycleStatus(
                _base_url(args.listen), bootstrap, hanging.topic, hanging.partition, hanging.start_offset
            )
            daemon = Daemon(config, listeners=[status])
            try:
                daemon.start()
                traffic.start()
                _explain(args.listen, bootstrap, hanging.topic, hanging.partition, hanging.start_offset)
                signals.wait()
            finally:
                print("\nStopping the exporter, the traffic and the broker...", flush=True)
                stop.set()
                daemon.stop()
                traffic.join(timeout=10)
    return 0


class CycleStatus:
    """A cycle listener: one line per cycle saying what it found; the next steps once the
    hanging transaction is found."""

    def __init__(self, base_url: str, bootstrap: str, topic: str, partition: int, start_offset: int) -> None:
        self.base_url = base_url
        self.bootstrap = bootstrap
        self.hanging = (topic, partition, start_offset)
        self.cycles = 0
        self.found = False
        self.started = time.monotonic()

    def __call__(self, snapshot: ClusterSnapshot, result: CycleResult) -> None:
        self.cycles += 1
        print(status_line(self.cycles, snapshot, result, time.time()), flush=True)
        if not self.found and any(
            f.txn_class is TxnClass.HANGING and (f.topic, f.partition, f.start_offset) == self.hanging
            for f in result.findings
        ):
            self.found = True
            self._next_steps(time.monotonic() - self.started)

    def _next_steps(self, after_s: float) -> None:
        topic, partition, start_offset = self.hanging
        cli = ".venv/bin/kafka-txn-exporter"
        print(
            f"""
Found the hanging transaction {after_s:.0f} s after the exporter started. In another shell:
  {cli} find-hanging --bootstrap-server {self.bootstrap} --max-transaction-timeout 0
      (answered from this exporter's last cycle in under a second; --fresh recomputes)
  curl -s {self.base_url}/api/v1/findings            (the findings as JSON)
  curl -s {self.base_url}/metrics | grep kafka_txn_hanging_transaction_info
  {cli} abort --bootstrap-server {self.bootstrap} --topic {topic} --partition {partition} \\
      --start-offset {start_offset}             (a dry run; add --yes to abort it)
""",
            flush=True,
        )


def status_line(cycle: int, snapshot: ClusterSnapshot, result: CycleResult, now_s: float) -> str:
    """``HH:MM:SS cycle N (X s): what the cycle found`` in one line."""
    counts = {c: n for c, n in result.open_transactions_by_class if n}
    found = []
    hanging = [f for f in result.findings if f.txn_class is TxnClass.HANGING]
    for f in hanging[:2]:
        reason = f.hanging_reason.value if f.hanging_reason else "?"
        age = f"{f.duration_ms // 60_000} min"
        found.append(f"HANGING {f.topic}-{f.partition} offset {f.start_offset} ({age}, {reason})")
    if len(hanging) > 2:
        found.append(f"{len(hanging) - 2} more hanging")
    for txn_class in (TxnClass.SUSPECTED_HANGING, TxnClass.LATE, TxnClass.UNKNOWN, TxnClass.ONGOING):
        if counts.get(txn_class):
            note = " (confirmed next cycle)" if txn_class is TxnClass.SUSPECTED_HANGING else ""
            found.append(f"{counts[txn_class]} {txn_class.value.replace('_', ' ')}{note}")
    lags = [p for p in result.partitions if p.lso_lag]
    if lags:
        top = max(lags, key=lambda p: p.lso_lag or 0)
        found.append(f"LSO lag up to {top.lso_lag} ({top.topic}-{top.partition})")
    partial = "" if snapshot.complete else f", partial: {len(snapshot.errors)} error(s)"
    seconds = max(0.0, now_s - snapshot.taken_at_ms / 1000)
    when = time.strftime("%H:%M:%S", time.localtime(now_s))
    return f"{when} cycle {cycle} ({seconds:.1f} s{partial}): {'; '.join(found) or 'no open transaction'}"


def _config(listen: str, interval: str, bootstrap: str) -> Config:
    return parse_config(
        {
            "web": {"listen_address": listen},
            "clusters": [
                {
                    "name": "demo",
                    "bootstrap_servers": bootstrap,
                    "interval": interval,
                    "request_timeout": "900ms",
                }
            ],
        }
    )


def _base_url(listen: str) -> str:
    host, _, port = listen.rpartition(":")
    return f"http://{host or '127.0.0.1'}:{port}"


def _explain(listen: str, bootstrap: str, topic: str, partition: int, start_offset: int) -> None:
    base = _base_url(listen)
    print(
        f"""Kafka on {bootstrap}: transactional traffic on orders and payments, a long legitimate
  transaction on payments-0, a hanging one on {topic}-{partition} (start offset {start_offset}, 30 min old).
The exporter serves {base}/metrics and {base}/api/v1/findings.
Spark starts in the background; then one line per cycle. Ctrl-C stops everything.
""",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
