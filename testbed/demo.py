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
from pathlib import Path

from exporter.cli import SignalStop
from exporter.config import Config, ConfigError, parse_config
from exporter.daemon import Daemon
from exporter.logs import setup_logging
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
    setup_logging("info")
    signals = SignalStop()
    stop = threading.Event()  # stops the traffic thread; set from the main thread only
    work = Path(tempfile.mkdtemp(prefix="kte-demo-"))
    print("Starting a local Kafka broker (first run downloads the jars with Maven)...", flush=True)
    with KafkaCluster(brokers=1, work_dir=work / "kafka") as cluster:
        bootstrap = cluster.bootstrap_servers
        cluster.create_topic("orders", partitions=3)
        cluster.create_topic("payments", partitions=2)
        config = _config(args.listen, args.interval, bootstrap)
        daemon = Daemon(config)
        traffic = threading.Thread(target=_traffic, args=(bootstrap, stop), daemon=True)
        with OpenTransaction(bootstrap, "payments", partition=0, transaction_timeout_ms=600_000) as long_txn:
            long_txn.begin(records=2)
            hanging = create_hanging_transaction(cluster, "orders", partition=1, backdate_ms=LATE_BACKDATE_MS)
            try:
                daemon.start()
                traffic.start()
                _explain(
                    args.listen,
                    bootstrap,
                    hanging.topic,
                    hanging.partition,
                    hanging.producer_id,
                    hanging.start_offset,
                )
                signals.wait()
            finally:
                print("\nStopping the exporter, the traffic and the broker...", flush=True)
                stop.set()
                daemon.stop()
                traffic.join(timeout=10)
    return 0


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


def _explain(
    listen: str, bootstrap: str, topic: str, partition: int, producer_id: int, start_offset: int
) -> None:
    host, _, port = listen.rpartition(":")
    base = f"http://{host or '127.0.0.1'}:{port}"
    print(
        f"""
kafka-txn-exporter demo is running.
  Kafka:    {bootstrap}
  Metrics:  {base}/metrics     (ready: {base}/readyz)

What to expect within two or three cycles (5 s each):
  kafka_txn_hanging_transaction_info{{topic="{topic}",partition="{partition}",
      producer_id="{producer_id}",start_offset="{start_offset}",...}} 1
      a hanging transaction: open on the partition, unknown to its coordinator (KIP-664)
  kafka_txn_partitions_with_late_transactions{{broker="1"}} 1   (it is back-dated 30 minutes)
  kafka_txn_partition_last_stable_offset_lag{{topic="payments",partition="0"}} growing
      behind a legitimate open transaction, which is classified ongoing, not hanging
  kafka_txn_open_transactions{{class="..."}} and kafka_txn_coordinator_transactions{{state="..."}}

Try the operator commands in another shell:
  .venv/bin/kafka-txn-exporter find-hanging --bootstrap-server {bootstrap} --max-transaction-timeout 0
  .venv/bin/kafka-txn-exporter abort --bootstrap-server {bootstrap} \\
      --topic {topic} --partition {partition} --start-offset {start_offset}

Ctrl-C stops everything.
""",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
