"""Renderers of metric families, one module each, found by module: a module here defines
``render(results, cluster_label)``, which yields its Prometheus families from each cluster's
latest :class:`~exporter.model.CycleResult` (``(cluster, result)`` pairs), its names from
:mod:`exporter.metrics.catalogue`. The collector renders every one at each scrape; a new
family's renderer is a new module, with no list to extend."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import Metric

from exporter.model import CycleResult

Renderer = Callable[[Sequence[tuple[str, CycleResult]], str], Iterator[Metric]]


@functools.cache
def renderers() -> tuple[Renderer, ...]:
    """Every module's ``render``, by module name."""
    found: list[Renderer] = []
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        found.append(importlib.import_module(f"{__name__}.{module.name}").render)
    return tuple(found)
