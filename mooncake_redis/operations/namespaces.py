"""Which namespaces a Redis holds, and how full each is (the `namespaces` command): a SCAN
on every primary for the keys that mark a namespace, then each one's shard counters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.exceptions import NoPermissionError

from mooncake_redis.capacity.admission import usage
from mooncake_redis.context import Context
from mooncake_redis.keys import NAMESPACE_MARKER_PATTERNS, namespace_of_marker
from mooncake_redis.models import Usage
from mooncake_redis.tree.matching import SCAN_COUNT, primaries


@dataclass(frozen=True)
class NamespaceUsage:
    namespace: str
    usage: Usage


def find_namespaces(client: Any) -> list[str]:
    """The names of the namespaces with stored settings or any shard stats (written by a
    namespace's first write), both hashes, sorted. Reads only: SCAN MATCH TYPE hash on
    every primary."""
    found: set[str] = set()
    for node in primaries(client):
        for pattern in NAMESPACE_MARKER_PATTERNS:
            for key in node.scan_iter(match=pattern, count=SCAN_COUNT, _type="hash"):
                name = namespace_of_marker(key)
                if name is not None:
                    found.add(name)
    return sorted(found)


def namespace_exists(ctx: Context) -> bool:
    """Whether the namespace holds anything: stored settings (besides the shard count,
    which any writable client records when it opens a new namespace, a mistyped one too),
    a segment registry, or any shard's stats (written by its first write). One round trip
    (per node on a cluster)."""
    batch = ctx.batch()
    batch.command("HKEYS", ctx.schema.settings)
    for key in [ctx.schema.segments,
                *(ctx.schema.shard_keys(shard).stats for shard in ctx.all_shards())]:
        batch.command("EXISTS", key)
    settings, *others = batch.execute()
    if isinstance(settings, Exception):
        raise settings
    return bool(set(settings) - {"shard_count"}) or any(
        reply is True or (isinstance(reply, int) and reply > 0) for reply in others)


def namespace_usages(client: Any) -> tuple[list[NamespaceUsage], list[str]]:
    """Every namespace found, with its usage (one round trip per namespace, per node on a
    cluster; opened read-only, so nothing is written), and the names of those the client's
    ACL user may not read (a user of one namespace sees the others' keys in SCAN)."""
    found, refused = [], []
    for name in find_namespaces(client):
        try:
            found.append(NamespaceUsage(name, usage(Context.open(client, name,
                                                                 read_only=True))))
        except NoPermissionError:
            refused.append(name)
    return found, refused
