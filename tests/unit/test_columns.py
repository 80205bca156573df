"""exporter/columns.py: the one map from a record's field types to column types, and the
columns, Arrow and Spark schemas derived from a record with it."""

from __future__ import annotations

import dataclasses
import enum
import inspect
from dataclasses import dataclass, field

import pyarrow as pa
import pytest

from exporter import model
from exporter.columns import (
    TYPES,
    Int32,
    arrow_of,
    arrow_schema_of,
    columns_of,
    described,
    spark_schema_of,
)
from exporter.pipeline import tables


class Colour(enum.StrEnum):
    RED = "red"


@dataclass(frozen=True, slots=True)
class Sample:
    wide: int = field(metadata=described("ms", "a 64-bit number"))
    narrow: Int32 = field(metadata=described("count", "a 32-bit number"))
    maybe: Int32 | None
    name: str
    flag: bool
    colour: Colour
    colours: tuple[Colour, ...] = ()  # not a column


def test_columns_are_the_scalar_fields_in_order_with_type_nullability_and_docs() -> None:
    cols = columns_of(Sample)
    assert [(c.name, c.kind, c.nullable) for c in cols] == [
        ("wide", "long", False),
        ("narrow", "int", False),
        ("maybe", "int", True),
        ("name", "string", False),
        ("flag", "bool", False),
        ("colour", "string", False),
    ]
    assert (cols[0].unit, cols[0].doc) == ("ms", "a 64-bit number")
    assert (cols[3].unit, cols[3].doc) == ("", "")


def test_records_become_an_arrow_table_of_their_schema() -> None:
    table = arrow_of(Sample, [Sample(2**40, 7, None, "a", True, Colour.RED)])
    assert table.schema == arrow_schema_of(Sample)
    assert [f.type for f in table.schema] == [
        pa.int64(),
        pa.int32(),
        pa.int32(),
        pa.string(),
        pa.bool_(),
        pa.string(),
    ]
    assert table.to_pylist() == [
        {"wide": 2**40, "narrow": 7, "maybe": None, "name": "a", "flag": True, "colour": "red"}
    ]


def test_the_spark_schema_has_the_same_types() -> None:
    schema = spark_schema_of(Sample)
    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in schema.fields] == [
        ("wide", "bigint", False),
        ("narrow", "int", False),
        ("maybe", "int", True),
        ("name", "string", False),
        ("flag", "boolean", False),
        ("colour", "string", False),
    ]


def test_every_column_type_is_mapped_once() -> None:
    assert len({t.kind for t in TYPES.values()}) == len(TYPES)
    assert len({t.arrow for t in TYPES.values()}) == len(TYPES)


MODEL_RECORDS = [
    record
    for _, record in inspect.getmembers(model, inspect.isclass)
    if dataclasses.is_dataclass(record) and record.__module__ == model.__name__
]


@pytest.mark.parametrize("record", MODEL_RECORDS, ids=lambda r: r.__name__)
def test_the_pipeline_tables_take_their_schemas_from_the_one_type_map(record: type) -> None:
    assert tables.schema_of(record) == spark_schema_of(record)
