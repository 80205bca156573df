"""``kafka-txn-exporter report``: the postmortem report over a window of the history.

Exit codes: 0 ok (also when the window holds no history: a clear message says so; files that
cannot be read are skipped and listed in the report), 2 a bad flag (named), a configuration
error, a history path that does not exist or is not a history, an output file that cannot be
written (all checked before the run); 4 an unexpected error.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from exporter.config import ConfigError, SparkConfig, parse_config, parse_duration_ms, read_text, read_yaml
from exporter.history.config import HistoryConfig, parse_history_section
from exporter.logs import add_log_level
from exporter.progress import progress, stage

EXIT_OK = 0
EXIT_USAGE = 2
FORMATS = ("text", "json", "html")


class _UsageError(ValueError):
    pass


class NotAHistoryError(ValueError):
    """The history path does not exist or holds no history."""


def add_report(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``report`` on the main parser."""
    p = sub.add_parser(
        "report",
        help="postmortem report over the transaction history (Spark)",
        description="Incident timeline, applications ranked by late/hanging time, topics "
        "ranked by time blocked, exporter health and CLI actions, over a window of "
        "the history the daemon writes (history: in the config).",
        epilog="exit codes: 0 ok (or no history in the window); 2 usage or configuration "
        "error; 4 unexpected error",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--config.file",
        dest="config_file",
        metavar="FILE",
        help="the exporter's YAML configuration (its history: and spark: sections are used)",
    )
    where.add_argument(
        "--history", metavar="PATH", help="the history directory or URL (history.path), with a local Spark"
    )
    p.add_argument("--cluster", metavar="NAME", help="only this cluster (default: all)")
    p.add_argument(
        "--since",
        metavar="DURATION",
        help="the window ends now (or --to) and starts this long before (default 24h)",
    )
    p.add_argument(
        "--from",
        dest="from_",
        metavar="TIME",
        help="window start: ISO 8601 (2026-11-23T02:00:00Z) or epoch ms",
    )
    p.add_argument("--to", metavar="TIME", help="window end (default: now)")
    p.add_argument("--format", choices=FORMATS, default="text", help="default: text")
    p.add_argument("--output", metavar="FILE", help="write the report to FILE (atomically) instead of stdout")
    add_log_level(p)
    p.set_defaults(handler=_cmd_report, report_parser=p)


