"""The process's logging, configured in one place: our own lines, the libraries' kept quiet.

At the default level (``info``) and above, a line on the daemon's log or the CLI's stderr is
one of ours (a logger under ``exporter``): the libraries' lines say again what ours already
say, once, or describe their own internals:

* kafka-python warns when one of its tasks ran longer than 0.1 s ("It is blocking the event
  loop"), which a loaded 2-core machine does all the time; its failures reach us as results;
* py4j logs every connection at INFO, and a dead JVM's broken pipes at ERROR, which the
  pipeline's supervision reports as one line;
* the Spark driver JVM's start-up lines on its stderr (``WARNING: Using incubator modules``,
  Spark's ``Setting default log level to "WARN"`` banner) are relayed through the
  ``exporter.pipeline.jvm`` logger (see :func:`jvm_line_level`) at DEBUG; its other lines
  (Log4j errors, a crash) at WARNING or ERROR.

``--log.level debug`` shows everything, with one exception: kafka-python stays at WARNING,
because at DEBUG it logs its configuration and every request, a SASL password with them.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Mapping

from exporter import progress
from exporter.config import LOG_LEVELS

#: Third-party loggers and the lowest level they may log at the default level and above.
QUIET_LIBRARIES: Mapping[str, int] = {
    "kafka": logging.ERROR,
    "py4j": logging.CRITICAL,
    "pyspark": logging.ERROR,
    "matplotlib": logging.ERROR,
}
#: Loggers clamped even at DEBUG: kafka-python's DEBUG lines carry credentials.
NEVER_DEBUG: Mapping[str, int] = {"kafka": logging.WARNING}

#: The logger of the Spark driver JVM's own output (see :func:`jvm_line_level`).
JVM_LOGGER = "exporter.pipeline.jvm"

#: What the JVM and Spark print to the driver's stderr at every start, at DEBUG.
JVM_START_LINES: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"^WARNING: Using incubator modules:",
        r'^Setting default log level to "',
        r"^To adjust logging level use sc\.setLogLevel",
        # Newer JDKs' notices about Spark's use of sun.misc.Unsafe and native access.
        r"^WARNING: (A terminally deprecated method|sun\.misc\.Unsafe::|Please consider reporting"
        r"|.* will be removed in a future release|A restricted method|java\.lang\.System::load"
        r"|Use --enable-native-access|Restricted methods will be blocked)",
    )
)
_LOG4J_ERROR = re.compile(r"^\S+ \S+ (ERROR|FATAL) ")
#: The name of the handler :func:`setup_logging` installs.
HANDLER_NAME = "kafka-txn-exporter"
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup_logging(level: str, fmt: str = "text") -> None:
    """One handler on stderr at ``level`` (``text`` or ``json`` lines); the libraries of
    :data:`QUIET_LIBRARIES` quiet unless ``level`` is ``debug``. Safe to call again (reload)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(_TEXT_FORMAT))
    handler.set_name(HANDLER_NAME)
    handler.addFilter(_erase_progress)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    debug = root.level <= logging.DEBUG
    for name, quiet in QUIET_LIBRARIES.items():
        logging.getLogger(name).setLevel(logging.NOTSET if debug else max(quiet, root.level))
    for name, floor in NEVER_DEBUG.items():
        logger = logging.getLogger(name)
        logger.setLevel(max(floor, logger.level, root.level))


def _erase_progress(_record: logging.LogRecord) -> bool:
    """A log line starts on a line of its own, not after a command's progress line."""
    progress.clear()
    return True


def setup_command_logging(level: str) -> None:
    """:func:`setup_logging` for a command, unless a program that called it in-process (a
    test, a script) configured logging already: its handlers are left alone."""
    if all(h.get_name() == HANDLER_NAME for h in logging.getLogger().handlers):
        setup_logging(level)


def jvm_line_level(line: str, previous: int = logging.WARNING) -> int:
    """The level a line the Spark driver JVM wrote to its stderr or stdout is logged at: its
    start-up lines at DEBUG, Log4j's errors (``log4j2.properties`` lets only those through)
    and what follows them (a stack trace) at ERROR, anything else at WARNING (a JVM that
    exits on OutOfMemoryError says so this way)."""
    if any(p.match(line) for p in JVM_START_LINES):
        return logging.DEBUG
    if _LOG4J_ERROR.match(line):
        return logging.ERROR
    if line.startswith(("\t", " ", "Caused by:")) and previous > logging.DEBUG:
        return previous
    return logging.WARNING


def add_log_level(parser: argparse.ArgumentParser) -> None:
    """``--log.level`` of a command (the daemon's comes from its config, overridable)."""
    parser.add_argument(
        "--log.level",
        dest="log_level",
        choices=LOG_LEVELS,
        default="warning",
        help="what the command logs on stderr besides its own messages (default: warning; "
        "debug adds the libraries' and the Spark driver's lines)",
    )
