#!/usr/bin/env bash
# Idempotent set-up for tests, the demo and benchmarks on a fresh Debian machine:
# system packages, a virtualenv with the project, the pinned Kafka jars, and Helm.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
KAFKA_VERSION=${KAFKA_VERSION:-4.4.0}
HELM_VERSION=${HELM_VERSION:-v3.19.2}
CACHE=${KTE_CACHE:-$HOME/.cache/kafka-txn-exporter}
mkdir -p "$CACHE/bin"

need_apt=()
command -v java >/dev/null || need_apt+=(openjdk-17-jre-headless)
# testbed/streams.py compiles its Kafka Streams application with javac (a JDK).
command -v javac >/dev/null || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || need_apt+=(maven)
command -v promtool >/dev/null || need_apt+=(prometheus)
command -v prometheus-alertmanager >/dev/null || need_apt+=(prometheus-alertmanager)
# tests/e2e/test_web.py makes its CA, server and client certificates with the openssl CLI.
command -v openssl >/dev/null || need_apt+=(openssl)
command -v go >/dev/null || [ -x "$CACHE/bin/helm" ] || need_apt+=(golang-go)
# Headless Chromium: the history test opens the HTML report and checks its plots render.
command -v chromium >/dev/null || need_apt+=(chromium)
# The images (tests/image): debootstrap makes the Debian base, buildah builds the Dockerfile on
# it, podman runs the images with runc (as root: no user namespaces, fuse or slirp needed).
for tool in buildah podman debootstrap runc; do
  command -v "$tool" >/dev/null || need_apt+=("$tool")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  python3.11 -m venv "$VENV" 2>/dev/null || python3 -m venv "$VENV"
fi
stamp="$VENV/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setup: installing Python packages into $VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -e '.[dev]'
  touch "$stamp"
fi

echo "setup: Kafka $KAFKA_VERSION jars"
"$VENV/bin/python" -m testbed fetch --kafka-version "$KAFKA_VERSION"

if [ ! -x "$CACHE/bin/helm" ]; then
  echo "setup: building Helm $HELM_VERSION with go install (a few minutes, once)"
  GOBIN="$CACHE/bin" GOFLAGS=-mod=mod go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
fi
echo "setup: done"
