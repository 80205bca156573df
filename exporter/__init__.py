"""kafka-txn-exporter: transaction-health metrics for Apache Kafka."""

__version__ = "0.1.0"
