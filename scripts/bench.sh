#!/usr/bin/env bash
# Benchmarks against their baselines, each on a throwaway redis-server it starts itself
# (never a Redis you run). Prints tables; writes out/bench/results.json and tables.md.
# Extra arguments go to `python -m benchmarks` (see --help); docs/BENCHMARKS.md has a run.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
ensure_redis_server
ensure_venv test
cd "$ROOT"
exec "$VENV/bin/python" -m benchmarks "$@"
