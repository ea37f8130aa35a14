"""Changing namespace settings: the one writer of `<ns>:settings` (set_config and
`mooncake-redis config set`), with the rules that keep a live namespace consistent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .admission import rebalance, usage
from .context import Context
from .errors import ConfigurationError
from .settings import Settings, coerce


def change_settings(ctx: Context, changes: Mapping[str, Any]) -> Settings:
    """Validate and store; refuse changes that would strand stored data."""
    values = {name: coerce(name, value) for name, value in changes.items()}
    current = ctx.reload_settings()
    stranding = [name for name in ("prefix_extractor", "enable_radix_tree")
                 if name in values and values[name] != getattr(current, name)
                 and not (name == "enable_radix_tree" and values[name])]
    if stranding and usage(ctx).nodes:
        raise ConfigurationError(
            f"refusing to change {', '.join(stranding)} on namespace "
            f"{ctx.schema.namespace!r}, which holds nodes: existing objects would be "
            "unreachable or their links wrong. Empty it first (remove_all), or use a new "
            "namespace")
    settings = ctx.store_settings(values)
    if "capacity_bytes" in values:
        rebalance(ctx)
    return settings
