"""Finds what silently loses or hides index state: a Redis that persists nothing or evicts
keys on its own, and data model v1 keys that v2 does not read. Reads only."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis

from mooncake_redis.context import Context
from mooncake_redis.text import human_bytes, plural
from mooncake_redis.tree.matching import primaries
from mooncake_redis.urls import RedisCli

SCAN_COUNT = 1000
SCAN_CALLS = 100
"""SCAN calls per primary when looking for v1 keys: at most ~100k keys examined."""
EXAMPLES = 3
UNKNOWN = "?"

V1_SHARD_KEYS = ("objects", "nodes")
"""Per-shard keys only v1 wrote (v1 also wrote leaves, soft_leaves and stats, which v2
uses under the same names)."""
V1_NAMESPACE_KEYS = ("config", "usage")
V1_ITEM_KINDS = ("obj", "node", "children", "keys")


@dataclass
class Diagnosis:
    facts: list[str] = field(default_factory=list)
    """What was read, one line each."""
    warnings: list[str] = field(default_factory=list)


def diagnose(client: Any, label: str = "Redis") -> list[str]:
    """Warnings about the Redis server(s) behind a client (empty when all is well)."""
    diagnosis = Diagnosis()
    check_servers(client, label, diagnosis)
    return diagnosis.warnings


def examine(ctx: Context, url: str, label: str) -> Diagnosis:
    """Everything doctor checks: the servers, then the namespace's keys."""
    diagnosis = Diagnosis()
    if url.startswith("memory:"):
        diagnosis.warnings.append(
            "memory:// is this process's own in-process store: it persists nothing and no "
            "other process (worker, monitor, redis-cli) sees it. Point --url or "
            "MOONCAKE_REDIS_URL at a Redis server")
        return diagnosis
    check_servers(ctx.client, label, diagnosis)
    check_v1_keys(ctx, RedisCli.for_url(url), diagnosis)
    return diagnosis


def check_servers(client: Any, label: str, diagnosis: Diagnosis) -> None:
    """A Redis that persists nothing loses the whole index on restart; one that evicts keys
    by itself (any maxmemory-policy but noeviction) drops nodes behind our back and breaks
    the tree."""
    nodes = primaries(client)
    for node in nodes:
        name = label if len(nodes) == 1 else _address(node)
        settings = _read_config(node)
        if settings is None:
            diagnosis.warnings.append(
                f"{name}: cannot read its configuration (CONFIG and INFO refused); check by "
                "hand that it persists (appendonly yes or RDB save points) and uses "
                "maxmemory-policy noeviction")
            continue
        appendonly, save = settings.get("appendonly"), (settings.get("save") or "").strip()
        maxmemory = int(settings.get("maxmemory") or 0)
        policy = settings.get("maxmemory-policy") or "noeviction"
        diagnosis.facts.append(
            f"{name}: appendonly {appendonly or '?'}, save points {save or 'none'}, maxmemory "
            f"{human_bytes(maxmemory) if maxmemory else '0 (no limit)'}, maxmemory-policy "
            f"{policy}")
        if appendonly == "no" and not save:
            diagnosis.warnings.append(
                f"{name} persists nothing (appendonly no, no RDB save points): a restart loses "
                "the whole index. Set appendonly yes (see deploy/redis.conf)")
        elif appendonly == "no" and save == UNKNOWN:
            diagnosis.warnings.append(
                f"{name}: appendonly is off and CONFIG is refused, so its RDB save points "
                "cannot be read: check by hand that it persists (appendonly yes)")
        if policy != "noeviction":
            diagnosis.warnings.append(
                f"{name}: maxmemory-policy is {policy}: Redis may evict index keys on its own "
                "and leave the tree inconsistent. Set maxmemory-policy noeviction")
        check_version_and_encoding(node, name, settings, diagnosis)


