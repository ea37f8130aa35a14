"""Changing stored namespace settings: Index.set_config and reset_config (which
`mooncake-redis config set` / `config reset` call) come here, with the rules that keep a
live namespace consistent. The one place a stored setting is changed or dropped
(Context.store_settings does the HSET, for change_settings only); Context.open only
fills in settings not stored yet."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from mooncake_redis.capacity.admission import rebalance
from mooncake_redis.context import (
    STRUCTURAL_SETTINGS,
    Context,
    holds_nodes,
    refuse_stranding,
)
from mooncake_redis.errors import ConfigurationError
from mooncake_redis.settings import (
    OPTION_NAMES,
    SETTING_NAMES,
    Settings,
    check_settings,
    coerce,
)
from mooncake_redis.tree.rescoring import rescore_leaves


def change_settings(ctx: Context, changes: Mapping[str, Any]) -> Settings:
    """Validate and store; refuse changes that would strand stored data."""
    options = [name for name in changes if name in OPTION_NAMES]
    if options:
        raise ConfigurationError(
            f"{', '.join(options)}: a client option of this process, not a namespace setting; "
            "pass it to Index(...) or Index.from_url(...) instead")
    values = {name: coerce(name, value) for name, value in changes.items()}
    _refuse(ctx, values, ctx.reload_settings())
    settings = ctx.store_settings(values)
    _after(ctx, values)
    return settings


def reset_settings(ctx: Context, names: Iterable[str]) -> Settings:
    """Drop stored settings, so every client reads their defaults (a stored value that
    cannot be read is mended this way too); the rules of change_settings apply."""
    defaults = Settings()
    values = {name: getattr(defaults, coerce_name(name)) for name in names}
    if "shard_count" in values:
        raise ConfigurationError(FIXED_SHARD_COUNT)
    current = ctx.reload_settings()
    unknown = [name for name in values
               if name in STRUCTURAL_SETTINGS and name in ctx.unreadable_settings]
    if unknown and holds_nodes(ctx.client, ctx.schema):
        raise ConfigurationError(
            f"refusing to reset {', '.join(unknown)} on namespace {ctx.schema.namespace!r}, "
            "which holds nodes: the stored value cannot be read, so the default may not be "
            "the rule its nodes were written with; `config set` the namespace's real value")
    _refuse(ctx, values, current)
    check_settings(replace(current, **values))
    if values:
        ctx.client.hdel(ctx.schema.settings, *values)
    settings = ctx.reload_settings()
    _after(ctx, values)
    return settings


def coerce_name(name: Any) -> str:
    if name in OPTION_NAMES:
        raise ConfigurationError(f"{name}: a client option of this process, not a namespace "
                                 "setting")
    if name not in SETTING_NAMES:
        raise ConfigurationError(f"unknown setting {name!r}; settings: "
                                 f"{', '.join(SETTING_NAMES)}")
    return str(name)


FIXED_SHARD_COUNT = (
    "shard_count is fixed when a namespace is created (every key's place depends on it): "
    "give Index(..., shard_count=N) to a namespace that does not exist yet")


def _refuse(ctx: Context, values: Mapping[str, Any], current: Settings) -> None:
    """Refuse what would strand data, given the settings and segments just re-read."""
    if "shard_count" in values and values["shard_count"] != current.shard_count:
        raise ConfigurationError(FIXED_SHARD_COUNT)
    if "capacity_bytes" in values and ctx.segments:
        raise ConfigurationError(
            "capacity_bytes: the namespace's capacity is the sum of its mounted segments "
            f"({', '.join(sorted(ctx.segments))}); mount, remount or unmount segments instead")
    mending = set(ctx.unreadable_settings)  # a value nobody could read decides nothing yet:
    # writing the one the namespace really has must not be refused as a change
    refuse_stranding(ctx.client, ctx.schema, current,
                     {name: value for name, value in values.items() if name not in mending})


def _after(ctx: Context, values: Mapping[str, Any]) -> None:
    if "capacity_bytes" in values:
        rebalance(ctx)
    if "put_start_release_timeout_ms" in values:
        rescore_leaves(ctx)
