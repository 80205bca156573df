"""What a metric family is, and what it is built from.

A family (one module of this package) declares in one :class:`Family`: the tables it reads
by name (the snapshot's, :data:`~exporter.pipeline.tables.SNAPSHOT_TABLES`, and its own
:class:`Input` s: what the previous cycle remembered, what it derives from a snapshot),
whether it reads the classified frame, the records it outputs, the memory it hands the next
cycle, and two functions: one returning its outputs as lazy frames, one turning each
cluster's rows back into the parts of a :class:`~exporter.model.CycleResult`. The
orchestrator (``exporter.pipeline.compute``) joins every family's frames into the round's one
Spark action and reads each output back by its record.

A round is one plan over every cluster whose snapshot is ready (:class:`ClusterRun`; one
cluster is a round of one). Every table of a :class:`Context` carries the cluster
(:data:`~exporter.pipeline.tables.CLUSTER`), every join, window and aggregation of a family
lists it among its keys (:func:`~exporter.pipeline.tables.keyed`), a limit is a limit per
cluster (:func:`first_per_cluster`), and each cluster's own settings are columns
(:meth:`Context.value`): a literal when every cluster of the round has the same value (the
round of one always), else the value at the cluster's position of a literal array, read per
row without a join.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from exporter.columns import Column as TableColumn
from exporter.columns import columns_of
from exporter.config.groups import BUILTIN_RULES, AttributionRule, GroupsConfig
from exporter.model import ClusterSnapshot, PipelineMemory, PipelineSettings
from exporter.pipeline.tables import CLUSTER, Handover, RoundSource, Tables, one_partition


@dataclass(frozen=True, slots=True)
class ClusterRun:
    """One cluster's part of a round: its snapshot, the memory its previous cycle handed on
    (None on the first), its clock and its own settings."""

    snapshot: ClusterSnapshot
    memory: PipelineMemory | None
    now_ms: int
    settings: PipelineSettings = field(default_factory=PipelineSettings)
    groups: GroupsConfig | None = None
    rules: tuple[AttributionRule, ...] = BUILTIN_RULES

    @property
    def cluster(self) -> str:
        return self.snapshot.cluster

    @property
    def previous(self) -> PipelineMemory:
        """The previous cycle's memory (empty on the first cycle)."""
        return self.memory if self.memory is not None else PipelineMemory()


@dataclass(frozen=True, slots=True)
class Input:
    """A table of the round that is not the snapshot's: a record, and its rows for one
    cluster's run (what its previous cycle remembered, or what is derived from its snapshot)."""

    record: type
    rows: Callable[[ClusterRun], Sequence[Any]]


@dataclass(frozen=True, slots=True)
class Output:
    """One output table of a family: its rows are its record's columns and the cluster,
    read back by name."""

    name: str
    record: type

    @property
    def columns(self) -> tuple[TableColumn, ...]:
        return (TableColumn(CLUSTER, int, False), *columns_of(self.record))


