#!/usr/bin/env bash
# The long concurrency soak (not run in CI): client processes putting, reading and
# removing on one shared tree while eviction workers run under capacity pressure, on a
# throwaway redis-server it starts itself (AOF on). At the end it runs fsck (before and
# after the resolver) and checks that no object was evicted or removed while a client
# held a lease on it; it prints usage every 30 s and a summary (operations, refusals,
# jobs, evictions, leases held/violated, fsck result), and exits 1 on any violation.
#   ./scripts/soak.sh               10 minutes: 6 clients, 2 evictors, 50,000 pages
#   ./scripts/soak.sh 3600          an hour
#   ./scripts/soak.sh 600 --clients 12 --evictors 3 --pages 200000 --capacity 1000000
#   ./scripts/soak.sh 600 --url redis://127.0.0.1:6379/0 --namespace soak-1
#   ./scripts/soak.sh 600 --kill-every 30 --cluster   on a throwaway 3-master cluster
# Extra arguments go to tests/soak.py (see --help). The CI version is tests/test_soak.py
# (6 seconds, 3 clients, 2 evictors). Objects are 10 bytes; capacity is in bytes.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
ensure_redis_server
ensure_venv test
cd "$ROOT"
seconds=600
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
  seconds="$1"
  shift
fi
PYTHONPATH="$ROOT/tests" exec "$VENV/bin/python" tests/soak.py --seconds "$seconds" "$@"
