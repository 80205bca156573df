"""Whose transaction: see :mod:`exporter.pipeline.families.attribution`."""

from __future__ import annotations

from exporter.pipeline.families.attribution import application_column

__all__ = ["application_column"]
