"""Metric names have one source, exporter/metrics/catalogue.py: every name in the generated
rules and dashboards (expressions, descriptions, annotations, the committed files and the
chart's copies) is catalogued, and neither the generators nor the renderers spell one
themselves: they import the catalogue's constants."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from alerts import generate as alerts_generate
from alerts.rules import DISABLED_BY_DEFAULT, thresholds_from_mapping
from dashboards import generate as dashboards_generate
from exporter.metrics.catalogue import all_series

REPO = Path(__file__).resolve().parents[2]
#: Any word that starts like one of the exporter's metric names.
METRIC_WORD = re.compile(r"\bkafka_txn_[A-Za-z0-9_]*")
#: In code, the bare prefix too: a name put together from it is spelled all the same.
SPELLED = re.compile(r"\bkafka_txn(?:_[A-Za-z0-9_]*)?")
#: The generators' and the renderers' sources: a literal name in their code would be a
#: second spelling of it (docstrings may show examples).
SOURCES = sorted(
    [
        *REPO.glob("dashboards/*.py"),
        *REPO.glob("alerts/*.py"),
        *(p for p in REPO.glob("exporter/metrics/**/*.py") if p.name != "catalogue.py"),
        REPO / "exporter" / "history" / "metrics.py",
    ]
)


def generated_texts() -> Iterator[tuple[str, str]]:
    """(where, text) of every generated rule file and dashboard, as generated and as committed."""
    for name, text in dashboards_generate.rendered().items():
        yield f"generated dashboard {name}", text
    for directory in dashboards_generate.OUTPUT_DIRS:
        for path in sorted(directory.glob("*.json")):
            yield str(path.relative_to(REPO)), path.read_text(encoding="utf-8")
    for path, text in alerts_generate.expected_files().items():
        yield f"generated {path.name}", text
        yield str(path.relative_to(REPO)), path.read_text(encoding="utf-8")
    every_alert = thresholds_from_mapping({"disabled": dict.fromkeys(DISABLED_BY_DEFAULT, False)})
    yield "rules with every alert enabled", alerts_generate.render(every_alert)


def uncatalogued(text: str) -> set[str]:
    return set(METRIC_WORD.findall(text)) - set(all_series())


def test_the_scan_finds_a_name_that_is_not_catalogued() -> None:
    assert uncatalogued("max by (broker) (kafka_txn_hanging_transactions) > 0") == set()
    assert uncatalogued("rate(kafka_txn_exporter_cycle_duration_seconds_bucket[5m])") == set()
    assert uncatalogued("see kafka_txn_hanging_transaction (a typo)") == {"kafka_txn_hanging_transaction"}


def test_every_metric_name_in_the_generated_rules_and_dashboards_is_catalogued() -> None:
    texts = list(generated_texts())
    assert len(texts) >= 10  # three dashboards twice over, two rule files, ...
    problems = {where: sorted(names) for where, text in texts if (names := uncatalogued(text))}
    assert not problems, f"not in exporter/metrics/catalogue.py: {problems}"


def spelled_names(source: str) -> list[tuple[int, str]]:
    """(line, word) of every metric-like word in the code's strings, docstrings aside."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, word)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        for word in SPELLED.findall(node.value)
        if word != "kafka_txn_"  # a pattern or prose about the prefix, not a name
    ]


def test_the_source_scan_finds_names_in_code_not_in_docstrings() -> None:
    source = (
        'def f():\n    """kafka_txn_up, an example"""\n    return f"{x}kafka_txn_up_total" + "kafka_txn_"\n'
    )
    assert spelled_names(source) == [(3, "kafka_txn_up_total")]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_generators_and_renderers_take_metric_names_from_the_catalogue(path: Path) -> None:
    spelled = [
        f"{path.name}:{line}: {word}" for line, word in spelled_names(path.read_text(encoding="utf-8"))
    ]
    assert not spelled, f"use the constants of exporter/metrics/catalogue.py: {spelled}"
