"""The machinery of the config model: kinds of values, declared keys, and a reader that
collects every problem with its key path.

A section is a frozen dataclass plus a tuple of :class:`Key` declarations (YAML name,
attribute, kind). The default of a key is the dataclass field's default: it is written once.
The same declarations validate the YAML file, the daemon's flags and the operator's
connection flags; only the *names* in the messages differ (a :class:`Where` names a key by its
YAML path or by its flag), so no message is ever rewritten after the fact.

Messages never echo a secret: a type mismatch names the type found, never the value; a value
is quoted only when its key is not secret and it did not come from the environment.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

#: A string ``${NAME}`` is replaced by the environment variable NAME.
ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
#: How much of a value a message may quote.
_QUOTE_MAX = 80


class ConfigError(ValueError):
    """The config is invalid; ``problems`` lists every problem found, one per line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))


class _Invalid:
    """A value that failed validation (the problem is already recorded)."""

    def __repr__(self) -> str:
        return "INVALID"


INVALID: Final = _Invalid()


def type_name(value: object) -> str:
    """What a YAML value is, in words, without its content."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def parse_duration_ms(value: object) -> int:
    """``"30s"``, ``"5m"``, ``"250ms"``, or a number of seconds, to milliseconds.

    Raises ValueError with a message that does not quote ``value`` beyond its type."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30s, 5m, 250ms, got a boolean")
    number: float
    if isinstance(value, int | float):
        try:
            number = float(value) * 1000
        except OverflowError:  # an integer beyond a float's range (YAML reads any length)
            raise ValueError("is too large for a duration (use e.g. 30s, 5m, 1h, 1d)") from None
    elif isinstance(value, str):
        m = _DURATION.match(value.strip())
        if not m:
            raise ValueError(f"{_quote(value)} is not a duration (use e.g. 30s, 5m, 250ms, 1h)")
        number = float(m.group(1)) * _UNIT_MS[m.group(2)]
    else:
        raise ValueError(f"expected a duration such as 30s, 5m, 250ms, got {type_name(value)}")
    if not math.isfinite(number):
        raise ValueError("must be a finite duration (got infinity or NaN)")
    if number < 0:
        raise ValueError("must not be negative")
    return int(number)


def text_problem(value: str) -> str | None:
    """What makes a string unusable anywhere it may go (a file name, a command line, a C
    library): a NUL character, or a lone surrogate (YAML's ``"\\ud800"``), which no encoder
    takes. None when it is usable."""
    if "\x00" in value:
        return "contains a NUL character"
    try:
        value.encode()
    except UnicodeEncodeError:
        return "is not valid Unicode text (a lone surrogate)"
    return None


