"""`python -m mooncake_redis.cli`: the mooncake-redis command."""

from __future__ import annotations

import sys

from .main import main

sys.exit(main())
