#!/usr/bin/env bash
# The API reference, generated from the docstrings with pdoc into docs/api/ (not
# committed: open docs/api/index.html). The public API is what mooncake_redis exports
# (Index, the records, the errors, the settings) plus the metrics exporter.
# Extra arguments go to pdoc (e.g. --docformat markdown).
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
ensure_venv docs,metrics
cd "$ROOT"
exec "$VENV/bin/python" -m pdoc --output-directory "$ROOT/docs/api" "$@" mooncake_redis \
  mooncake_redis.operations.metrics
