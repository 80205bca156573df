"""``kafka-txn-exporter``: the daemon (``run``) and the operator commands.

Flags follow Prometheus exporters (``--config.file``, ``--web.listen-address``,
``--log.level``). Exit codes (:class:`~exporter.exitcodes.ExitCode`): 0 ok, 1 findings
(find-hanging, doctor) or refused, 2 usage or config error (also: the listen address cannot
be bound), 3 Kafka error, 4 unexpected error, 130 interrupted. With ``--output json`` an error
is a JSON document on stdout too: ``{"error": "...", "exit_code": N}``.

``run`` reloads its configuration on SIGHUP, as Prometheus does: the file is validated first;
when it is invalid the daemon keeps running on the previous configuration and logs why.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from exporter import __version__
from exporter.config import (
    LOG_LEVELS,
    WEB,
    Config,
    ConfigError,
    load_config,
    parse_flag,
)
from exporter.exitcodes import ExitCode
from exporter.logs import setup_command_logging, setup_logging
from exporter.pipeline.class_archive import CLASS_ARCHIVE_ENV

if TYPE_CHECKING:
    from exporter.daemon import Daemon
    from exporter.daemon.web import WebSettings

# The names scripts and older imports use; the values are the enum's.
EXIT_OK = ExitCode.OK
EXIT_FINDINGS = ExitCode.FINDINGS
EXIT_USAGE = ExitCode.USAGE
EXIT_KAFKA = ExitCode.KAFKA
EXIT_INTERNAL = ExitCode.INTERNAL
EXIT_INTERRUPTED = ExitCode.INTERRUPTED

log = logging.getLogger("exporter")


class SignalStop:
    """Waits for SIGTERM or SIGINT (stop) and SIGHUP (reload).

    The handler only records the signal: it runs between two bytecodes of the main thread,
    so it must not take a lock that thread may hold (``threading.Event.set`` from a handler
    deadlocks when a second signal arrives while the first one is inside ``Event.set``).
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._hangups = 0
        self._hangups_seen = 0
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGHUP, self._hangup)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.received = signum

    def _hangup(self, _signum: int, _frame: FrameType | None) -> None:
        self._hangups += 1

    def wait(self, poll_s: float = 0.2) -> bool:
        """Block until a signal: True to stop, False to reload (SIGHUP)."""
        while self.received is None and self._hangups == self._hangups_seen:
            time.sleep(poll_s)
        if self.received is not None:
            log.info("received %s, stopping", signal.Signals(self.received).name)
            return True
        self._hangups_seen = self._hangups
        log.info("received SIGHUP, reloading the configuration")
        return False


# fmt: off
def _add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="run the exporter daemon",
                       description="Collect transaction health on a schedule and serve /metrics.")
    p.add_argument("--config.file", dest="config_file", required=True, metavar="FILE",
                   help="YAML configuration file (see docs/config.example.yml)")
    p.add_argument("--web.listen-address", dest="listen_address", metavar="HOST:PORT",
                   help="override web.listen_address")
    p.add_argument("--web.config.file", dest="web_config_file", metavar="FILE",
                   help="TLS and basic auth for the endpoints (Prometheus exporter-toolkit "
                        "web config format); overrides web.config_file")
    p.add_argument("--log.level", dest="log_level", choices=LOG_LEVELS,
                   help="override log.level")
    p.set_defaults(handler=_cmd_run)
    c = sub.add_parser("check-config", help="validate a configuration file and exit",
                       description="Validate a configuration file; every problem is listed.")
    c.add_argument("--config.file", dest="config_file", required=True, metavar="FILE")
    c.set_defaults(handler=_cmd_check_config)
    a = sub.add_parser("class-archive",
                       help="write a class archive that makes the embedded Spark start faster",
                       description="Start the embedded Spark driver, run the pipeline once on a "
                                   "tiny built-in snapshot and write the JVM's class archive "
                                   "(Class Data Sharing) to FILE. Point spark.class_archive (or "
                                   f"${CLASS_ARCHIVE_ENV}) at it: the driver then starts faster. "
                                   "Write it again after changing the JVM or Spark.")
    a.add_argument("--out", required=True, metavar="FILE", help="where to write the archive")
    a.add_argument("--config.file", dest="config_file", metavar="FILE",
                   help="take the spark section (driver_memory, conf) from this configuration")
    a.set_defaults(handler=_cmd_class_archive)
