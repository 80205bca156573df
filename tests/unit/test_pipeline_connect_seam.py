"""The one private attribute of pyspark the pipeline sets: on Spark Connect the cycle's union
carries its known schema in the DataFrame's schema cache (exporter.pipeline.compute
``_connect_union``), which saves the server a round trip that analyses the whole plan. A
pyspark upgrade that renames the cache fails here, not in a cycle."""

from __future__ import annotations

import inspect

import pytest


def test_the_connect_dataframe_still_reads_its_schema_from_the_cache_the_pipeline_fills() -> None:
    connect = pytest.importorskip("pyspark.sql.connect.dataframe")
    source = inspect.getsource(connect.DataFrame)
    assert "self._cached_schema: Optional[StructType] = None" in source
    schema_property = inspect.getsource(connect.DataFrame._schema.fget)
    assert "if self._cached_schema is None:" in schema_property
    assert "return self._cached_schema" in schema_property
    assert "self.schema" in inspect.getsource(connect.DataFrame.toArrow)