def parse_time_ms(value: str, flag: str) -> int:
    text = value.strip()
    if text.isdigit():
        return int(text)
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise _UsageError(
            f"{flag}: {value!r} is not a time (use ISO 8601 such as "
            "2026-11-23T02:00:00Z, or epoch milliseconds)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return int(parsed.timestamp() * 1000)


def window_ms(args: argparse.Namespace, now_ms: int) -> tuple[int, int]:
    if args.since is not None and args.from_ is not None:
        raise _UsageError("--since and --from are mutually exclusive")
    to_ms = parse_time_ms(args.to, "--to") if args.to is not None else now_ms
    if args.from_ is not None:
        from_ms = parse_time_ms(args.from_, "--from")
    else:
        try:
            span = parse_duration_ms(args.since if args.since is not None else "24h")
        except ValueError:
            raise _UsageError(f"--since: {args.since!r} is not a duration (use e.g. 24h, 7d, 90m)") from None
        if span <= 0:
            raise _UsageError("--since: must be longer than 0")
        from_ms = to_ms - span
    if from_ms >= to_ms:
        raise _UsageError("--from: must be before --to")
    return from_ms, to_ms


def resolve(args: argparse.Namespace) -> tuple[HistoryConfig, SparkConfig]:
    """The history and the Spark to read it with, from --config.file or --history."""
    if args.history is not None:
        history, problems = parse_history_section({"path": args.history})
        if history is None:
            raise _UsageError("--history: " + "; ".join(p.split(": ", 1)[-1] for p in problems))
        return history, SparkConfig(master="local[2]", app_name="kafka-txn-exporter-report")
    if args.config_file is None:
        raise _UsageError("one of --config.file or --history is required")
    try:  # the file may hold secrets: a YAML error is named by line and column only
        raw = read_yaml(read_text(args.config_file), args.config_file)
    except ConfigError as e:
        raise _UsageError(f"--config.file: {'; '.join(e.problems)}") from None
    if not isinstance(raw, dict):
        raise _UsageError(f"--config.file {args.config_file}: not a mapping")
    history, problems = parse_history_section(raw.get("history"))
    if problems:
        raise ConfigError(problems)
    if history is None:
        raise _UsageError(
            f"--config.file {args.config_file}: no history: section (history is "
            "off); give --history PATH to read one elsewhere"
        )
    rest = {k: v for k, v in raw.items() if k != "history"}
    config = parse_config(rest, env=os.environ, base_dir=Path(args.config_file).resolve().parent)
    spark = config.spark
    return history, SparkConfig(
        master=spark.master,
        connect_url=spark.connect_url,
        app_name="kafka-txn-exporter-report",
        local_dir=spark.local_dir,
        driver_memory=spark.driver_memory,
        conf=spark.conf,
    )


def output_problem(path: str) -> str | None:
    """Why the report cannot be written to ``path`` (checked before the run, with a probe
    file in its directory), or None."""
    target = Path(path)
    parent = target.parent
    if not parent.is_dir():
        return (
            f"directory {str(parent)!r} does not exist"
            if not parent.exists()
            else f"{parent} is not a directory"
        )
    if target.is_dir():
        return f"{target} is a directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"cannot write to {parent}: {e.strerror or e}"
    return None


def history_flag(args: argparse.Namespace, history: HistoryConfig) -> str:
    """How the operator named the history, for a message."""
    if args.history is not None:
        return f"--history {history.redacted_path}"
    return f"history.path {history.redacted_path} (--config.file {args.config_file})"


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or Path("."))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _cmd_report(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.report_parser
    now_ms = int(time.time() * 1000)
    try:
        from_ms, to_ms = window_ms(args, now_ms)
        history, spark_config = resolve(args)
        problem = output_problem(args.output) if args.output is not None else None
        if problem:
            raise _UsageError(f"--output: {problem}")
        from exporter.history.store import local_history_problem

        problem = local_history_problem(history.local_path) if history.is_local else None
        if problem:
            raise _UsageError(f"{history_flag(args, history)}: {problem}")
    except _UsageError as e:
        parser.error(str(e))  # exit 2, flag named
    with progress("report"):
        try:
            report = run_report(
                history, spark_config, from_ms=from_ms, to_ms=to_ms, cluster=args.cluster, now_ms=now_ms
            )
        except NotAHistoryError as e:  # a remote path, checked once Spark runs
            parser.error(f"{history_flag(args, history)}: {e}")
        text = None
        if not report["empty"]:
            from exporter.history import render

            stage("rendering")
            renderers = {"json": render.to_json, "html": render.to_html, "text": render.to_text}
            text = renderers[args.format](report)
    unreadable = report.get("unreadable_files") or []
    if unreadable:
        print(
            f"{len(unreadable)} unreadable file(s) skipped, listed in the report: {', '.join(unreadable[:3])}"
            + (" ..." if len(unreadable) > 3 else ""),
            file=sys.stderr,
        )
    if text is None:
        where = f" for cluster {args.cluster}" if args.cluster else ""
        print(
            f"no history in that window ({report['from']} .. {report['to']}{where}) at "
            f"{history.redacted_path}",
            file=sys.stderr,
        )
        return EXIT_OK
    if args.output is not None:
        write_atomically(args.output, text)
        print(f"report written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def run_report(
    history: HistoryConfig,
    spark_config: SparkConfig,
    *,
    from_ms: int,
    to_ms: int,
    cluster: str | None,
    now_ms: int,
) -> dict[str, Any]:
    from pyspark import SparkContext

    from exporter.history.report import build_report
    from exporter.history.store import HistoryStore
    from exporter.pipeline.session import spark_session, stop

    # A session already running in this process (a test's, an embedding program's) is
    # reused by getOrCreate and must not be stopped here.
    existed = SparkContext._active_spark_context is not None
    stage("starting Spark")
    spark = spark_session(spark_config)
    try:
        store = HistoryStore(spark, history, skip_corrupt=True)
        problem = store.is_history()
        if problem:
            raise NotAHistoryError(problem)
        return build_report(store, from_ms=from_ms, to_ms=to_ms, cluster=cluster, now_ms=now_ms)
    finally:
        if not existed and not spark_config.connect_url:
            stop(spark)