# fmt: on


def load_run_config(
    config_file: str, *, listen_address: str | None = None, log_level: str | None = None
) -> Config:
    """The file's config with the daemon's flags applied; each flag is validated by the key
    it overrides, and named in the message. Raises ConfigError listing every problem."""
    problems: list[str] = []
    config: Config | None = None
    try:
        config = load_config(config_file)
    except ConfigError as e:
        problems.extend(e.problems)
    if listen_address is not None:
        try:
            address = parse_flag(WEB, "listen_address", listen_address, "--web.listen-address")
        except ConfigError as e:
            problems.extend(e.problems)
        else:
            if config is not None:
                config = replace(config, web=replace(config.web, listen_address=address))
    if problems or config is None:
        raise ConfigError(problems)
    if log_level is not None:
        config = replace(config, log=replace(config.log, level=log_level))
    return config


def _load(args: argparse.Namespace) -> Config:
    return _load_with_web(args)[0]


def _load_with_web(args: argparse.Namespace) -> tuple[Config, WebSettings]:
    """The config and its web config file's settings (every problem named, exit 2)."""
    config = load_run_config(
        args.config_file,
        listen_address=getattr(args, "listen_address", None),
        log_level=getattr(args, "log_level", None),
    )
    if getattr(args, "web_config_file", None):
        config = replace(config, web=replace(config.web, config_file=args.web_config_file))
    from exporter.daemon.web import WebSettings, load_web_config

    web = load_web_config(config.web.config_file) if config.web.config_file else WebSettings()
    return config, web


#: check-config names this many clusters, then counts the rest.
CHECK_CONFIG_NAMES = 10


def _cmd_check_config(args: argparse.Namespace) -> int:
    config = _load(args)
    names = [c.name for c in config.clusters]
    shown = ", ".join(names[:CHECK_CONFIG_NAMES])
    if len(names) > CHECK_CONFIG_NAMES:
        shown += f" and {len(names) - CHECK_CONFIG_NAMES} more"
    files = f", cluster files from {config.cluster_files}" if config.cluster_files else ""
    print(f"{args.config_file}: ok ({len(names)} cluster(s): {shown}{files})")
    return ExitCode.OK


def _cmd_class_archive(args: argparse.Namespace) -> int:
    from exporter.config import SparkConfig
    from exporter.pipeline.archive_writer import check_destination, write_archive
    from exporter.pipeline.class_archive import ClassArchiveError
    from exporter.pipeline.session import is_embedded

    spark = _load(args).spark if args.config_file else SparkConfig()
    if not is_embedded(spark):
        return fail(args, "class-archive: the configuration's Spark is not the embedded driver "
                    "(spark.master local[N], no spark.connect_url)", ExitCode.USAGE)  # fmt: skip
    out = Path(args.out)
    problem = check_destination(out)
    if problem:
        return fail(args, f"--out: {problem}", ExitCode.USAGE)
    setup_logging("warning", "text")
    started = time.monotonic()
    try:
        size = write_archive(out, spark)
    except ClassArchiveError as e:
        return fail(args, f"class archive not written: {e}", ExitCode.INTERNAL)
    print(f"{out}: class archive of {size / 2**20:.0f} MiB written in {time.monotonic() - started:.0f} s; "
          f"set spark.class_archive (or ${CLASS_ARCHIVE_ENV}) to it")  # fmt: skip
    return ExitCode.OK


def _cmd_run(args: argparse.Namespace) -> int:
    from exporter.daemon.heap import lean_heap

    lean_heap()
    config = _load(args)
    setup_logging(config.log.level, config.log.format)
    from exporter.pipeline.launch import launch_early

    launch_early(config.spark)  # the JVM starts while the daemon is imported and built
    from exporter.daemon import Daemon
    from exporter.daemon.listen import ListenError

    stop = SignalStop()
    # Before the first thread starts (the history writer's starts with the Daemon): its
    # imports can then never race another thread's (exporter/daemon/preload.py).
    from exporter.daemon.preload import import_before_threads

    import_before_threads(config)
    daemon = Daemon(config)
    try:
        try:
            daemon.start()
        except ListenError as e:  # the HTTP bind: in use, not a local address, not permitted
            print(f"kafka-txn-exporter: {e.strerror}", file=sys.stderr)
            return ExitCode.USAGE
        while not stop.wait():
            _reload(args, daemon)
    finally:
        daemon.stop()
    end_process(ExitCode.OK)


