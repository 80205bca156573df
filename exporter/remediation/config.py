"""``clusters[i].remediation``: whether, where and how often the daemon aborts hanging
transactions by itself. Off unless configured; a dry run (it only reports) unless
``dry_run: false``.

Example::

    remediation:
      enabled: true
      dry_run: false                 # default true: report what it would do, do nothing
      after: 30m                     # confirmed hanging for at least this long
      topics: ["orders-.*"]          # full-match regexes; no topic unless listed
      max_actions_per_hour: 2

A pure parser (:func:`parse_remediation`), hooked into the config model as one key: it
returns the section and its problems, each ``<path>.<key>: <what is wrong>``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_AFTER_MS = 30 * 60_000


@dataclass(frozen=True, slots=True)
class RemediationConfig:
    enabled: bool = False
    #: Report what would be aborted (audit, history, counter), abort nothing.
    dry_run: bool = True
    #: How long a transaction must have been confirmed ``hanging`` before it is aborted.
    after_ms: int = DEFAULT_AFTER_MS
    #: Topics it may act on: full-match regexes; empty: none.
    topics: tuple[str, ...] = ()
    #: Actions (or would-be actions in a dry run) in any sliding hour, at most.
    max_actions_per_hour: int = 1

    def topic_matcher(self) -> Callable[[str], bool]:
        allowed = tuple(re.compile(p) for p in self.topics)
        return lambda topic: any(p.fullmatch(topic) for p in allowed)


_FLAGS = ("enabled", "dry_run")
_KEYS = ("enabled", "dry_run", "after", "topics", "max_actions_per_hour")


def parse_remediation(raw: object, path: str) -> tuple[RemediationConfig, list[str]]:
    """``remediation:`` of one cluster. Absent: off. A mapping enables it unless it says
    ``enabled: false``."""
    from exporter.config.keys import parse_duration_ms

    if raw is None:
        return RemediationConfig(), []
    if not isinstance(raw, Mapping):
        return RemediationConfig(), [f"{path}: must be a mapping with keys {', '.join(_KEYS)}"]
    problems: list[str] = []
    values: dict[str, Any] = {"enabled": True}
    for key, value in raw.items():
        where = f"{path}.{key}"
        if key in _FLAGS:
            if not isinstance(value, bool):
                problems.append(f"{where}: must be true or false")
            else:
                values[str(key)] = value
        elif key == "after":
            try:
                values["after_ms"] = parse_duration_ms(value)
            except ValueError as e:
                problems.append(f"{where}: {e}")
        elif key == "topics":
            topics = [value] if isinstance(value, str) else value
            if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
                problems.append(f"{where}: must be a list of regular expressions (topic names)")
                continue
            for i, pattern in enumerate(topics):
                try:
                    re.compile(pattern)
                except re.error as e:
                    problems.append(f"{where}[{i}]: invalid regular expression {pattern!r}: {e}")
            values["topics"] = tuple(topics)
        elif key == "max_actions_per_hour":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
                problems.append(f"{where}: must be an integer from 1 to 1000")
            else:
                values["max_actions_per_hour"] = value
        else:
            problems.append(f"{where}: unknown key (allowed: {', '.join(_KEYS)})")
    config = RemediationConfig(**values)
    if config.enabled and not config.topics and not problems:
        problems.append(
            f"{path}.topics: name the topics remediation may act on (full-match regexes); "
            "with none it would never act"
        )
    return config, problems
