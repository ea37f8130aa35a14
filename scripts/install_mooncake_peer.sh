#!/usr/bin/env bash
# Installs the real Mooncake Store (master + Python client) that benchmarks/mooncake_peer.py
# runs as a peer: apt's libibverbs1 and librdmacm1 if missing (no RDMA device is needed, the
# client uses tcp), and PyPI's mooncake-transfer-engine-non-cuda into its own venv, never the
# project's .venv. Idempotent: installs only what is missing. Prints where it all is.
#   MOONCAKE_PEER_VENV  venv to use (default: .venv-peer at the top of the checkout)
#   MOONCAKE_PEER_VERSION  pin a version (default: newest; 0.3.13.post1 was tested)
#   MOONCAKE_PEER_PACKAGE  the PyPI package (default mooncake-transfer-engine-non-cuda).
#     mooncake-transfer-engine-cuda13 (0.3.14, the first release with probe_key) loads
#     only next to a CUDA 13 runtime (libcudart.so.13) and a driver's libcuda.so.1: it is
#     installed without its CUDA dependencies, and where there is no driver a stand-in
#     libcuda.so.1 is built (cc) whose every call answers "no device", so the client runs
#     with the tcp transport; run it through $VENV/bin/python-no-gpu, which finds it.
#   PYTHON  interpreter to make the venv with (default: python3)
#   MOONCAKE_PEER_TEST_DEPS=1  also install what Mooncake's own tests import
#     (scripts/check_mooncake_tests.py): pytest, pytest-timeout, numpy and torch 2.13's CPU
#     build (from PyPI's CPU wheel; never a CUDA build)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MOONCAKE_PEER_VENV:-$ROOT/.venv-peer}"
PYTHON="${PYTHON:-python3}"
PACKAGE="${MOONCAKE_PEER_PACKAGE:-mooncake-transfer-engine-non-cuda}"
SPEC="$PACKAGE${MOONCAKE_PEER_VERSION:+==$MOONCAKE_PEER_VERSION}"

fail() { echo "install_mooncake_peer: cannot install the Mooncake peer: $*" >&2; exit 1; }

[ "$(uname -s)" = Linux ] || fail "its wheels are for Linux only (this is $(uname -s))"

have_lib() { ldconfig -p 2>/dev/null | grep -q "$1"; }
missing=()
have_lib libibverbs.so.1 || missing+=(libibverbs1)
have_lib librdmacm.so.1 || missing+=(librdmacm1)
if [ "${#missing[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null || fail "needs ${missing[*]} and there is no apt-get here"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "Installing ${missing[*]} with apt-get …" >&2
  { $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}" >/dev/null; } \
    || fail "apt-get install ${missing[*]} failed"
fi

PYTHON_RUN="$VENV/bin/python"
[ "$PACKAGE" = mooncake-transfer-engine-cuda13 ] && PYTHON_RUN="$VENV/bin/python-no-gpu"

probe() {
  PACKAGE="$PACKAGE" "$PYTHON_RUN" - <<'EOF' 2>/dev/null
import importlib.metadata, pathlib, mooncake, mooncake.store
master = pathlib.Path(mooncake.__file__).parent / "mooncake_master"
assert master.is_file()
import os
print(importlib.metadata.version(os.environ["PACKAGE"]), master)
EOF
}

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV" || fail "$PYTHON -m venv $VENV failed"
fi
if [ -n "${MOONCAKE_PEER_VERSION:-}" ] || ! probe >/dev/null; then
  echo "Installing $SPEC into $VENV …" >&2
  deps=()
  if [ "$PACKAGE" = mooncake-transfer-engine-cuda13 ]; then
    # the CUDA build's own dependencies are CUDA libraries: take only the Python ones
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check aiohttp requests \
      msgpack || fail "pip install of $PACKAGE's Python dependencies failed"
    deps=(--no-deps)
  fi
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${deps[@]}" "$SPEC" \
    || fail "pip install $SPEC failed (its wheels exist only for some CPython versions \
and CPUs; this is $("$VENV/bin/python" -V 2>&1) on $(uname -m))"
fi
if [ "$PACKAGE" = mooncake-transfer-engine-cuda13 ] && [ ! -x "$VENV/bin/python-no-gpu" ]; then
  site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  stub="$VENV/lib/no-gpu"
  mkdir -p "$stub"
  if ! ldconfig -p | grep -q "libcuda.so.1 "; then
    command -v cc >/dev/null || fail "$PACKAGE needs libcuda.so.1; no driver here and no cc \
to build a stand-in (apt-get install gcc)"
    # every cu* function the wheel's libraries import, each answering 100
    # (CUDA_ERROR_NO_DEVICE)
    find "$site/mooncake" -name '*.so*' -exec nm -D --undefined-only {} + 2>/dev/null \
      | awk '$2 ~ /^cu[A-Z]/ {print $2}' | sed 's/@.*//' | sort -u \
      | awk '{print "int " $1 "(void) { return 100; }"}' > "$stub/libcuda.c"
    cc -shared -fPIC -o "$stub/libcuda.so.1" "$stub/libcuda.c" \
      || fail "building a stand-in libcuda.so.1 failed"
  fi
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
    "$stub" "$VENV/bin/python" > "$VENV/bin/python-no-gpu"
  chmod +x "$VENV/bin/python-no-gpu"
fi
if [ "${MOONCAKE_PEER_TEST_DEPS:-0}" = 1 ]; then
  "$PYTHON_RUN" -c 'import pytest, pytest_timeout, numpy, torch' 2>/dev/null || {
    echo "Installing pytest, numpy and torch (CPU) into $VENV …" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check pytest \
      pytest-timeout numpy "torch==2.13.0" || fail "pip install of the test dependencies failed"
  }
fi
found="$(probe)" || fail "$PACKAGE is installed in $VENV but mooncake.store does not import"
read -r version master <<<"$found"
echo "Mooncake peer ready: $PACKAGE $version"
echo "  python:          $PYTHON_RUN"
echo "  mooncake_master: $master"
run="python -m benchmarks.mooncake_peer --keys 20000 --batch 200"
[ "$PYTHON_RUN" = "$ROOT/.venv-peer/bin/python" ] || \
  run="MOONCAKE_PEER_PACKAGE=$PACKAGE MOONCAKE_PEER_PYTHON=$PYTHON_RUN $run"
echo "  run (in $ROOT): $run"
