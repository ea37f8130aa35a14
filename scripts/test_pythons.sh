#!/usr/bin/env bash
# The quick subset of the tests (about 1.5 min a version on 2 cores) on every supported
# Python found on this machine, oldest to newest, each in its own venv
# (.venv-python3.X). CI (.ci/run) runs the whole suite on python3 and this for 3.10 and
# 3.13; run it for every version before a release, or after touching anything
# version-sensitive (typing, dataclasses, packaging).
# Pythons are looked up as python3.X on PATH, under pyenv ($PYENV_ROOT/versions/3.X.*),
# and through `uv python find`; a version not found is installed (`uv python install`,
# with uv from PyPI in .venv-uv when it is not on PATH; else the distribution's
# python3.X-venv package), and one that cannot be installed fails the run: a version
# asked for is never skipped. The exit code is non-zero if any version failed.
# Usage: scripts/test_pythons.sh [VERSION...]   (default: 3.10 3.11 3.12 3.13)
# Extra pytest arguments: PYTEST_ARGS="-x" scripts/test_pythons.sh
# PINS="redis==5.3.0 ..." installs those versions too, in .venv-python3.X$VENV_SUFFIX
# (scripts/test_floors.sh).
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
ensure_redis_server
cd "$ROOT"

QUICK=(tests/test_keys.py tests/test_settings.py tests/test_prefix.py tests/test_scripts.py
       tests/test_objects.py tests/test_radix.py tests/test_eviction.py tests/test_fsck.py
       tests/test_model.py tests/test_bad_input.py tests/test_security.py tests/test_doctor.py
       tests/test_cli.py tests/test_metrics.py tests/test_workers.py
       tests/test_admission_wait.py tests/test_imports.py)

find_python() {
  local version="$1" candidate
  for candidate in "python$version" \
      "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/"python$version"; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "" >/dev/null 2>&1; then
      command -v "$candidate"
      return
    fi
  done
  if command -v uv >/dev/null 2>&1; then
    uv python find "$version" 2>/dev/null || true
  fi
}

# install_python VERSION: install it (uv, else apt-get); prints nothing on failure.
install_python() {
  local version="$1" uv
  uv="$(command -v uv || true)"
  if [ -z "$uv" ]; then
    uv="$ROOT/.venv-uv/bin/uv"
    if [ ! -x "$uv" ]; then
      { python3 -m venv "$ROOT/.venv-uv" &&
        "$ROOT/.venv-uv/bin/python" -m pip install --quiet --disable-pip-version-check uv
      } >&2 || uv=""
    fi
  fi
  if [ -n "$uv" ]; then
    echo "python$version not found: uv python install $version …" >&2
    if "$uv" python install "$version" >&2; then
      "$uv" python find "$version" 2>/dev/null && return
    fi
  fi
  if command -v apt-get >/dev/null 2>&1 \
      && apt-cache show "python$version-venv" >/dev/null 2>&1; then
    echo "python$version not found: apt-get install python$version-venv …" >&2
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    if $sudo apt-get install -y -qq "python$version-venv" >&2; then
      command -v "python$version"
    fi
  fi
}

versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.10 3.11 3.12 3.13)
summary=()
status=0
for version in "${versions[@]}"; do
  python="$(find_python "$version")"
  [ -n "$python" ] || python="$(install_python "$version" || true)"
  if [ -z "$python" ]; then
    summary+=("python$version: FAILED: not installed, and it could not be installed")
    status=1
    continue
  fi
  venv="$ROOT/.venv-python$version${VENV_SUFFIX:-}"
  VENV="$venv" PYTHON="$python" ensure_venv test
  echo "== python$version ($python)${PINS:+ with $PINS}" >&2
  if "$venv/bin/python" -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-} "${QUICK[@]}"; then
    summary+=("python$version${PINS:+ ($PINS)}: passed")
  else
    summary+=("python$version${PINS:+ ($PINS)}: FAILED")
    status=1
  fi
done
printf '%s\n' "${summary[@]}"
exit "$status"
