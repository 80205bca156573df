"""``kafka-txn-exporter``: the daemon (``run``) and the operator commands.

Flags follow Prometheus exporters (``--config.file``, ``--web.listen-address``,
``--log.level``). Exit codes: 0 ok, 1 findings (find-hanging) or refused, 2 usage or config
error, 3 Kafka error, 4 unexpected error.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from types import FrameType

from exporter import __version__
from exporter.config import LOG_LEVELS, Config, ConfigError, WebConfig, load_config

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_KAFKA = 3
EXIT_INTERNAL = 4

log = logging.getLogger("exporter")


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"), "level": record.levelname,
                 "logger": record.name, "msg": record.getMessage()}
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup_logging(level: str, fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The clients are chatty at INFO; their errors reach us as results anyway.
    for noisy in ("kafka", "py4j", "apscheduler.executors.default", "apscheduler.scheduler"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


class SignalStop:
    """Waits for SIGTERM or SIGINT.

    The handler only records the signal: it runs between two bytecodes of the main thread,
    so it must not take a lock that thread may hold (``threading.Event.set`` from a handler
    deadlocks when a second signal arrives while the first one is inside ``Event.set``).
    """

    def __init__(self) -> None:
        self.received: int | None = None
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.received = signum

    def wait(self, poll_s: float = 0.2) -> None:
        while self.received is None:
            time.sleep(poll_s)
        log.info("received %s, stopping", signal.Signals(self.received).name)


def _add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="run the exporter daemon",
                       description="Collect transaction health on a schedule and serve /metrics.")
    p.add_argument("--config.file", dest="config_file", required=True, metavar="FILE",
                   help="YAML configuration file (see docs/config.example.yml)")
    p.add_argument("--web.listen-address", dest="listen_address", metavar="HOST:PORT",
                   help="override web.listen_address")
    p.add_argument("--log.level", dest="log_level", choices=LOG_LEVELS,
                   help="override log.level")
    p.set_defaults(handler=_cmd_run)
    c = sub.add_parser("check-config", help="validate a configuration file and exit",
                       description="Validate a configuration file; every problem is listed.")
    c.add_argument("--config.file", dest="config_file", required=True, metavar="FILE")
    c.set_defaults(handler=_cmd_check_config)


def _load(args: argparse.Namespace) -> Config:
    config = load_config(args.config_file)
    overrides: list[str] = []
    if getattr(args, "listen_address", None):
        from exporter.config import parse_config

        # Validate the flag exactly like the file's key.
        try:
            parse_config({"clusters": [{"name": "x", "bootstrap_servers": "h:1"}],
                          "web": {"listen_address": args.listen_address}}, env={})
        except ConfigError as e:
            overrides.extend(p.replace("web.listen_address", "--web.listen-address")
                             for p in e.problems)
        config = replace(config, web=WebConfig(listen_address=args.listen_address,
                                               telemetry_path=config.web.telemetry_path))
    if overrides:
        raise ConfigError(overrides)
    if getattr(args, "log_level", None):
        config = replace(config, log=replace(config.log, level=args.log_level))
    return config


def _cmd_check_config(args: argparse.Namespace) -> int:
    config = _load(args)
    names = ", ".join(c.name for c in config.clusters)
    print(f"{args.config_file}: ok ({len(config.clusters)} cluster(s): {names})")
    return EXIT_OK


def _cmd_run(args: argparse.Namespace) -> int:
    from exporter.daemon import Daemon

    config = _load(args)
    setup_logging(config.log.level, config.log.format)
    stop = SignalStop()
    daemon = Daemon(config)
    try:
        daemon.start()
        stop.wait()
    finally:
        daemon.stop()
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafka-txn-exporter",
        description="Kafka transaction health: a Prometheus exporter and operator commands.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run(sub)
    from exporter.operator.commands import add_commands

    add_commands(sub)
    from exporter.history.cli import add_report

    add_report(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except ConfigError as e:
        print(f"kafka-txn-exporter: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # never exit 1: scripts read it as "findings" / "refused"
        log.debug("unexpected failure", exc_info=True)
        print(f"kafka-txn-exporter: unexpected error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