Rows = Sequence[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Assembly:
    """What a family's rows become for one cluster: its run, its output rows by output name
    (none for an output not selected), whether the family ran for this cluster, and the
    result fields of the families assembled before it (its ``after``)."""

    run: ClusterRun
    rows: Mapping[str, Rows]
    ran: bool
    result: Mapping[str, Any]

    def of(self, output: str) -> Rows:
        return self.rows.get(output, ())


@dataclass(frozen=True, slots=True)
class Parts:
    """A family's part of one cluster's :class:`~exporter.model.CycleResult` (fields by name)
    and of the :class:`~exporter.model.PipelineMemory` it hands the next cycle."""

    result: Mapping[str, Any] = field(default_factory=dict)
    memory: Mapping[str, Any] = field(default_factory=dict)


def _always(run: ClusterRun) -> bool:
    return True


@dataclass(frozen=True)
class Family:
    """One metric family, declared once.

    ``reads``: the tables it reads, by name (the snapshot's and ``inputs``' names);
    ``classified``: it reads the classified frame; ``outputs``: its output tables;
    ``carry``: the :class:`~exporter.model.PipelineMemory` fields it hands the next cycle
    (kept as they were when the family fails); ``frames``: the lazy frames of the selected
    outputs; ``assemble``: one cluster's rows as result and memory parts; ``applies``:
    whether it runs for a cluster (never planned when it runs for none); ``after``: the
    families whose result fields its ``assemble`` reads; ``essential``: a cluster whose run
    of this family fails has no cycle at all (the classification: every other result rests
    on it)."""

    name: str
    reads: tuple[str, ...]
    outputs: tuple[Output, ...]
    frames: Callable[[Context, frozenset[str]], Mapping[str, DataFrame]]
    assemble: Callable[[Assembly], Parts]
    classified: bool = False
    inputs: Mapping[str, Input] = field(default_factory=dict)
    carry: tuple[str, ...] = ()
    applies: Callable[[ClusterRun], bool] = _always
    after: tuple[str, ...] = ()
    essential: bool = False

    @property
    def output_names(self) -> frozenset[str]:
        return frozenset(o.name for o in self.outputs)


Value = int | str | bool | None


class Context:
    """What a family's frames are built from: the round's tables by name (each with the
    cluster), each cluster's settings as columns, the classified frame, and frames that
    several families read (:meth:`shared`). A view for one family (:meth:`within`) reads
    only the clusters the family runs for."""

    def __init__(
        self,
        spark: SparkSession,
        runs: Sequence[ClusterRun],
        handover: Handover | None,
        inputs: Mapping[str, Input],
        *,
        large: bool = False,
    ) -> None:
        self.spark = spark
        self.runs = tuple(runs)
        #: A large round (``session.LARGE_ROUND_PARTITIONS``), run compiled: a frame that
        #: several outputs read over every partition is computed once rather than in each,
        #: and the clusters' values are arrays (:meth:`value`).
        self.large = large
        self.handover = handover
        sources: dict[str, RoundSource] = {
            name: (given.record, functools.partial(_rows_at, self.runs, given.rows))
            for name, given in inputs.items()
        }
        self.tables = Tables(spark, [r.snapshot for r in self.runs], handover, sources)
        self.classified: DataFrame | None = None
        self._shared: dict[str, DataFrame] = {}
        self._kept: list[DataFrame] = []
        self._scope: tuple[int, ...] | None = None
        self._reads: frozenset[str] | None = None
        #: The round's own context, of which this one is a view; None in the round's own. Never
        #: itself: a context holding itself is a reference cycle, which Python frees only at
        #: its next full collection, so the round's snapshots, remembered rows and JVM handles
        #: outlived the round until then (the bench's 1M partitions of snapshots: ~330 MiB).
        self._base: Context | None = None

    def within(self, scope: Sequence[int], reads: Sequence[str]) -> Context:
        """A view for one family: the round's clusters at the positions ``scope``, and only
        the tables the family declares it reads (``reads``: any other is an error)."""
        view = object.__new__(Context)
        view.__dict__.update(self.__dict__)
        view._base = self._round
        view._scope = None if len(scope) == len(self.runs) else tuple(scope)
        view._reads = frozenset(reads)
        return view

    @property
    def _round(self) -> Context:
        return self if self._base is None else self._base

    def _in_scope(self, frame: DataFrame) -> DataFrame:
        if self._scope is None:
            return frame
        return frame.where(cluster_in(self._scope))

    def __getitem__(self, name: str) -> DataFrame:
        self._check_reads(name)
        return self._in_scope(self.tables[name])

    def frame_in(self, name: str, session: SparkSession) -> DataFrame:
        """The table ``name`` as a frame of another session of the same SparkContext."""
        self._check_reads(name)
        return self._in_scope(self.tables.frame_in(name, session))

    def _check_reads(self, name: str) -> None:
        if self._reads is not None and name not in self._reads:
            raise KeyError(f"table {name} is not among the tables the family declares it reads")

    def empty(self, name: str) -> bool:
        rows = self.tables.rows(name)
        return not any(rows[i] for i in (self._scope or range(len(rows))))

    @property
    def classified_frame(self) -> DataFrame | None:
        """The classified open transactions (None: no cluster has any, nor a candidate)."""
        return None if self.classified is None else self._in_scope(self.classified)

    def shared(self, key: str, build: Callable[[Context], DataFrame]) -> DataFrame:
        """A frame several families read, built once over the whole round."""
        base = self._round
        if key not in base._shared:
            base._shared[key] = build(base)
        return self._in_scope(base._shared[key])

    def checkpoint(self, frame: DataFrame) -> DataFrame:
        """``frame`` as a lazy local checkpoint of one partition, released when the round's
        action has run (``tables.Handover.checkpoint``)."""
        if self.handover is None:
            return one_partition(frame.localCheckpoint(eager=False))
        return self.handover.checkpoint(frame)

    def keep(self, checkpoint: DataFrame) -> DataFrame:
        """A checkpoint made elsewhere (``session.compiled_leaf``), released when the round's
        action has run (``tables.Handover.keep``)."""
        return checkpoint if self.handover is None else self.handover.keep(checkpoint)

    def sql(self, query: str, **frames: DataFrame) -> DataFrame:
        """``spark.sql(query, **frames)``, the frames kept until the round is done: on Spark
        Connect the statement's result names them on the server, where a checkpoint among them
        is released as soon as the last client object naming it goes."""
        self._round._kept.extend(frames.values())
        args: dict[str, Any] = dict(frames)
        return self.spark.sql(query, **args)

    def any(self, test: Callable[[ClusterRun], bool]) -> bool:
        return any(test(self.runs[i]) for i in (self._scope or range(len(self.runs))))

    def value(self, of: Callable[[ClusterRun], Value], kind: str = "bigint") -> Column:
        """A setting of each cluster (``of(run)``) as a column of the round's rows: a literal
        when every cluster has the same (a null of ``kind`` when it is None), else the
        cluster's element of a literal array.

        Always the array in a large round, which runs compiled (``session.large_round``):
        generated code writes a number literal into its source, so a clock made every round
        compile its classes again and run them interpreted until the JIT caught up; an array
        is handed to the compiled class as an object, and the next round finds the class in
        Spark's cache.

        The array is written as SQL text (:func:`_sql_array`), parsed in one call into the
        JVM: built of ``F.lit`` columns, it took a few py4j round trips per cluster, for each
        of the round's dozen settings. Strings are not written into text: their array holds
        each distinct string once, and the cluster's index into it is the text."""
        values = [of(r) for r in self.runs]
        first = values[0]
        if all(v == first for v in values) and not self.large:
            return F.lit(first) if first is not None else F.lit(None).cast(kind)
        numbers = [v for v in values if v is None or isinstance(v, int)]
        if len(numbers) == len(values):
            return F.expr(f"{_sql_array(numbers, kind)}[{CLUSTER}]")
        distinct = list(dict.fromkeys(values))
        index = _sql_array([distinct.index(v) for v in values], "int")
        return F.array(*(F.lit(v) for v in distinct)).cast(f"array<{kind}>")[F.expr(f"{index}[{CLUSTER}]")]

    def sql_value(self, of: Callable[[ClusterRun], int | bool]) -> str:
        """:meth:`value` in SQL text (integers and booleans only: nothing else is written
        into a statement)."""
        values = [of(r) for r in self.runs]
        texts = [_sql_literal(v) for v in values]
        if len(set(texts)) == 1 and not self.large:
            return texts[0]
        return f"{_sql_array(values, 'boolean' if isinstance(values[0], bool) else 'bigint')}[{CLUSTER}]"


def _rows_at(
    runs: Sequence[ClusterRun], rows: Callable[[ClusterRun], Sequence[Any]], at: int
) -> Sequence[Any]:
    return rows(runs[at])


def cluster_in(positions: Sequence[int]) -> Column:
    """True on the rows of the clusters at ``positions`` of the round. SQL text: one call
    into the JVM, where ``isin`` takes a few per cluster."""
    return F.expr(f"{CLUSTER} IN ({', '.join(str(int(i)) for i in positions)})")


def _sql_literal(value: int | bool) -> str:
    """An integer as a BIGINT literal (``7L``), a boolean as TRUE or FALSE. Not a ``CAST``
    each: a classic session analyses the plan beneath every DataFrame step, and a cast per
    cluster for each setting made a round of 100 clusters slower."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return f"{int(value)}L"


def _sql_array(values: Sequence[int | bool | None], kind: str) -> str:
    """``values`` as the SQL text of an ``array<kind>`` literal (a None is a null element)."""
    items = ("NULL" if v is None else _sql_literal(v) for v in values)
    return f"CAST(array({', '.join(items)}) AS array<{kind}>)"


def first_per_cluster(frame: DataFrame, limit: Column, *order: Column | str) -> DataFrame:
    """The first ``limit`` rows of each cluster by ``order`` (a limit of the cycle, kept per
    cluster of the round: a window instead of ``orderBy().limit()``)."""
    ranked = Window.partitionBy(CLUSTER).orderBy(*order)
    return (
        frame.select("*", F.row_number().over(ranked).alias("_rank"))
        .where(F.col("_rank") <= limit)
        .drop("_rank")
    )
