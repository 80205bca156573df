"""Reading the config file: its text (bounded, UTF-8), then strict YAML
(:mod:`exporter.config.yamlfile`), then the validated model."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from exporter.config.model import Config, parse_config
from exporter.config.yamlfile import read_text, read_yaml

__all__ = ["load_config", "read_text", "read_yaml"]


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None) -> Config:
    """Read and validate a YAML config file. Raises :class:`ConfigError`."""
    file_path = Path(path)
    raw = read_yaml(read_text(file_path), str(file_path))
    return parse_config(raw, env=env, base_dir=file_path.resolve().parent)
