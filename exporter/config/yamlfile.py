"""Reading YAML text: duplicate keys are errors, and no message quotes the file's text.

PyYAML keeps the last of two equal keys silently (so a second ``kafka:`` drops
``security.protocol: SSL`` from the first); the loader here refuses them, naming the key and
both lines. A syntax error is reported by line and column only: PyYAML's own message quotes
the offending line, which may hold a secret. (Its own module: the config model reads cluster
files with it, and the model is what :mod:`exporter.config.loader` builds.)
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from exporter.config.keys import ConfigError

#: The largest config file read.
_MAX_BYTES = 4 << 20


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that records duplicate mapping keys instead of keeping the last one."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Hashable, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # SafeLoader reports unhashable keys itself
            line = key_node.start_mark.line + 1
            if key in seen:
                self.duplicates.append(
                    f"line {line}: duplicate key {_key_text(key)} (first at "
                    f"line {seen[key]}; YAML would silently keep only the "
                    "last one)"
                )
            else:
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _key_text(key: object) -> str:
    text = repr(key)
    return text if len(text) <= 80 else text[:77] + "..."


def _yaml_problem(e: yaml.YAMLError) -> str:
    """Line, column and what is wrong; never the snippet of the file PyYAML appends."""
    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = e.problem or e.context or "invalid YAML"
        if e.context and e.problem:
            what = f"{e.context}, {e.problem}"
        return f"not valid YAML: {where}{what}"
    return "not valid YAML"


def read_yaml(text: str, name: str) -> object:
    """Parse ``text``; ConfigError on a syntax error or duplicate keys."""
    loader = _StrictLoader(text)
    try:
        raw = loader.get_single_data()
    except yaml.YAMLError as e:
        raise ConfigError([f"{name}: {_yaml_problem(e)}"]) from None
    except (ValueError, TypeError, OverflowError, RecursionError) as e:
        # e.g. a timestamp such as 2001-02-30: PyYAML's constructor raises ValueError
        raise ConfigError([f"{name}: not valid YAML: a value cannot be read ({type(e).__name__})"]) from None
    finally:
        loader.dispose()
    if loader.duplicates:
        raise ConfigError([f"{name}: {d}" for d in loader.duplicates])
    return raw


def read_text(path: str | Path) -> str:
    """A config file's text (at most 4 MiB of UTF-8); ConfigError naming the file if not."""
    file_path = Path(path)
    try:
        with file_path.open("rb") as f:
            data = f.read(_MAX_BYTES + 1)
    except OSError as e:
        raise ConfigError([f"{file_path}: cannot read: {e.strerror or type(e).__name__}"]) from None
    except ValueError:  # a NUL byte or a lone surrogate in the name
        raise ConfigError([f"{str(file_path)!r}: not a usable file name"]) from None
    if len(data) > _MAX_BYTES:
        raise ConfigError([f"{file_path}: larger than 4 MiB, not a config file"])
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ConfigError([f"{file_path}: not UTF-8 text"]) from None