def check_version_and_encoding(node: Any, name: str, settings: dict[str, str],
                               diagnosis: Diagnosis) -> None:
    """Redis 7.0 or newer (scripts carry 7.0 flags; ZADD GT), and node hashes kept as
    listpacks (a node field is up to 64 bytes: hash-max-listpack-value below 64 makes
    every node a hashtable, about twice the memory)."""
    try:
        version = str(node.info("server").get("redis_version", ""))
    except redis.exceptions.ResponseError:
        version = ""
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
    listpack_value = settings.get("hash-max-listpack-value", "")
    diagnosis.facts.append(f"{name}: Redis {version or '?'}, hash-max-listpack-value "
                           f"{listpack_value or '?'}")
    if version and major < 7:
        diagnosis.warnings.append(
            f"{name} runs Redis {version}: mooncake-redis needs 7.0 or newer (its scripts "
            "declare Redis 7 flags so that they run whole or not at all at maxmemory)")
    if listpack_value.isdigit() and int(listpack_value) < 64:
        diagnosis.warnings.append(
            f"{name}: hash-max-listpack-value is {listpack_value}: node fields are up to 64 "
            "bytes, so every node becomes a hashtable (about twice the memory). Set 64")


def _read_config(node: Any) -> dict[str, str] | None:
    try:
        values = node.config_get("*")
        return {name: values.get(name, "") for name in
                ("appendonly", "save", "maxmemory", "maxmemory-policy",
                 "hash-max-listpack-value")}
    except redis.exceptions.ResponseError:  # CONFIG refused (managed Redis, ACL): try INFO
        pass
    try:
        info = {**node.info("persistence"), **node.info("memory")}
    except redis.exceptions.ResponseError:
        return None
    return {"appendonly": "yes" if info.get("aof_enabled") else "no",
            "save": UNKNOWN,  # INFO does not show save points
            "maxmemory": str(info.get("maxmemory", 0)),
            "maxmemory-policy": str(info.get("maxmemory_policy", ""))}


def _address(node: Any) -> str:
    kwargs = node.connection_pool.connection_kwargs
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


def check_v1_keys(ctx: Context, cli: RedisCli | None, diagnosis: Diagnosis) -> None:
    """Data model v1 keys in the namespace: exact checks of v1's namespace and per-shard
    keys, then a bounded SCAN MATCH for its per-node and per-object keys."""
    namespace = ctx.schema.namespace
    candidates = [f"{namespace}:{name}" for name in V1_NAMESPACE_KEYS] + [
        f"{ctx.schema.tag(shard)}:{name}" for shard in ctx.all_shards()
        for name in V1_SHARD_KEYS]
    batch = ctx.batch()
    for key in candidates:
        batch.command("EXISTS", key)
    found = [key for key, exists in zip(candidates, batch.execute()) if exists]
    kinds: Counter[str] = Counter()
    per_item = re.compile(re.escape(namespace) + r":\{[0-9a-f]{2}\}:(" +
                          "|".join(V1_ITEM_KINDS) + r"|n):")
    complete = True
    for node in primaries(ctx.client):
        cursor, calls = 0, 0
        while True:
            cursor, keys = node.scan(cursor, match=f"{namespace}:{{??}}:*", count=SCAN_COUNT)
            calls += 1
            for key in keys:
                match = per_item.match(key)
                if match:
                    kinds[match.group(1)] += 1
                    if match.group(1) != "n" and len(found) < 2 * EXAMPLES:
                        found.append(key)
            if cursor == 0:
                break
            if calls >= SCAN_CALLS:
                complete = False
                break
    v1_items = sum(count for kind, count in kinds.items() if kind != "n")
    if not found and not v1_items:
        diagnosis.facts.append(f"namespace {namespace!r}: no data model v1 keys"
                               + ("" if complete else " (in the part scanned)"))
        return
    counted = ", ".join(f"{kind} keys: {count}" for kind, count in sorted(kinds.items())
                        if kind != "n")
    mixed = f"; it also holds {plural(kinds['n'], 'v2 node')}, which go with it" \
        if kinds["n"] else ""
    pattern = ctx.schema.pattern()
    scan = cli.command("--scan", "--pattern", pattern) if cli else \
        f"redis-cli --scan --pattern '{pattern}'"
    delete = cli.command("del") if cli else "redis-cli del"
    diagnosis.warnings.append(
        f"namespace {namespace!r} holds data model v1 keys (e.g. {', '.join(found[:EXAMPLES])}"
        f"{'; seen ' + counted if counted else ''}{'' if complete else ', scan bounded'}"
        "); v2 does not read them: no migration exists (nothing was deployed). v1 also wrote "
        "leaves, soft_leaves and stats under names v2 uses, so delete the whole namespace"
        f"{mixed}: {scan} | xargs -n 100 {delete} (on a cluster, on every master), or use "
        f"another namespace{' ' + cli.password_note if cli and cli.needs_password else ''}")
