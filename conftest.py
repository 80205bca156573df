"""Shared pytest plugins: the real Kafka test bed and the Spark session."""

pytest_plugins = ["tests.fixtures_kafka", "tests.fixtures_spark"]
