"""``python -m testbed fetch|up``: fetch the Kafka jars, or run a local cluster.

python -m testbed fetch --kafka-version 4.4.0
python -m testbed up --brokers 3
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from types import FrameType

from testbed.broker import KafkaCluster
from testbed.maven import FetchError, fetch, selected_version

log = logging.getLogger(__name__)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m testbed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    sub = parser.add_subparsers(dest="command", required=True)
    fetch_cmd = sub.add_parser("fetch", help="download and verify the Kafka jars")
    fetch_cmd.add_argument("--kafka-version", default=None,
                           help="Kafka release (default: $KAFKA_VERSION or 4.4.0)")  # fmt: skip
    up = sub.add_parser("up", help="run a local KRaft cluster until Ctrl-C / SIGTERM")
    up.add_argument("--kafka-version", default=None)
    up.add_argument("--brokers", type=int, default=1)
    up.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                    help="extra server property for every node (repeatable)")  # fmt: skip
    return parser


def cmd_fetch(version: str | None) -> int:
    started = time.monotonic()
    try:
        dist = fetch(version)
    except FetchError as exc:
        print(f"fetch failed: {exc}", file=sys.stderr)
        return 1
    elapsed = time.monotonic() - started
    print(f"Kafka {dist.version} (tools {dist.tools_version}) ready in {elapsed:.1f} s")
    print(f"  broker jars: {dist.broker_lib}")
    print(f"  tools jars:  {dist.tools_lib}")
    return 0


def _parse_properties(pairs: list[str]) -> dict[str, str]:
    props = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--property needs KEY=VALUE, got {pair!r}")
        props[key.strip()] = value.strip()
    return props


def cmd_up(version: str | None, brokers: int, properties: dict[str, str]) -> int:
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    started = time.monotonic()
    dist = fetch(selected_version(version))
    with KafkaCluster(dist, brokers=brokers, server_properties=properties) as cluster:
        print(f"Kafka {dist.version}: {brokers} node(s) up in {time.monotonic() - started:.1f} s")
        print(f"bootstrap.servers={cluster.bootstrap_servers}")
        for node in cluster:
            print(f"  node {node.node_id}: port {node.port}, jmx {node.jmx_port} "
                  f"({node.jmx_url}), log {node.log_path}")  # fmt: skip
        sys.stdout.flush()
        while not stop.wait(1.0):
            pass
    print("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    if args.command == "fetch":
        return cmd_fetch(args.kafka_version)
    return cmd_up(args.kafka_version, args.brokers, _parse_properties(args.property))


if __name__ == "__main__":
    sys.exit(main())
