"""Sends queued script calls and commands to Redis (one pipeline, or per-node pipelines on
Redis Cluster) in order between barriers, and maps errors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster

from .errors import (
    MooncakeRedisError,
    PermissionDenied,
    ReplicationIncomplete,
    ScriptError,
    from_script_error,
)


@dataclass(frozen=True)
class LuaScript:
    """One script of lua/, with the helpers prepended, and its SHA1 for EVALSHA."""

    name: str
    source: str
    sha: str


@dataclass(frozen=True)
class BatchPolicy:
    """How a batch copes with Redis Cluster and replication (see config.py for each)."""

    cluster_retries: int = 6
    cluster_retry_backoff_ms: int = 100
    wait_replicas: int = 0
    wait_timeout_ms: int = 1000


READ_ONLY_COMMANDS = frozenset({
    "EXISTS", "GET", "HGET", "HGETALL", "HMGET", "SCARD", "SMEMBERS", "TIME", "TYPE",
    "ZCARD", "ZRANGE", "ZRANGEBYSCORE", "ZSCORE",
})
"""Commands that change nothing: safe to re-send, and no reason to WAIT."""

KEYLESS_COMMANDS = frozenset({"TIME"})
"""Commands without a key; every other command's key is its first argument."""


def tag_of(key: str) -> str:
    """The Redis Cluster hash tag of a key (the part a slot is computed from)."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1:end]
    return key


class CrossSlotCall(ScriptError):
    """A wrapper passed keys of two shard tags to one script: a bug that Redis Cluster
    would refuse with CROSSSLOT, caught here on a single Redis too."""


@dataclass(frozen=True)
class Queued:
    """One queued call: its script or command name, the command as sent, the key that
    routes it (None = any node), whether re-sending it after it may have run is harmless,
    whether it may write (then WAIT covers it), and its barrier segment."""

    name: str
    args: tuple[Any, ...]
    routing_key: str | None
    retry_safe: bool
    writes: bool
    segment: int


class Batch:
    """A plain (non-transactional) pipeline of script calls and commands.

    Ordering contract: every call queued before a `barrier()` completes before any call
    queued after it is sent. On a single Redis one connection runs everything in queue
    order anyway, so a barrier costs nothing (still one pipeline); on Redis Cluster calls
    go out in per-node pipelines, and calls between two barriers may run in any order
    across nodes (in queue order within a node).

    Scripts are called by EVALSHA; a NOSCRIPT reply (after SCRIPT FLUSH or a restart)
    reloads every script (on that node) and re-sends only the calls that failed.
    """

    def __init__(self, client: redis.Redis, scripts: Sequence[LuaScript],
                 policy: BatchPolicy | None = None):
        self._client = client
        self._scripts = scripts
        self._policy = policy or BatchPolicy()
        self._queued: list[Queued] = []
        self._segment = 0

    def __len__(self) -> int:
        return len(self._queued)

    def call(self, script: LuaScript, keys: Sequence[str], args: Sequence[Any],
             retry_safe: bool = False, read_only: bool = False) -> int:
        """Queue a script call; retry_safe says that running it twice leaves the same state
        and an answer the caller accepts (scripts.py decides it per script); read_only
        (a dry run) implies it."""
        tags = {tag_of(k) for k in keys}
        if len(tags) > 1:
            raise CrossSlotCall(f"script {script.name} got keys of shard tags {sorted(tags)}")
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        return self._queue(script.name, command, keys[0] if keys else None,
                           retry_safe or read_only, not read_only)

    def command(self, *args: Any) -> int:
        name = str(args[0]).upper()
        routing_key = None if name in KEYLESS_COMMANDS else str(args[1])
        read_only = name in READ_ONLY_COMMANDS
        return self._queue(name, (name, *args[1:]), routing_key, read_only, not read_only)

    def barrier(self) -> None:
        """Calls queued after this are sent only once every call before it has completed."""
        if self._queued and self._queued[-1].segment == self._segment:
            self._segment += 1

    def _queue(self, name: str, args: tuple[Any, ...], routing_key: str | None,
               retry_safe: bool, writes: bool) -> int:
        self._queued.append(Queued(name, args, routing_key, retry_safe, writes, self._segment))
        return len(self._queued) - 1

    def execute(self) -> list[Any]:
        """Results in queue order; a refused call's slot holds its exception (never raised
        here, so callers decide which refusals matter). Raised here: OutcomeUnknown,
        ClusterUnavailable (cluster only) and ReplicationIncomplete (wait_replicas > 0),
        since after them the caller cannot know what was written."""
        queued, self._queued, self._segment = self._queued, [], 0
        if not queued:
            return []
        if isinstance(self._client, RedisCluster):
            from .cluster_batch import ClusterExecutor

            results = ClusterExecutor(self._client, self._scripts, self._policy).run(queued)
        else:
            results = self._execute_on_one_server(queued)
        return [_map_error(r) for r in results]

    def _execute_on_one_server(self, queued: list[Queued]) -> list[Any]:
        wait = self._policy.wait_replicas > 0 and any(item.writes for item in queued)
        results = self._send(queued, wait)
        missing = [i for i, r in enumerate(results)
                   if isinstance(r, redis.exceptions.NoScriptError)]
        if missing:
            load_scripts(self._client, self._scripts)
            for i, result in zip(missing, self._send([queued[i] for i in missing], wait)):
                results[i] = result
        return results

    def _send(self, queued: list[Queued], wait: bool) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        for item in queued:
            pipe.execute_command(*item.args)
        if wait:
            pipe.execute_command("WAIT", self._policy.wait_replicas, self._policy.wait_timeout_ms)
        results = list(pipe.execute(raise_on_error=False))
        if wait:
            check_replicas(results.pop(), self._policy, "redis")
        return results


def check_replicas(acknowledged: Any, policy: BatchPolicy, where: str) -> None:
    """Raise ReplicationIncomplete unless a WAIT reply counts enough replicas."""
    if isinstance(acknowledged, int) and acknowledged >= policy.wait_replicas:
        return
    raise ReplicationIncomplete(
        f"{where}: writes acknowledged by {acknowledged!r} replicas, wait_replicas="
        f"{policy.wait_replicas} within {policy.wait_timeout_ms} ms; they are applied on the "
        "primary but a failover now could lose them")


def load_scripts(client: redis.Redis, scripts: Sequence[LuaScript]) -> None:
    pipe = client.pipeline(transaction=False)
    for script in scripts:
        pipe.script_load(script.source)
    for script, sha in zip(scripts, pipe.execute()):
        if sha != script.sha:
            raise ScriptError(f"Redis computed SHA {sha} for {script.name}, expected {script.sha}")


def _map_error(result: Any) -> Any:
    if isinstance(result, redis.exceptions.NoPermissionError):
        return PermissionDenied(f"NOPERM {result}")
    if isinstance(result, redis.exceptions.ResponseError):
        return from_script_error(str(result))
    return result


def raise_first_error(results: Sequence[Any]) -> None:
    for result in results:
        if isinstance(result, MooncakeRedisError):
            raise result


def score_pairs(reply: Sequence[Any]) -> list[tuple[str, float]]:
    """(member, score) pairs of a WITHSCORES reply, whether the client already paired
    them (redis-py does for some commands) or left them flat (RESP2 as sent)."""
    if reply and isinstance(reply[0], (list, tuple)):
        return [(member, float(score)) for member, score in reply]
    return [(member, float(score)) for member, score in zip(reply[0::2], reply[1::2])]
