#!/usr/bin/env bash
# Benchmarks against their goals (issue 10), baselines and the real Mooncake master, each
# on a throwaway redis-server it starts itself (never a Redis you run). Prints tables;
# writes out/bench/results.json and tables.md. Extra arguments go to `python -m benchmarks`
# (see --help); docs/BENCHMARKS.md has a full run and how to read it.
#   ./scripts/bench.sh                      full run (about 30 min on 2 busy cores)
#   ./scripts/bench.sh --scale small        smoke run, under a minute
#   ./scripts/bench.sh --only mooncake      one benchmark (repeatable)
# The Mooncake side-by-side needs scripts/install_mooncake_peer.sh once (its own venv,
# .venv-peer, or MOONCAKE_PEER_VENV / MOONCAKE_PEER_PYTHON); without it that part is
# skipped with the reason. Diagnostics: `python -m benchmarks.profiling`,
# `python -m benchmarks.versions --ref <v1 ref> --ref HEAD`.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
ensure_redis_server
ensure_venv test
cd "$ROOT"
exec "$VENV/bin/python" -m benchmarks "$@"
