#!/usr/bin/env bash
# Sourced by demo.sh and test.sh: makes .venv with the package and its extras installed.
# Re-installs only when pyproject.toml changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MOONCAKE_REDIS_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"

# ensure_venv EXTRAS: with $PINS set (requirement specifiers such as "redis==5.3.0"), those
# versions are installed with the package (scripts/test_floors.sh).
ensure_venv() {
  local extras="$1"
  if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
      || { echo "mooncake-redis needs Python 3.10 or newer" >&2; exit 1; }
    "$PYTHON" -m venv "$VENV"
  fi
  local stamp="$VENV/.installed-$extras"
  local want
  want="$( (cat "$ROOT/pyproject.toml"; echo "${PINS:-}") | sha256sum | cut -d' ' -f1)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "Installing mooncake-redis[$extras] ${PINS:+$PINS }into $VENV …" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    # shellcheck disable=SC2086  # PINS is a list of specifiers
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[$extras]" \
      ${PINS:-}
    echo "$want" > "$stamp"
  fi
}

ensure_redis_server() {
  command -v redis-server >/dev/null && return 0
  echo "Installing redis-server (the tests start their own servers) …" >&2
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  if command -v apt-get >/dev/null; then
    $sudo apt-get update -qq && $sudo apt-get install -y -qq redis-server >/dev/null
  elif command -v brew >/dev/null; then
    brew install redis
  else
    echo "Please install redis-server (Redis 7) and run again." >&2
    exit 1
  fi
}
