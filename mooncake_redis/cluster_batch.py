"""Runs a Batch on Redis Cluster: per-node pipelines between barriers, bounded retries
that never re-send a call that may have run unless re-running it is harmless, and an
optional WAIT for replicas.

redis-py's cluster pipeline refuses EVALSHA, so each node gets a plain pipeline of the
calls whose slots it owns (every call's keys share one hash tag, so one slot), and the
replies are put back in queue order.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import redis
from redis.cluster import ClusterNode, RedisCluster

from .batch import BatchPolicy, LuaScript, Queued, check_replicas, load_scripts
from .errors import ClusterUnavailable, OutcomeUnknown, ReplicationIncomplete

MAX_BACKOFF_MS = 2000
"""The pause between retries doubles from cluster_retry_backoff_ms up to this."""

NOT_SENT = object()
"""Reply placeholder: no connection to the node could be made, so nothing was sent."""

LOST = object()
"""Reply placeholder: the call was sent but its reply never came; it may have run."""

REROUTE_ERRORS = (redis.exceptions.MovedError, redis.exceptions.AskError)
"""The slot is served elsewhere (or is moving): refresh the slot map and re-send."""

NOT_RUN_ERRORS = (*REROUTE_ERRORS, redis.exceptions.TryAgainError,
                  redis.exceptions.ClusterDownError, redis.exceptions.ReadOnlyError,
                  redis.exceptions.BusyLoadingError)
"""Replies saying the command did not run: re-sending it is always safe."""


class ClusterExecutor:
    def __init__(self, client: RedisCluster, scripts: Sequence[LuaScript], policy: BatchPolicy):
        self._client = client
        self._scripts = scripts
        self._policy = policy

    def run(self, queued: Sequence[Queued]) -> list[Any]:
        """Replies in queue order, one barrier segment after the other; a segment that
        cannot be completed raises, so nothing queued after its barrier is sent."""
        results: list[Any] = [None] * len(queued)
        segments: dict[int, list[int]] = defaultdict(list)
        for position, item in enumerate(queued):
            segments[item.segment].append(position)
        for segment in sorted(segments):
            self._run_segment(queued, segments[segment], results)
        return results

    def _run_segment(self, queued: Sequence[Queued], positions: list[int],
                     results: list[Any]) -> None:
        pending, unknown = positions, []
        shortfalls: list[ReplicationIncomplete] = []
        retries = reloads = 0
        while pending:
            resend, refresh, pause = [], False, False
            for node, group in self._by_node(queued, pending).items():
                replies = self._send_group(node, [queued[i] for i in group], shortfalls)
                for position, reply in zip(group, replies):
                    if reply is LOST and not queued[position].retry_safe:
                        unknown.append(position)
                    elif reply is NOT_SENT or reply is LOST or isinstance(reply, NOT_RUN_ERRORS):
                        resend.append(position)
                        refresh = True
                        pause = pause or not isinstance(reply, REROUTE_ERRORS)
                    elif isinstance(reply, redis.exceptions.NoScriptError):
                        resend.append(position)  # the scripts were just loaded on the node
                    else:
                        results[position] = reply
            pending = resend
            if pending and refresh:
                retries += 1
                if retries > self._policy.cluster_retries:
                    break
                self._refresh_slot_map(retries if pause else 0)
            elif pending:
                reloads += 1
                if reloads > 1:  # NOSCRIPT again right after loading: give up, do not spin
                    break
        if unknown:
            calls = ", ".join(describe(queued[i]) for i in unknown[:3])
            raise OutcomeUnknown(f"connection lost after sending {len(unknown)} call(s) that "
                                 f"are not safe to re-send ({calls}); they may have run")
        if pending:
            raise ClusterUnavailable(f"{len(pending)} call(s) not served after "
                                     f"cluster_retries={self._policy.cluster_retries} "
                                     f"(first: {describe(queued[pending[0]])})")
        if shortfalls:
            raise shortfalls[0]

    def _by_node(self, queued: Sequence[Queued],
                 positions: list[int]) -> dict[ClusterNode | None, list[int]]:
        """Positions grouped by the primary serving their slot (None: no node does now)."""
        groups: dict[ClusterNode | None, list[int]] = defaultdict(list)
        manager = self._client.nodes_manager
        for position in positions:
            key = queued[position].routing_key
            slot = 0 if key is None else self._client.keyslot(key)
            try:
                node = manager.get_node_from_slot(slot)
            except redis.exceptions.SlotNotCoveredError:
                node = None
            groups[node].append(position)
        return groups

    def _send_group(self, node: ClusterNode | None, items: list[Queued],
                    shortfalls: list[ReplicationIncomplete]) -> list[Any]:
        """One pipeline to one node (with WAIT at its end when asked and it writes);
        reloads the scripts there after a NOSCRIPT reply."""
        if node is None:
            return [NOT_SENT] * len(items)
        commands = [item.args for item in items]
        wait = self._policy.wait_replicas > 0 and any(item.writes for item in items)
        if wait:
            commands.append(("WAIT", self._policy.wait_replicas, self._policy.wait_timeout_ms))
        replies = send_pipeline(node.redis_connection, commands)
        if wait:
            acknowledged = replies.pop()
            if acknowledged is not NOT_SENT:
                try:
                    check_replicas(acknowledged, self._policy, f"node {node.name}")
                except ReplicationIncomplete as error:
                    shortfalls.append(error)
        if any(isinstance(r, redis.exceptions.NoScriptError) for r in replies):
            load_scripts(node.redis_connection, self._scripts)
        return replies

    def _refresh_slot_map(self, retry: int) -> None:
        """Pause (doubling per retry; none when a redirect said where to go), then ask the
        cluster which node serves which slot now."""
        if retry:
            backoff_ms = self._policy.cluster_retry_backoff_ms * 2 ** (retry - 1)
            time.sleep(min(backoff_ms, MAX_BACKOFF_MS) / 1000)
        # If no node answers yet, the next round retries with the old map.
        with contextlib.suppress(redis.exceptions.RedisError,
                                 redis.exceptions.RedisClusterException):
            self._client.nodes_manager.initialize()


def send_pipeline(node_client: redis.Redis, commands: list[tuple[Any, ...]]) -> list[Any]:
    """Replies in order (error replies as exceptions). Unlike redis-py's pipeline it tells
    apart a connection that could not be made (NOT_SENT: nothing ran) from one lost
    after sending (LOST for each reply that never came: those calls may have run)."""
    pool = node_client.connection_pool
    try:
        connection = pool.get_connection()
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
        return [NOT_SENT] * len(commands)
    replies: list[Any] = []
    try:
        connection.send_packed_command(connection.pack_commands(commands))
        for command in commands:
            try:
                replies.append(node_client.parse_response(connection, command[0]))
            except (redis.exceptions.ResponseError, redis.exceptions.BusyLoadingError) as error:
                replies.append(error)
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
        connection.disconnect()
        replies += [LOST] * (len(commands) - len(replies))
    finally:
        pool.release(connection)
    return replies


def describe(item: Queued) -> str:
    """A short name for a queued call in error messages: the script or command, and its key."""
    return f"{item.name} {item.routing_key or ''}".strip()
