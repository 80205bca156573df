"""Config of the consumer-group family and of transactional-id attribution.

Two pure parsers, hooked into :mod:`exporter.config` by the caller:

* per cluster, ``groups:`` -> :class:`GroupsConfig` (:func:`parse_groups`);
* top level, ``attribution:`` -> ordered :class:`AttributionRule` s (:func:`parse_attribution`).

Both return the parsed value and a list of problems, each ``<path>.<key>: <what is wrong>``;
they never raise and never echo more than the offending key and value. Regular expressions
are checked here, so a bad one is named with its key path instead of failing later in Spark.

Example::

    groups:
      enabled: true
      allow: ["orders-.*"]
      deny: ["console-consumer-.*"]
      per_partition: false
      blocked_after_cycles: 3
    attribution:
      - builtins                       # Kafka Streams, Flink (the default place)
      - builtin: spring                # Spring for Apache Kafka, given its prefixes
        prefixes: ["payments-tx-"]
      - name: billing
        pattern: "^billing-(?P<application>[a-z]+)-tx-"
      - pattern: "^legacy-.*"
        application: legacy
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The built-in rules' patterns are Java regular expressions (Spark evaluates them) that match
#: only the shape each framework gives its transactional ids, each naming its ``application``
#: group; an id of any other shape is left to the user's rules (or ``unknown``).
_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"  # java.util.UUID.toString()
_INT = "(?:0|[1-9][0-9]*)"  # an int or long as Java prints it: no sign, no leading zero
_POSITIVE = "[1-9][0-9]*"
BUILTIN_RULE_NAMES = ("kafka_streams_eos_v2", "kafka_streams_eos_v1", "flink", "spring")


@dataclass(frozen=True, slots=True)
class AttributionRule:
    """Maps a transactional id to an application.

    ``pattern`` (Python syntax; ``(?P<application>...)`` or ``(?<application>...)``) is searched
    in the id; the application is the fixed ``application`` when set, else the named group
    ``application``, else the whole match. A rule whose result is empty does not match.
    """

    name: str
    pattern: str
    application: str | None = None
    builtin: bool = False

    @property
    def group_index(self) -> int:
        """The regex group holding the application (0: the whole match)."""
        return re.compile(python_pattern(self.pattern)).groupindex.get("application", 0)


#: Kafka Streams exactly-once v2 (``ActiveTaskCreator``, one producer per stream thread):
#: ``<application.id>-<processId>-<thread index>``, the process id a random UUID, the index
#: the stream thread's number (from 1); 2.6-2.7's eos-beta had no thread index.
#: Kafka Streams exactly-once v1 (eos-alpha, removed in 4.0; one producer per task):
#: ``<application.id>-<task id>``, the task id ``<subtopology>_<partition>``.
#: Flink's KafkaSink (``TransactionalIdFactory``):
#: ``<transactionalIdPrefix>-<subtaskId>-<checkpointOffset>``.
BUILTIN_RULES: tuple[AttributionRule, ...] = (
    AttributionRule("kafka_streams_eos_v2", rf"^(?P<application>.+)-{_UUID}(?:-{_POSITIVE})?$", builtin=True),
    AttributionRule("kafka_streams_eos_v1", rf"^(?P<application>.+)-{_INT}_{_INT}$", builtin=True),
    AttributionRule("flink", rf"^(?P<application>.+)-{_INT}-{_INT}$", builtin=True),
)
_BUILTINS_BY_NAME = {r.name: r for r in BUILTIN_RULES}


def spring_rule(prefixes: Sequence[str], application: str | None = None) -> AttributionRule:
    """Spring for Apache Kafka: ``DefaultKafkaProducerFactory`` names a transactional producer
    ``<transactionIdPrefix><suffix>``, the suffix a counter from 0 (its
    ``TransactionIdSuffixStrategy``), or ``<group.id>.<topic>.<partition>`` for the
    per-partition producers of Spring Kafka 2.x's EOS mode ALPHA. The prefix is the
    application's own (``spring.kafka.producer.transaction-id-prefix``) and any id ending in
    digits has that shape, so the rule is only as good as the prefixes it is given: the
    application is the prefix without its trailing ``-``, ``_`` or ``.``, or ``application``."""
    alternatives = "|".join(re.escape(p) for p in sorted(set(prefixes), key=lambda p: (-len(p), p)))
    pattern = rf"^(?P<application>(?:{alternatives}))(?:{_INT}|.+\..+\.{_INT})$"
    return AttributionRule("spring", pattern, application=application, builtin=True)


@dataclass(frozen=True, slots=True)
class GroupsConfig:
    """The consumer-group family for one cluster (``clusters[i].groups``)."""

    enabled: bool = False
    #: Group ids collected: matching an allow regex (full match) and no deny regex.
    allow: tuple[str, ...] = (".*",)
    deny: tuple[str, ...] = ()
    #: Lag series per partition as well as per group and topic.
    per_partition: bool = False
    #: A group partition at the LSO is blocked once the LSO has not moved for this many cycles.
    blocked_after_cycles: int = 3
    #: Bounds on series: group+topic lag rows, per-partition lag rows, blocked findings.
    max_group_series: int = 10_000
    max_partition_series: int = 10_000
    max_blocked: int = 500
    #: Bytes of record batches read per cycle (READ_COMMITTED Fetches from the committed
    #: offsets, smallest gaps first) to count what a read_committed consumer gets before the
    #: LSO; a gap not read to its end has an upper-bound consumable lag (0: never read).
    consumable_check_max_bytes: int = 8 << 20

    def group_matcher(self) -> _GroupMatcher:
        return _GroupMatcher(
            tuple(re.compile(p) for p in self.allow), tuple(re.compile(p) for p in self.deny)
        )


@dataclass(frozen=True, slots=True)
class _GroupMatcher:
    allow: tuple[re.Pattern[str], ...]
    deny: tuple[re.Pattern[str], ...]

    def __call__(self, group: str) -> bool:
        return any(p.fullmatch(group) for p in self.allow) and not any(p.fullmatch(group) for p in self.deny)


_GROUP_KEYS = {
    "enabled": bool,
    "per_partition": bool,
    "blocked_after_cycles": int,
    "max_group_series": int,
    "max_partition_series": int,
    "max_blocked": int,
    "consumable_check_max_bytes": int,
}
#: Each integer key's range: what the pipeline's Spark SQL takes (a cycle count compared with
#: an INT column, LIMITs below 2^31) and what makes sense (series bounds, a byte budget read
#: every cycle).
GROUP_LIMITS: Mapping[str, tuple[int, int]] = {
    "blocked_after_cycles": (1, 100_000),
    "max_group_series": (0, 1_000_000),
    "max_partition_series": (0, 1_000_000),
    "max_blocked": (0, 100_000),
    "consumable_check_max_bytes": (0, 1 << 30),
}
#: Keys that were replaced, with what replaced them.
_REPLACED = {
    "consumable_check_max_offsets": "replaced by consumable_check_max_bytes (bytes of batches "
    "read per cycle, not a number of offsets)",
}
_PATTERN_KEYS = ("allow", "deny")


def parse_groups(raw: object, path: str) -> tuple[GroupsConfig, list[str]]:
    """``groups:`` of one cluster. ``None`` (absent) gives the defaults (disabled);
    ``true``/``false`` is a shorthand for ``{enabled: ...}``; a mapping enables the family
    unless it says ``enabled: false``."""
    problems: list[str] = []
    if raw is None:
        return GroupsConfig(), problems
    if isinstance(raw, bool):
        return GroupsConfig(enabled=raw), problems
    if not isinstance(raw, Mapping):
        allowed = ", ".join(sorted([*_GROUP_KEYS, *_PATTERN_KEYS]))
        return GroupsConfig(), [f"{path}: must be true, false or a mapping with keys {allowed}"]
    values: dict[str, Any] = {"enabled": True}
    for key, value in raw.items():
        where = f"{path}.{key}"
        if key in _PATTERN_KEYS:
            patterns = _patterns(value, where, problems)
            if patterns is not None:
                values[str(key)] = patterns
            continue
        kind = _GROUP_KEYS.get(str(key))
        if str(key) in _REPLACED:
            problems.append(f"{where}: {_REPLACED[str(key)]}")
            continue
        if kind is None:
            allowed = ", ".join(sorted([*_GROUP_KEYS, *_PATTERN_KEYS]))
            problems.append(f"{where}: unknown key (allowed: {allowed})")
            continue
        if value is None:
            continue
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            shown = repr(value) if len(repr(value)) <= 40 else type(value).__name__
            what = "true or false" if kind is bool else "an integer"
            problems.append(f"{where}: must be {what}, got {shown}")
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            low, high = GROUP_LIMITS[str(key)]
            if not low <= value <= high:
                problems.append(f"{where}: must be between {low} and {high}")
                continue
        values[str(key)] = value
    return GroupsConfig(**values), problems


def _patterns(value: object, where: str, problems: list[str]) -> tuple[str, ...] | None:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.append(f"{where}: must be a list of regular expressions")
        return None
    ok = True
    for i, pattern in enumerate(value):
        error = regex_problem(pattern)
        if error is not None:
            problems.append(f"{where}[{i}]: invalid regular expression {pattern!r}: {error}")
            ok = False
    return tuple(value) if ok else None


_JAVA_NAMED_GROUP = re.compile(r"\(\?<([A-Za-z][A-Za-z0-9]*)>")
_PYTHON_NAMED_GROUP = re.compile(r"\(\?P<([A-Za-z][A-Za-z0-9_]*)>")
_PYTHON_BACKREF = re.compile(r"\(\?P=([A-Za-z][A-Za-z0-9_]*)\)")


def python_pattern(pattern: str) -> str:
    """The pattern in Python's syntax (Java's ``(?<name>`` accepted)."""
    return _JAVA_NAMED_GROUP.sub(r"(?P<\1>", pattern)


def java_pattern(pattern: str) -> str:
    """The pattern in Java's syntax, for Spark (``(?P<name>`` and ``(?P=name)`` rewritten)."""
    return _PYTHON_BACKREF.sub(r"\\k<\1>", _PYTHON_NAMED_GROUP.sub(r"(?<\1>", pattern))