def end_process(code: int) -> NoReturn:
    """End the process once the daemon has stopped (its state saved, its history flushed, Spark
    stopped), without the interpreter's finalization: a native thread (librdkafka's, for one,
    calls into Python for the clients' log callback) that calls into Python while it
    finalizes aborts the process (``PyGILState_Release ... finalizing``, SIGABRT) after a
    clean stop; it happened once in CI. Logs and the standard streams are flushed first."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(int(code))


def _reload(args: argparse.Namespace, daemon: Daemon) -> None:
    """Read and validate the files again and switch to them (SIGHUP). Whatever fails (a file
    unreadable, not UTF-8, not YAML, invalid; the listen address; anything unexpected), the
    daemon keeps running on the previous configuration and one line says which file and
    what is wrong. A reload never ends the process."""
    from exporter.daemon.listen import ListenError

    kept = "reload failed, still running on the previous configuration"
    try:
        config, web = _load_with_web(args)
    except ConfigError as e:
        log.error("%s: %s", kept, _problems_line(args.config_file, e))
        return
    except Exception as e:  # never end the daemon
        log.error("%s: %s: unexpected %s: %s", kept, args.config_file, type(e).__name__, _line(str(e)))
        log.debug("reload failure", exc_info=True)
        return
    try:
        daemon.reload(config, web)
    except ConfigError as e:  # the web config file changed in between
        log.error("%s: %s", kept, _problems_line(args.config_file, e))
        return
    except ListenError as e:
        log.error("%s: %s: %s", kept, args.config_file, _line(e.strerror or str(e)))
        return
    except Exception as e:
        where = config.web.config_file or args.config_file
        log.error("%s: %s: unexpected %s: %s", kept, where, type(e).__name__, _line(str(e)))
        log.debug("reload failure", exc_info=True)
        return
    setup_logging(config.log.level, config.log.format)


def _problems_line(config_file: str, e: ConfigError) -> str:
    """Every problem on one line, each naming its file: the web config file's problems name
    it already; the others are the config file's."""
    from exporter.daemon.web import WebConfigError

    if isinstance(e, WebConfigError):
        return _line("; ".join(e.problems))
    prefix = f"{config_file}: "
    return prefix + _line("; ".join(p.removeprefix(prefix) for p in e.problems))


def _line(text: str) -> str:
    return " ".join(text.split())


# fmt: off
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
# fmt: on


def fail(args: argparse.Namespace | None, message: str, code: ExitCode) -> int:
    """Report an error: a line on stderr, and with ``--output json`` a document on stdout."""
    print(f"kafka-txn-exporter: {message}", file=sys.stderr)
    if args is not None and getattr(args, "output", None) == "json":
        print(json.dumps({"error": message, "exit_code": int(code)}))
    return int(code)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the flags; with ``--output json``, argparse's own errors are JSON on stdout too."""
    words = list(sys.argv[1:] if argv is None else argv)
    wants_json = "--output=json" in words or any(
        a == "--output" and b == "json" for a, b in itertools.pairwise(words)
    )
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = build_parser().parse_args(words)
    except SystemExit as e:
        sys.stderr.write(errors.getvalue())
        lines = errors.getvalue().strip().splitlines()
        if e.code == ExitCode.USAGE and wants_json and lines:
            print(json.dumps({"error": lines[-1], "exit_code": int(ExitCode.USAGE)}))
        raise
    sys.stderr.write(errors.getvalue())
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args: argparse.Namespace | None = None
    try:
        args = _parse(argv)
        if args.command not in ("run", "class-archive"):  # those set it from their config
            setup_command_logging(getattr(args, "log_level", None) or "warning")
        return int(args.handler(args))
    except ConfigError as e:
        return fail(args, str(e), ExitCode.USAGE)
    except KeyboardInterrupt:
        return fail(args, "interrupted", ExitCode.INTERRUPTED)
    except Exception as e:  # never exit 1: scripts read it as "findings" / "refused"
        log.debug("unexpected failure", exc_info=True)
        return fail(args, f"unexpected error: {type(e).__name__}: {e}", ExitCode.INTERNAL)


if __name__ == "__main__":
    sys.exit(main())
