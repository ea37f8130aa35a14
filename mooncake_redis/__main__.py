"""`python -m mooncake_redis`: the mooncake-redis command."""

from __future__ import annotations

import sys

from .cli.main import main

sys.exit(main())
