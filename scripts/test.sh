#!/usr/bin/env bash
# Every test, against real redis-server processes the tests start themselves and against
# fakeredis. Extra arguments go to pytest.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
ensure_redis_server
ensure_venv test
cd "$ROOT"
exec "$VENV/bin/python" -m pytest "$@"
