#!/usr/bin/env bash
# Installs the real Mooncake Store (master + Python client) that benchmarks/mooncake_peer.py
# runs as a peer: apt's libibverbs1 and librdmacm1 if missing (no RDMA device is needed, the
# client uses tcp), and PyPI's mooncake-transfer-engine-non-cuda into its own venv, never the
# project's .venv. Idempotent: installs only what is missing. Prints where it all is.
#   MOONCAKE_PEER_VENV  venv to use (default: .venv-peer at the top of the checkout)
#   MOONCAKE_PEER_VERSION  pin a version (default: newest; 0.3.13.post1 was tested)
#   PYTHON  interpreter to make the venv with (default: python3)
#   MOONCAKE_PEER_TEST_DEPS=1  also install what Mooncake's own tests import
#     (scripts/check_mooncake_tests.py): pytest, pytest-timeout, numpy and torch 2.13's CPU
#     build (from PyPI's CPU wheel; never a CUDA build)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MOONCAKE_PEER_VENV:-$ROOT/.venv-peer}"
PYTHON="${PYTHON:-python3}"
PACKAGE="mooncake-transfer-engine-non-cuda"
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

probe() {
  "$VENV/bin/python" - <<'EOF' 2>/dev/null
import importlib.metadata, pathlib, mooncake, mooncake.store
master = pathlib.Path(mooncake.__file__).parent / "mooncake_master"
assert master.is_file()
print(importlib.metadata.version("mooncake-transfer-engine-non-cuda"), master)
EOF
}

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV" || fail "$PYTHON -m venv $VENV failed"
fi
if [ -n "${MOONCAKE_PEER_VERSION:-}" ] || ! probe >/dev/null; then
  echo "Installing $SPEC into $VENV …" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$SPEC" \
    || fail "pip install $SPEC failed (its wheels exist only for some CPython versions \
and CPUs; this is $("$VENV/bin/python" -V 2>&1) on $(uname -m))"
fi
if [ "${MOONCAKE_PEER_TEST_DEPS:-0}" = 1 ]; then
  "$VENV/bin/python" -c 'import pytest, pytest_timeout, numpy, torch' 2>/dev/null || {
    echo "Installing pytest, numpy and torch (CPU) into $VENV …" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check pytest \
      pytest-timeout numpy "torch==2.13.0" || fail "pip install of the test dependencies failed"
  }
fi
found="$(probe)" || fail "$PACKAGE is installed in $VENV but mooncake.store does not import"
read -r version master <<<"$found"
echo "Mooncake peer ready: $PACKAGE $version"
echo "  python:          $VENV/bin/python"
echo "  mooncake_master: $master"
run="python -m benchmarks.mooncake_peer --keys 20000 --batch 200"
[ "$VENV" = "$ROOT/.venv-peer" ] || run="MOONCAKE_PEER_PYTHON=$VENV/bin/python $run"
echo "  run (in $ROOT): $run"
