"""Warns about Redis settings that silently lose index state."""

from __future__ import annotations

import redis


def diagnose(client: redis.Redis) -> list[str]:
    """Warnings (empty when all is well): a Redis that persists nothing loses the whole
    index on restart; one that evicts keys by itself (any maxmemory-policy other than
    noeviction) drops nodes and objects behind our back and corrupts the tree."""
    try:
        settings = client.config_get("*")
    except redis.exceptions.ResponseError as error:  # CONFIG refused (managed Redis, ACL)
        return [f"cannot read the Redis configuration ({error}); check by hand that it "
                "persists (appendonly yes or RDB saves) and uses maxmemory-policy noeviction"]
    warnings = []
    if settings.get("appendonly") != "yes" and not (settings.get("save") or "").strip():
        warnings.append("Redis persists nothing (appendonly no, no RDB save points): a restart "
                        "loses the whole index. Set appendonly yes (see deploy/redis.conf)")
    policy = settings.get("maxmemory-policy", "noeviction")
    if policy != "noeviction":
        warnings.append(f"maxmemory-policy is {policy}: Redis may evict index keys on its own "
                        "and leave the tree inconsistent. Set maxmemory-policy noeviction")
    return warnings
