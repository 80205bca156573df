"""The pipeline's metric families: one module per family, each declaring its ``FAMILY``
(:class:`~exporter.pipeline.families.base.Family`), named as its module.

The registry is this package's modules (``base`` aside): a new family is a new module here,
and the orchestrator plans it, reads its rows back and assembles its result with no list
to extend. :func:`family_names` reads the modules' names without importing them (no Spark),
for the metrics that are pre-created per family.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exporter.pipeline.families.base import Family

_NOT_FAMILIES = frozenset({"base"})


@functools.cache
def family_names() -> tuple[str, ...]:
    """Every family's name (its module's), sorted."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _NOT_FAMILIES))


@functools.cache
def registry() -> tuple[Family, ...]:
    """Every family, each after the families it reads (the classified frame's, ``after``)."""
    found = {}
    for name in family_names():
        family: Family = importlib.import_module(f"{__name__}.{name}").FAMILY
        if family.name != name:
            raise ValueError(f"family module {name} declares the family {family.name!r}")
        found[name] = family
    return _ordered(found)


def _ordered(found: dict[str, Family]) -> tuple[Family, ...]:
    """Families in an order where each comes after those it reads: the classification before
    every family reading the classified frame, and every family after its ``after``."""
    ordered: list[Family] = []
    placed: set[str] = set()

    def place(family: Family, path: tuple[str, ...]) -> None:
        if family.name in placed:
            return
        if family.name in path:
            raise ValueError(f"families read each other in a circle: {' -> '.join((*path, family.name))}")
        before = list(family.after)
        if family.classified and family.name != "classification":
            before.insert(0, "classification")
        for name in before:
            place(found[name], (*path, family.name))
        ordered.append(family)
        placed.add(family.name)

    for name in sorted(found):
        place(found[name], ())
    outputs = [o.name for f in ordered for o in f.outputs]
    if len(outputs) != len(set(outputs)):
        raise ValueError(f"two families declare the same output: {sorted(outputs)}")
    return tuple(ordered)