def _unusable(text: str) -> bool:
    """A NUL character or a lone surrogate: Spark (through py4j, in UTF-8) cannot take it."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return "\x00" in text


def regex_problem(pattern: str) -> str | None:
    if _unusable(pattern):
        return "contains a NUL character or a lone surrogate"
    try:
        re.compile(python_pattern(pattern))
    except re.error as e:
        return str(e)
    for name in _PYTHON_NAMED_GROUP.findall(pattern):
        if "_" in name:  # Java group names are letters and digits only
            return f"group name {name!r} may hold only letters and digits"
    return None


_RULE_KEYS = ("name", "pattern", "application")


def parse_attribution(raw: object, path: str) -> tuple[tuple[AttributionRule, ...], list[str]]:
    """``attribution:``, a list of rules tried in order (first match wins).

    An entry is ``builtins`` (the built-in rules for Kafka Streams and Flink at this place),
    ``{builtin: <name>}`` (one of kafka_streams_eos_v2, kafka_streams_eos_v1, flink),
    ``{builtin: spring, prefixes: [...], application?}`` (Spring's ids can only be told by
    their prefix) or ``{pattern, name?, application?}``. When the list names no built-in, the
    built-ins come first (absent ``attribution:`` means the built-ins alone); an empty list
    turns attribution off.
    """
    problems: list[str] = []
    if raw is None:
        return BUILTIN_RULES, problems
    if not isinstance(raw, list):
        return BUILTIN_RULES, [
            f"{path}: must be a list of rules (builtins, {{builtin: <name>}} "
            "or {pattern, name, application})"
        ]
    rules: list[AttributionRule] = []
    placed_builtin = False
    for i, entry in enumerate(raw):
        where = f"{path}[{i}]"
        if entry == "builtins":
            rules.extend(BUILTIN_RULES)
            placed_builtin = True
            continue
        if not isinstance(entry, Mapping):
            problems.append(
                f"{where}: must be 'builtins' or a mapping with keys builtin, name, pattern, application"
            )
            continue
        if "builtin" in entry:
            placed_builtin = True
            builtin = _builtin_rule(entry, where, problems)
            if builtin is not None:
                rules.append(builtin)
            continue
        rule = _user_rule(entry, where, i, problems)
        if rule is not None:
            rules.append(rule)
    if raw and not placed_builtin:
        rules[:0] = BUILTIN_RULES
    return tuple(rules), problems


def _builtin_rule(entry: Mapping[Any, Any], where: str, problems: list[str]) -> AttributionRule | None:
    name = str(entry["builtin"])
    if name == "spring":
        return _spring_rule(entry, where, problems)
    extra = sorted(str(k) for k in entry if k != "builtin")
    if extra:
        problems.append(f"{where}.{extra[0]}: not allowed beside builtin")
    builtin = _BUILTINS_BY_NAME.get(name)
    if builtin is None:
        problems.append(
            f"{where}.builtin: unknown built-in rule {entry['builtin']!r} "
            f"(allowed: {', '.join(BUILTIN_RULE_NAMES)})"
        )
    return builtin


def _spring_rule(entry: Mapping[Any, Any], where: str, problems: list[str]) -> AttributionRule | None:
    before = len(problems)
    for key in entry:
        if key not in ("builtin", "prefixes", "application"):
            problems.append(
                f"{where}.{key}: unknown key (allowed beside builtin spring: prefixes, application)"
            )
    prefixes = entry.get("prefixes")
    if isinstance(prefixes, str):
        prefixes = [prefixes]
    if (
        not isinstance(prefixes, list)
        or not prefixes
        or not all(isinstance(p, str) and p and not _unusable(p) for p in prefixes)
    ):
        problems.append(
            f"{where}.prefixes: the spring rule needs the transactionIdPrefix of each application "
            "(a list of non-empty strings): an id ending in digits alone does not tell Spring's"
        )
    application = entry.get("application")
    if application is not None and (
        not isinstance(application, str) or not application or _unusable(application)
    ):
        problems.append(f"{where}.application: must be a non-empty string")
    if len(problems) > before:
        return None
    assert isinstance(prefixes, list)
    return spring_rule(prefixes, application)


def _user_rule(
    entry: Mapping[Any, Any], where: str, index: int, problems: list[str]
) -> AttributionRule | None:
    before = len(problems)
    for key in entry:
        if key not in _RULE_KEYS:
            problems.append(f"{where}.{key}: unknown key (allowed: builtin, {', '.join(_RULE_KEYS)})")
    pattern = entry.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        problems.append(f"{where}.pattern: a regular expression is required")
    else:
        error = regex_problem(pattern)
        if error is not None:
            problems.append(f"{where}.pattern: invalid regular expression {pattern!r}: {error}")
    name = entry.get("name", f"rule_{index}")
    if not isinstance(name, str) or not name or _unusable(name):
        problems.append(f"{where}.name: must be a non-empty string")
    application = entry.get("application")
    if application is not None and (
        not isinstance(application, str) or not application or _unusable(application)
    ):
        problems.append(f"{where}.application: must be a non-empty string")
    if len(problems) > before:
        return None
    assert isinstance(pattern, str) and isinstance(name, str)
    return AttributionRule(name=name, pattern=pattern, application=application)
