#!/usr/bin/env bash
# Every test, against real redis-server processes the tests start themselves and against
# fakeredis. Extra arguments go to pytest. Two pytest-xdist workers by default: the suite
# waits on Redis and on child processes much of the time, so on 2 cores two workers
# finish sooner than one process (docs/ARCHITECTURE.md, Testing, has the figures). Pass
# -n 0 to run in one process (needed for -s or a debugger), or -n auto.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
ensure_redis_server
ensure_venv test
cd "$ROOT"
exec "$VENV/bin/python" -m pytest -n 2 "$@"
