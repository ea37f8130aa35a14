"""Sends queued script calls and commands to Redis in one round trip and maps errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import redis

from .errors import MooncakeRedisError, ScriptError, from_script_error


@dataclass(frozen=True)
class LuaScript:
    """One script of lua/, with the helpers prepended, and its SHA1 for EVALSHA."""

    name: str
    source: str
    sha: str


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


@dataclass
class _Queued:
    script: LuaScript | None
    args: tuple[Any, ...]


class Batch:
    """A plain (non-transactional) pipeline of script calls and commands.

    Redis runs one connection's commands in order, so calls queued here run in the
    order they were queued; that order is what the cross-shard protocols rely on.
    Scripts are called by EVALSHA; a NOSCRIPT reply (after SCRIPT FLUSH or a restart)
    reloads every script and re-sends only the calls that failed, in their order.
    """

    def __init__(self, client: redis.Redis, scripts: Sequence[LuaScript]):
        self._client = client
        self._scripts = scripts
        self._queued: list[_Queued] = []

    def __len__(self) -> int:
        return len(self._queued)

    def call(self, script: LuaScript, keys: Sequence[str], args: Sequence[Any]) -> int:
        tags = {tag_of(k) for k in keys}
        if len(tags) > 1:
            raise CrossSlotCall(f"script {script.name} got keys of shard tags {sorted(tags)}")
        self._queued.append(_Queued(script, (script.sha, len(keys), *keys, *args)))
        return len(self._queued) - 1

    def command(self, *args: Any) -> int:
        self._queued.append(_Queued(None, args))
        return len(self._queued) - 1

    def execute(self) -> list[Any]:
        """Results in queue order; a failed call's slot holds its exception (never raised
        here, so callers decide which refusals matter)."""
        queued, self._queued = self._queued, []
        if not queued:
            return []
        results = self._send(queued)
        missing = [i for i, r in enumerate(results) if isinstance(r, redis.exceptions.NoScriptError)]
        if missing:
            load_scripts(self._client, self._scripts)
            for i, result in zip(missing, self._send([queued[i] for i in missing])):
                results[i] = result
        return [_map_error(r) for r in results]

    def _send(self, queued: list[_Queued]) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        for item in queued:
            if item.script is None:
                pipe.execute_command(*item.args)
            else:
                pipe.execute_command("EVALSHA", *item.args)
        return list(pipe.execute(raise_on_error=False))


def load_scripts(client: redis.Redis, scripts: Sequence[LuaScript]) -> None:
    pipe = client.pipeline(transaction=False)
    for script in scripts:
        pipe.script_load(script.source)
    for script, sha in zip(scripts, pipe.execute()):
        if sha != script.sha:
            raise ScriptError(f"Redis computed SHA {sha} for {script.name}, expected {script.sha}")


def _map_error(result: Any) -> Any:
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
