"""Records as typed columns: the one map from a record's field types to column types.

A record is a frozen dataclass; its scalar fields, in declaration order, are its columns.
Python ``int`` is a 64-bit integer (Arrow ``int64``, Spark ``long``), :data:`Int32` a 32-bit
one (``int32``, Spark ``int``: the history's narrow columns), ``str`` a string, ``bool`` a
boolean, a ``StrEnum`` its string value; ``X | None`` is nullable. Tuple and set fields are
not columns. A field's ``metadata`` may carry its unit and a line of documentation
(:func:`described`).

Nothing here imports Spark: :attr:`Column.spark` and :func:`spark_schema_of` import it when
asked, so that a command that writes one Arrow row (the audit log) starts no more than it
needs. The pipeline's tables (``exporter.pipeline.tables``) and the history's datasets both
take their columns from here.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import operator
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypeAlias

import pyarrow as pa

#: A 32-bit integer column (a plain ``int`` is 64-bit).
Int32: TypeAlias = Annotated[int, "int32"]


@dataclass(frozen=True, slots=True)
class ColumnType:
    #: The name the docs use (docs/history.md's tables): string, int, long, bool.
    kind: str
    arrow: pa.DataType
    #: The class in ``pyspark.sql.types`` (imported when a Spark type is asked for).
    spark_class: str


#: Field type -> column type: the only such map.
TYPES: Mapping[object, ColumnType] = {
    int: ColumnType("long", pa.int64(), "LongType"),
    Int32: ColumnType("int", pa.int32(), "IntegerType"),
    str: ColumnType("string", pa.string(), "StringType"),
    bool: ColumnType("bool", pa.bool_(), "BooleanType"),
}


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    #: The field's type with ``| None`` removed: a key of :data:`TYPES` or a StrEnum.
    python: object
    nullable: bool
    unit: str = ""
    doc: str = ""

    @property
    def base(self) -> object:
        if isinstance(self.python, type) and issubclass(self.python, enum.Enum):
            return str
        return self.python

    @property
    def type(self) -> ColumnType:
        return TYPES[self.base]

    @property
    def kind(self) -> str:
        return self.type.kind

    @property
    def arrow(self) -> pa.DataType:
        return self.type.arrow

    @property
    def spark(self) -> Any:
        """The ``pyspark.sql.types.DataType`` of the column."""
        return getattr(importlib.import_module("pyspark.sql.types"), self.type.spark_class)()

    @property
    def is_enum(self) -> bool:
        return self.base is not self.python


def described(unit: str, doc: str) -> dict[str, str]:
    """A field's unit and documentation, as its dataclass metadata:
    ``topic: str = field(metadata=described("-", "topic"))``."""
    return {"unit": unit, "doc": doc}


@functools.cache
def columns_of(record: type) -> tuple[Column, ...]:
    """The columns of a record type: its scalar fields, in declaration order."""
    hints = typing.get_type_hints(record, include_extras=True)
    out: list[Column] = []
    for f in dataclasses.fields(record):
        kind, nullable = _unwrap_optional(hints[f.name])
        if kind in TYPES or (isinstance(kind, type) and issubclass(kind, enum.Enum)):
            out.append(Column(f.name, kind, nullable, f.metadata.get("unit", ""), f.metadata.get("doc", "")))
    return tuple(out)


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


@functools.cache
def arrow_schema_of(record: type) -> pa.Schema:
    return pa.schema([pa.field(c.name, c.arrow, c.nullable) for c in columns_of(record)])


def spark_schema_of(record: type) -> Any:
    """The record's columns as a ``pyspark.sql.types.StructType``."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(c.name, c.spark, c.nullable) for c in columns_of(record)])


def arrow_of(record: type, rows: Sequence[Any]) -> pa.Table:
    """Records (instances of ``record``) as a columnar Arrow table of the record's columns:
    one C-level getter per column, no tuple per row."""
    arrays = []
    for c in columns_of(record):
        column: list[Any] = list(map(operator.attrgetter(c.name), rows))
        if c.is_enum:
            column = [None if v is None else v.value for v in column]
        arrays.append(pa.array(column, type=c.arrow))
    return pa.Table.from_arrays(arrays, schema=arrow_schema_of(record))
