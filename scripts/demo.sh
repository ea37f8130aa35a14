#!/usr/bin/env bash
# The main job: the demo on the in-process store (no Redis server needed).
# Extra arguments go to `mooncake-redis demo` (see --help).
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
ensure_venv plot
exec "$VENV/bin/mooncake-redis" demo "$@"
