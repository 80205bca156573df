"""End-to-end tests: the daemon, a real Kafka broker, real Prometheus and Alertmanager."""
