"""librdkafka's log lines, rate-limited per cluster and kind.

While a cluster is unreachable librdkafka logs every failed connect, every broker-down
transition and every timed-out request: some 28 ERROR lines per cycle, each a variation of
the same few messages. :class:`LibrdkafkaLog` is given to confluent-kafka as its ``logger``:
the first line of each *kind* (librdkafka's facility plus the message with its numbers
blanked, so ``Connect to ipv4#127.0.0.1:9092 failed`` and the same for port 9093 are one kind)
is logged at its own level; the same kind again within :data:`DEFAULT_WINDOW_S` is logged at
DEBUG only; the first line of the kind after the window says how many were held back. At
DEBUG every line is still visible.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

#: One line per cluster and kind per this many seconds (5 minutes).
DEFAULT_WINDOW_S = 300.0
LOGGER_NAME = "exporter.kafka.librdkafka"
_NUMBERS = re.compile(r"\d+")


def kind_of(facility: str, message: str) -> str:
    """The kind of a librdkafka log line: its facility and its message, numbers blanked."""
    return f"{facility}|{_NUMBERS.sub('#', message)}"


class LibrdkafkaLog:
    """A ``logging.Logger`` stand-in for confluent-kafka's ``logger`` property."""

    def __init__(
        self,
        cluster: str,
        *,
        window_s: float = DEFAULT_WINDOW_S,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.window_s = window_s
        self._logger = logger or logging.getLogger(LOGGER_NAME)
        self._clock = clock
        self._lock = threading.Lock()
        #: kind -> (when it was last logged at its own level, lines held back since)
        self._seen: dict[str, tuple[float, int]] = {}

    def log(self, level: int, msg: str, *args: Any) -> None:
        """Called by confluent-kafka as ``log(level, "%s [%s] %s", facility, name, text)``."""
        text = msg % args if args else msg
        facility, message = (str(args[0]), str(args[-1])) if len(args) >= 2 else ("", text)
        kind = kind_of(facility, message)
        now = self._clock()
        with self._lock:
            last, held = self._seen.get(kind, (None, 0))
            if last is not None and now - last < self.window_s:
                self._seen[kind] = (last, held + 1)
                loud = False
            else:
                self._seen[kind] = (now, 0)
                loud = True
        if not loud:
            self._logger.debug("cluster %s: %s", self.cluster, text)
        elif held:
            self._logger.log(
                level,
                "cluster %s: %s (%d similar line(s) held back in the last %.0f s; all are logged at DEBUG)",
                self.cluster,
                text,
                held,
                now - last if last is not None else 0.0,
            )
        else:
            self._logger.log(level, "cluster %s: %s", self.cluster, text)

    # confluent-kafka only calls log(); these keep it a drop-in for a Logger.
    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 - logging.Logger's name
        return self._logger.isEnabledFor(level)
