"""Changing namespace settings: the one writer of `<ns>:settings` (set_config and
`mooncake-redis config set`), with the rules that keep a live namespace consistent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .admission import rebalance
from .context import Context, refuse_stranding
from .errors import ConfigurationError
from .rescoring import rescore_leaves
from .settings import OPTION_NAMES, Settings, coerce


def change_settings(ctx: Context, changes: Mapping[str, Any]) -> Settings:
    """Validate and store; refuse changes that would strand stored data."""
    options = [name for name in changes if name in OPTION_NAMES]
    if options:
        raise ConfigurationError(
            f"{', '.join(options)}: a client option of this process, not a namespace setting; "
            "pass it to Index(...) or Index.from_url(...) instead")
    values = {name: coerce(name, value) for name, value in changes.items()}
    if "capacity_bytes" in values and ctx.reload_settings() and ctx.segments:
        raise ConfigurationError(
            "capacity_bytes: the namespace's capacity is the sum of its mounted segments "
            f"({', '.join(sorted(ctx.segments))}); mount, remount or unmount segments instead")
    refuse_stranding(ctx.client, ctx.schema, ctx.reload_settings(), values)
    settings = ctx.store_settings(values)
    if "capacity_bytes" in values:
        rebalance(ctx)
    if "put_start_release_timeout_ms" in values:
        rescore_leaves(ctx)
    return settings
