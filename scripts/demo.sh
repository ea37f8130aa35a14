#!/usr/bin/env bash
# The main job: the demo on the in-process store (no Redis server needed).
# Extra arguments go to `mooncake-redis demo` (see --help).
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
ensure_venv plot
status=0
"$VENV/bin/mooncake-redis" demo "$@" || status=$?
echo >&2
echo "mooncake-redis is installed in $VENV; to run it yourself: source $VENV/bin/activate" >&2
exit "$status"
