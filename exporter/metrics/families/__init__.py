"""Renderers of metric families, one module each, found by module: a module here defines
``render(scrape)``, which yields its Prometheus families from the scrape's cluster states
(:class:`~exporter.metrics.scrape.Scrape`), each made from its catalogue entry (name, kind,
help, labels: :mod:`exporter.metrics.catalogue`). The collector renders every one at each
scrape; a new family's renderer is a new module, with no list to extend."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable, Iterable

from prometheus_client.core import Metric

from exporter.metrics.scrape import Scrape

Renderer = Callable[[Scrape], Iterable[Metric]]


@functools.cache
def renderers() -> tuple[Renderer, ...]:
    """Every module's ``render``, by module name."""
    found: list[Renderer] = []
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        found.append(importlib.import_module(f"{__name__}.{module.name}").render)
    return tuple(found)
