# syntax=docker/dockerfile:1
# kafka-txn-exporter images, two targets of this file:
#
#   runtime (the default): the Python daemon plus a headless JRE for its embedded local-mode
#     Spark driver, and the driver's class archive.
#   thin: the exporter as a Spark Connect client (spark.connect_url), e.g. a sidecar: the
#     pure-Python Spark Connect client (pyspark-client) in place of pyspark; no JRE, no Spark
#     jars. The Helm chart runs it when spark.mode is connect.
#
# Both run as uid 10001 and work on a read-only root filesystem as long as the writable
# directories below are volumes (the Helm chart mounts emptyDirs there).
#
#   docker build -t kafka-txn-exporter:0.1.0 .
#   docker build --target thin -t kafka-txn-exporter:0.1.0-thin .
#   docker run --read-only --tmpfs /tmp --tmpfs /home/exporter \
#     --tmpfs /var/lib/kafka-txn-exporter/spark -v kte-state:/var/lib/kafka-txn-exporter/state \
#     -p 9851:9851 \
#     -v "$PWD/config.yml:/etc/kafka-txn-exporter/config.yml:ro" kafka-txn-exporter:0.1.0
#
# Without Docker (buildah, on a Debian base made with debootstrap): docs/deploy.md. Any base
# with Python 3.11 works as PYTHON_IMAGE if it has `python` and `pip` on PATH, lets pip install
# system-wide, and has apt-get, useradd and the venv module.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# The thin image's Spark Connect client. A Connect client works with servers of its own
# version and newer ones: keep it no newer than the Spark Connect server it talks to.
ARG PYSPARK_CLIENT_VERSION=4.2.0

# ---- builder: the project wheel and wheels for every dependency (pyspark ships as an sdist).
# pip keeps its downloads and the wheels it builds in /root/.cache/pip: a build that mounts a
# cache directory there reuses them (buildah bud -v DIR:/root/.cache/pip); only /wheels leaves
# this stage.
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# README.md* : pyproject names README.md as the long description.
COPY pyproject.toml README.md* ./
COPY exporter ./exporter
RUN pip wheel --wheel-dir /wheels .

# ---- thin-builder: a virtualenv with the project and the thin image's dependencies: the
# project's own and its `connect` extra's, pyspark-client in place of pyspark. Trimmed: no test
# suites, C headers or sources; no Arrow Flight or S3 libraries (neither the exporter nor the
# Connect client uses them; only their own modules link them, and pyarrow.fs imports S3 only
# if it is there); debug symbols stripped (not from the libraries auditwheel bundled in
# *.libs: strip breaks their alignment); bytecode only for the modules the daemon and the CLI
# import (written by importing them once, here).
FROM ${PYTHON_IMAGE} AS thin-builder
ARG PYSPARK_CLIENT_VERSION
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md* ./
COPY exporter ./exporter
RUN set -eux; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends binutils; \
    rm -rf /var/lib/apt/lists/*; \
    python -c 'import re, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; reqs = p["dependencies"] + p["optional-dependencies"]["connect"]; print("\n".join(r for r in reqs if re.match(r"[\w.-]+", r)[0].lower() != "pyspark"))' > requirements.txt; \
    echo "pyspark-client==${PYSPARK_CLIENT_VERSION}" >> requirements.txt; \
    cat requirements.txt; \
    pip wheel --wheel-dir /wheels -r requirements.txt; \
    pip wheel --no-deps --wheel-dir /wheels .; \
    venv=/opt/kafka-txn-exporter; \
    python -m venv "$venv"; \
    "$venv/bin/pip" install --no-index --find-links=/wheels --no-compile -r requirements.txt; \
    "$venv/bin/pip" install --no-index --find-links=/wheels --no-compile --no-deps kafka-txn-exporter; \
    "$venv/bin/pip" uninstall -y pip setuptools; \
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"; \
    find "$venv" -depth -type d \( -name tests -o -name __pycache__ \) -exec rm -rf {} +; \
    find "$site" -type f \( -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' -o -name '*.h' \
        -o -name '*.hpp' -o -name '*.cc' -o -name '*.cpp' \) -delete; \
    rm -rf "$site/pyarrow/include" "$site/pyarrow/src" \
        "$site"/pyarrow/*flight* "$site"/pyarrow/*s3*; \
    find "$venv" -type f -name '*.so*' -not -path '*.libs/*' -exec strip --strip-unneeded {} +; \
    cd /; \
    "$venv/bin/python" -m exporter.daemon.preload; \
    "$venv/bin/python" -m exporter.cli --help > /dev/null; \
    "$venv/bin/kafka-txn-exporter" --version

# ---- common: the user, the writable directories and the container's interface, both images
FROM ${PYTHON_IMAGE} AS common
ARG UID=10001
ARG GID=10001

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

ENV HOME=/home/exporter \
    SPARK_LOCAL_DIRS=/var/lib/kafka-txn-exporter/spark \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /home/exporter
EXPOSE 9851

LABEL org.opencontainers.image.title="kafka-txn-exporter" \
      org.opencontainers.image.description="Prometheus exporter for Kafka transaction health" \
      org.opencontainers.image.licenses="Apache-2.0"

# Kept in the image only in the Docker image format (buildah/podman: --format docker). On
# another port: set KAFKA_TXN_EXPORTER_HEALTH_URL.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ.get('KAFKA_TXN_EXPORTER_HEALTH_URL', 'http://127.0.0.1:9851/healthz'), timeout=4)"]

ENTRYPOINT ["kafka-txn-exporter", "run"]
CMD ["--config.file", "/etc/kafka-txn-exporter/config.yml"]

# ---- thin: the Spark Connect client image
FROM common AS thin
COPY --from=thin-builder /opt/kafka-txn-exporter /opt/kafka-txn-exporter
ENV PATH=/opt/kafka-txn-exporter/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER 10001:10001

# ---- runtime: the embedded Spark driver's image (the default target)
FROM common AS runtime

# Debian bookworm: openjdk-17-jre-headless (Spark 4 runs on Java 17). The man1 directory works
# around the JRE's post-install script on slim images, which strip /usr/share/man.
RUN set -eux; \
    mkdir -p /usr/share/man/man1; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless; \
    rm -rf /var/lib/apt/lists/*; \
    ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/java-17

ENV JAVA_HOME=/usr/lib/jvm/java-17

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

USER 10001:10001
