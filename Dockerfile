# syntax=docker/dockerfile:1
# kafka-txn-exporter image: the Python daemon plus a headless JRE for its embedded
# local-mode Spark driver. Runs as uid 10001 and works on a read-only root filesystem as long
# as the writable directories below are volumes (the Helm chart mounts emptyDirs there).
#
#   docker build -t kafka-txn-exporter:0.1.0 .
#   docker run --read-only --tmpfs /tmp --tmpfs /home/exporter \
#     --tmpfs /var/lib/kafka-txn-exporter/spark -v kte-state:/var/lib/kafka-txn-exporter/state \
#     -p 9851:9851 \
#     -v "$PWD/config.yml:/etc/kafka-txn-exporter/config.yml:ro" kafka-txn-exporter:0.1.0

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- builder: the project wheel and wheels for every dependency (pyspark ships as an sdist)
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
# README.md* : pyproject names README.md as the long description.
COPY pyproject.toml README.md* ./
COPY exporter ./exporter
RUN pip wheel --wheel-dir /wheels .

# ---- runtime
FROM ${PYTHON_IMAGE} AS runtime
ARG UID=10001
ARG GID=10001

# Debian bookworm: openjdk-17-jre-headless (Spark 4 runs on Java 17). The man1 directory works
# around the JRE's post-install script on slim images, which strip /usr/share/man.
RUN set -eux; \
    mkdir -p /usr/share/man/man1; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless; \
    rm -rf /var/lib/apt/lists/*; \
    ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/java-17

# Writable at run time (everything else is read-only under the chart):
#   /tmp                               JVM and PySpark temporary files
#   /home/exporter                     HOME and working directory (Ivy cache, spark-warehouse)
#   /var/lib/kafka-txn-exporter/spark  spark.local_dir (SPARK_LOCAL_DIRS)
#   /var/lib/kafka-txn-exporter/state  state_dir: each cluster's pipeline memory across restarts
RUN set -eux; \
    groupadd --system --gid "${GID}" exporter; \
    useradd --system --uid "${UID}" --gid "${GID}" --home-dir /home/exporter \
        --no-create-home --shell /usr/sbin/nologin exporter; \
    install -d -m 0770 -o "${UID}" -g "${GID}" /home/exporter \
        /var/lib/kafka-txn-exporter/spark /var/lib/kafka-txn-exporter/state; \
    install -d -m 0755 /etc/kafka-txn-exporter

ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    HOME=/home/exporter \
    SPARK_LOCAL_DIRS=/var/lib/kafka-txn-exporter/spark \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Install from the builder's wheels without copying them into a layer.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels kafka-txn-exporter

# The embedded driver's class archive (HotSpot Class Data Sharing), written by this image's
# own JVM and Spark jars after one warm-up pipeline run: the driver maps it instead of
# loading Spark's classes one by one, so the first cycle comes 2-3 s sooner and the CLI's
# cold fallback takes 6.3 s instead of 9.1 (docs/operations.md, "The class archive").
# Read-only; the daemon and the CLI find it through the environment (spark.class_archive
# overrides it).
ENV KAFKA_TXN_EXPORTER_SPARK_CLASS_ARCHIVE=/usr/local/share/kafka-txn-exporter/spark-classes.jsa
RUN set -eux; \
    install -d -m 0755 /usr/local/share/kafka-txn-exporter; \
    kafka-txn-exporter class-archive --out "${KAFKA_TXN_EXPORTER_SPARK_CLASS_ARCHIVE}"; \
    rm -rf /tmp/* /var/lib/kafka-txn-exporter/spark/* /home/exporter/* /spark-warehouse

WORKDIR /home/exporter
USER 10001:10001
EXPOSE 9851

LABEL org.opencontainers.image.title="kafka-txn-exporter" \
      org.opencontainers.image.description="Prometheus exporter for Kafka transaction health" \
      org.opencontainers.image.licenses="Apache-2.0"

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9851/healthz', timeout=4)"]

ENTRYPOINT ["kafka-txn-exporter", "run"]
CMD ["--config.file", "/etc/kafka-txn-exporter/config.yml"]