def _quote(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _QUOTE_MAX else text[: _QUOTE_MAX - 3] + "..."


# --- naming keys: by YAML path or by flag -------------------------------------------------------


@dataclass(frozen=True)
class Where:
    """Names the keys of one mapping in messages.

    ``Where("clusters[0]").key("interval")`` is ``clusters[0].interval``; a mapping read from
    flags names its keys by flag (``names``), and its nested mappings by ``children``.
    """

    label: str = ""
    sep: str = "."
    names: Mapping[str, str] = field(default_factory=dict)
    children: Mapping[str, Where] = field(default_factory=dict)

    def key(self, name: object) -> str:
        if isinstance(name, str) and name in self.names:
            return self.names[name]
        return f"{self.label}{self.sep}{name}" if self.label else str(name)

    def child(self, name: str) -> Where:
        return self.children.get(name) or Where(self.key(name))

    def item(self, index: int) -> Where:
        return Where(f"{self.label}[{index}]")


# --- the reader -------------------------------------------------------------------------------


@dataclass
class Reader:
    """Walks a raw tree, records problems with their key path, never raises."""

    env: Mapping[str, str]
    base_dir: Path
    #: Whether a secret property may be written literally in the file (``allow_literal_secrets``).
    allow_literal_secrets: bool = False
    #: Whether the clusters are scheduled (the daemon) or used once (the operator CLI).
    scheduled: bool = True
    problems: list[str] = field(default_factory=list)
    #: Paths whose value came from the environment: never quoted.
    from_env: set[str] = field(default_factory=set)

    def problem(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def show(self, path: str, value: object, *, secret: bool = False) -> str:
        """The value for a message, unless it is secret or came from the environment."""
        if secret:
            return "the value (not shown: secret)"
        if path in self.from_env:
            return "the value from the environment (not shown)"
        return _quote(value)

    def resolve(self, value: object, path: str) -> object:
        """``${NAME}`` to the environment variable's value."""
        if isinstance(value, str):
            m = ENV_REF.match(value)
            if m:
                name = m.group(1)
                self.from_env.add(path)
                if name not in self.env:
                    self.problem(path, f"environment variable {name} is not set")
                    return INVALID
                return self.env[name]
        return value

    def mapping(self, raw: object, where: Where, label: str, allowed: Sequence[str] | None) -> dict[Any, Any]:
        """A mapping (None: empty); unknown keys are problems when ``allowed`` is given."""
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            what = f" with keys {', '.join(allowed)}" if allowed else ""
            self.problem(label, f"must be a mapping{what}, got {type_name(raw)}")
            return {}
        if allowed is not None:
            for key in raw:
                if key not in allowed:
                    self.problem(where.key(key), f"unknown key (allowed: {', '.join(allowed)})")
        return dict(raw)


# --- kinds of values --------------------------------------------------------------------------


class Kind:
    """How one key's value is read. ``json_types``: the JSON-schema types it accepts."""

    json_types: frozenset[str] = frozenset()

    def read(self, r: Reader, raw: object, where: Where, name: str) -> object:
        raise NotImplementedError


@dataclass(frozen=True)
class Parsed(Kind):
    """A section read by a parser of its own: ``parse(raw, path) -> (value, problems)``, each
    problem a ``path.key: what is wrong`` line (the history store, the consumer groups)."""

    parse: Callable[[object, str], tuple[object, list[str]]] = lambda raw, path: (raw, [])
    json_types: frozenset[str] = frozenset({"object", "boolean", "array", "null"})

    def read(self, r: Reader, raw: object, where: Where, name: str) -> object:
        value, problems = self.parse(raw, where.key(name))
        r.problems.extend(problems)
        return INVALID if problems else value


@dataclass(frozen=True)
class Text(Kind):
    pattern: str | None = None
    #: What a valid value looks like, for the message.
    shape: str = ""
    #: Extra check: what is wrong ("is not ...", without the value), or None.
    check: Callable[[str], str | None] | None = None
    secret: bool = False
    empty_is_none: bool = False
    json_types: frozenset[str] = frozenset({"string"})

    def read(self, r: Reader, raw: object, where: Where, name: str) -> object:
        path = where.key(name)
        value = r.resolve(raw, path)
        if value is INVALID:
            return INVALID
        if not isinstance(value, str):
            r.problem(path, f"must be a string, got {type_name(value)}")
            return INVALID
        unusable = text_problem(value)
        if unusable is not None:
            r.problem(path, unusable)
            return INVALID
        if self.empty_is_none and value == "":
            return None
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            r.problem(path, f"{r.show(path, value, secret=self.secret)} is not {self.shape}")
            return INVALID
        if self.check is not None:
            message = self.check(value)  # what is wrong, without the value
            if message is not None:
                r.problem(path, f"{r.show(path, value, secret=self.secret)} {message}")
                return INVALID
        return value


@dataclass(frozen=True)
class Choice(Kind):
    values: tuple[str, ...] = ()
    json_types: frozenset[str] = frozenset({"string"})

    def read(self, r: Reader, raw: object, where: Where, name: str) -> object:
        path = where.key(name)
        value = r.resolve(raw, path)
        if value is INVALID:
            return INVALID
        if value not in self.values:
            shown = r.show(path, value) if isinstance(value, str) else type_name(value)
            r.problem(path, f"{shown} is not allowed (allowed: {', '.join(self.values)})")
            return INVALID
        return value


@dataclass(frozen=True)
class Integer(Kind):
    minimum: int
    maximum: int
    json_types: frozenset[str] = frozenset({"integer"})

    def read(self, r: Reader, raw: object, where: Where, name: str) -> object:
        path = where.key(name)
        value = r.resolve(raw, path)
        if value is INVALID:
            return INVALID
        if isinstance(value, bool) or not isinstance(value, int):
            r.problem(path, f"must be an integer, got {type_name(value)}")
            return INVALID
        if not self.minimum <= value <= self.maximum:
            r.problem(path, f"must be between {self.minimum} and {self.maximum}")
            return INVALID
        return value


@dataclass(frozen=True)
class Flag(Kind):
    json_types: frozenset[str] = frozenset({"boolean"})

    def read(self, r: Reader, raw: object, where: Where, name: str) -> object:
        if not isinstance(raw, bool):
            r.problem(where.key(name), f"must be true or false, got {type_name(raw)}")
            return INVALID
        return raw


@dataclass(frozen=True)
class Duration(Kind):
    """A duration in milliseconds, written 250ms, 30s, 5m, 1h, 1d or as seconds."""

    minimum_ms: int = 0
    maximum_ms: int = 86_400_000
    #: Why the maximum, for the message.
    maximum_why: str = ""
    json_types: frozenset[str] = frozenset({"string", "number"})

    def read(self, r: Reader, raw: object, where: Where, name: str) -> object:
        path = where.key(name)
        value = r.resolve(raw, path)
        if value is INVALID:
            return INVALID
        try:
            ms = parse_duration_ms(value)
        except ValueError as e:
            message = str(e)
            if path in r.from_env and isinstance(value, str):
                message = "the value from the environment is not a duration (use e.g. 30s)"
            r.problem(path, message)
            return INVALID
        if ms < self.minimum_ms:
            r.problem(path, f"must be at least {self.minimum_ms} ms")
            return INVALID
        if ms > self.maximum_ms:
            why = f": {self.maximum_why}" if self.maximum_why else ""
            r.problem(path, f"must be at most {self.maximum_ms} ms ({_ms(self.maximum_ms)}){why}")
            return INVALID
        return ms


def _ms(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


@dataclass(frozen=True)
class Patterns(Kind):
    """A regular expression or a list of them (Python syntax, full match)."""

    json_types: frozenset[str] = frozenset({"string", "array"})

    def read(self, r: Reader, raw: object, where: Where, name: str) -> object:
        path = where.key(name)
        items = [raw] if isinstance(raw, str) else raw
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            r.problem(path, "must be a regular expression or a list of them")
            return INVALID
        ok = True
        for i, pattern in enumerate(items):
            if text_problem(pattern):
                r.problem(f"{path}[{i}]", f"invalid regular expression: {text_problem(pattern)}")
                ok = False
                continue
            try:
                re.compile(pattern)
            except (re.error, OverflowError, RecursionError, ValueError) as e:
                r.problem(f"{path}[{i}]", f"invalid regular expression {_quote(pattern)}: {e}")
                ok = False
        return tuple(items) if ok else INVALID


@dataclass(frozen=True)
class StringMap(Kind):
    """A mapping of string keys (with a prefix) to scalar values, kept as strings.

    ``secret(key)``: the key's value is a secret; written literally in the file (not
    ``${ENV}``) it is refused unless ``allow_literal_secrets: true``."""

    key_prefix: str = ""
    secret: Callable[[str], bool] | None = None
    json_types: frozenset[str] = frozenset({"object"})

    def read(self, r: Reader, raw: object, where: Where, name: str) -> object:
        path = where.key(name)
        d = r.mapping(raw, where.child(name), path, None)
        result: dict[str, str] = {}
        for k, v in d.items():
            key_path = where.child(name).key(k)
            if not isinstance(k, str) or not k.startswith(self.key_prefix) or text_problem(k):
                r.problem(key_path, f"keys start with {self.key_prefix!r} (and are usable text)")
                continue
            if v is None or isinstance(v, list | dict):
                r.problem(key_path, f"must be a string, number or boolean, got {type_name(v)}")
                continue
            secret = self.secret is not None and self.secret(k)
            literal = not (isinstance(v, str) and ENV_REF.match(v))
            if secret and literal and not r.allow_literal_secrets:
                r.problem(
                    key_path,
                    'a literal secret in the file is refused: write "${ENV_VAR}" '
                    "(or set allow_literal_secrets: true)",
                )
                continue
            value = r.resolve(v, key_path)
            if value is INVALID:
                continue
            text = str(value).lower() if isinstance(value, bool) else str(value)
            unusable = text_problem(text)
            if unusable is not None:
                r.problem(key_path, unusable)
                continue
            result[k] = text
        return result


@dataclass(frozen=True)
class Nested(Kind):
    section: Section
    json_types: frozenset[str] = frozenset({"object"})

    def read(self, r: Reader, raw: object, where: Where, name: str) -> object:
        return self.section.read(r, raw, where.child(name))


@dataclass(frozen=True)
class Items(Kind):
    """A list of sections, non-empty unless ``allow_empty``."""

    section: Section
    allow_empty: bool = False
    json_types: frozenset[str] = frozenset({"array"})

    def read(self, r: Reader, raw: object, where: Where, name: str) -> object:
        path = where.key(name)
        if not isinstance(raw, list) or not (raw or self.allow_empty):
            r.problem(
                path,
                "required: a list of at least one entry, got "
                + ("an empty list" if isinstance(raw, list) else type_name(raw)),
            )
            return INVALID
        items = [self.section.read(r, item, Where(path).item(i)) for i, item in enumerate(raw)]
        return tuple(i for i in items if i is not INVALID)


@dataclass(frozen=True)
class Key:
    """One key of a section: its YAML name, the dataclass attribute, its kind."""

    name: str
    attr: str
    kind: Kind
    required: bool = False
    #: One line for docs and messages.
    help: str = ""


@dataclass(frozen=True)
class Section:
    """A dataclass and its keys. ``check`` adds cross-key problems after the keys are read;
    ``extra`` reads keys whose value needs the whole mapping (the Kafka properties)."""

    cls: type[Any]
    keys: tuple[Key, ...]
    check: Callable[[Reader, dict[str, Any], Where], None] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys)

    def key(self, name: str) -> Key:
        for k in self.keys:
            if k.name == name:
                return k
        raise KeyError(name)

    def default(self, attr: str) -> Any:
        """The dataclass field's default (the one place defaults are written)."""
        for f in dataclasses.fields(self.cls):
            if f.name == attr:
                if f.default is not dataclasses.MISSING:
                    return f.default
                if f.default_factory is not dataclasses.MISSING:
                    return f.default_factory()
        raise KeyError(f"{self.cls.__name__}.{attr} has no default")

    def read(self, r: Reader, raw: object, where: Where) -> Any:
        d = r.mapping(raw, where, where.label or "configuration", self.names)
        before = len(r.problems)
        values: dict[str, Any] = {}
        for key in self.keys:
            if key.name not in d or d[key.name] is None or (key.required and d[key.name] == ""):
                if key.required:
                    r.problem(where.key(key.name), f"required{': ' + key.help if key.help else ''}")
                continue
            value = key.kind.read(r, d[key.name], where, key.name)
            if value is not INVALID:
                values[key.attr] = value
        if self.check is not None:
            self.check(r, values, where)
        if len(r.problems) > before:
            return INVALID
        return self.cls(**values)

    def read_value(self, r: Reader, name: str, raw: object, where: Where) -> object:
        """One key alone (a flag that overrides a key)."""
        return self.key(name).kind.read(r, raw, where, name)
