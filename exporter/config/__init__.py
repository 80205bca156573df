"""One validated config tree.

The YAML file is parsed into frozen dataclasses section by section (:mod:`.model` declares
each section's keys once; :mod:`.keys` holds the machinery). Every problem is collected (key
path, what is wrong, the allowed values) and reported together in one :class:`ConfigError`,
so an operator fixes a file in one go. Unknown and duplicate keys are errors.

Secrets never live in the file: a string value ``${NAME}`` is replaced by the environment
variable ``NAME``, and ``kafka_files`` maps a librdkafka property to a file whose content
becomes its value (Kubernetes Secrets mounted as files). A literal secret is refused unless
the top-level ``allow_literal_secrets: true`` says otherwise.
"""

from __future__ import annotations

from exporter.config.keys import ConfigError, Where, parse_duration_ms
from exporter.config.loader import load_config, read_text, read_yaml
from exporter.config.model import (
    CLUSTER,
    COLLECTION,
    CONFIG,
    DEFAULT_CLUSTER_LABEL,
    DEFAULT_LISTEN_ADDRESS,
    KAFKA_PROPERTIES,
    LOG,
    LOG_FORMATS,
    LOG_LEVELS,
    LSO_LAG_SERIES,
    MAX_REQUEST_TIMEOUT_MS,
    PIPELINE,
    SASL_MECHANISMS,
    SECRET_PROPERTIES,
    SECURITY_PROTOCOLS,
    SPARK,
    UNSUPPORTED_SASL_MECHANISMS,
    WEB,
    ClusterConfig,
    CollectionConfig,
    Config,
    LogConfig,
    SparkConfig,
    TopicFilter,
    WebConfig,
    cluster_from_flags,
    is_secret_spark_setting,
    parse_config,
    parse_flag,
    split_host_port,
)

__all__ = [
    "CLUSTER",
    "COLLECTION",
    "CONFIG",
    "DEFAULT_CLUSTER_LABEL",
    "DEFAULT_LISTEN_ADDRESS",
    "KAFKA_PROPERTIES",
    "LOG",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "LSO_LAG_SERIES",
    "MAX_REQUEST_TIMEOUT_MS",
    "PIPELINE",
    "SASL_MECHANISMS",
    "SECRET_PROPERTIES",
    "SECURITY_PROTOCOLS",
    "SPARK",
    "UNSUPPORTED_SASL_MECHANISMS",
    "WEB",
    "ClusterConfig",
    "CollectionConfig",
    "Config",
    "ConfigError",
    "LogConfig",
    "SparkConfig",
    "TopicFilter",
    "WebConfig",
    "Where",
    "cluster_from_flags",
    "is_secret_spark_setting",
    "load_config",
    "parse_config",
    "parse_duration_ms",
    "parse_flag",
    "read_text",
    "read_yaml",
    "split_host_port",
]
