#!/usr/bin/env bash
# The quick subset (scripts/test_pythons.sh) on the oldest supported Python with each core
# dependency at the lowest version pyproject.toml declares (redis, fakeredis, rq, blake3,
# google-re2, tqdm): an engine's environment often holds older packages than a fresh
# install, and a floor that was never run is a guess. CI runs it (.ci/run); its venv is
# .venv-python3.10-floors. Usage: scripts/test_floors.sh [VERSION] (default: 3.10)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PINS="$(python3 - "$ROOT/pyproject.toml" <<'EOF'
import re
import sys

text = open(sys.argv[1]).read()
names = ("redis", "fakeredis", "rq", "blake3", "google-re2", "tqdm")
pins = {}
for name, extras, floor in re.findall(
        r'"(' + "|".join(names) + r')(\[[^\]]*\])?>=([0-9.]+)"', text):
    pins[name] = f"{name}{extras}=={floor}"
missing = sorted(set(names) - set(pins))
if missing:
    sys.exit(f"no floor found in pyproject.toml for {missing}")
print(" ".join(pins[name] for name in sorted(pins)))
EOF
)"
export PINS VENV_SUFFIX=-floors
exec bash "$ROOT/scripts/test_pythons.sh" "${1:-3.10}"
