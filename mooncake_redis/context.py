"""What every part of the system shares: the client, the key schema, the scripts and the
executor, the namespace's settings, the extractor, this client's writer token and its
source of link epochs. The parts (objects, registration, deletion, eviction, fsck) take a
Context; none of them needs the public Index.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import redis
from redis.cluster import RedisCluster

from .connection import is_in_process
from .errors import ConfigurationError, InvalidArgument, StoreFull
from .executor import KEYLESS_COMMANDS, Batch, Executor, Policy, raise_first_error
from .keys import KeySchema
from .prefix import NEW_SHARD_COUNT, extractor_named, split_key
from .scripts import NodeCall, NodeCalls, Scripts
from .segment_registry import Segment, parse_registry, segment_capacity
from .settings import (
    ClientOptions,
    Settings,
    encode,
    from_environment,
    options_from,
    read_stored,
    settings_from,
    split_arguments,
)
from .shard_layout import find_layout
from .validation import check_text, plain_texts
from .values import to_int

log = logging.getLogger("mooncake_redis")

SINGLE_NODE = "redis"
"""The node name of a single Redis: every shard is served there."""

CLOCK_RESYNC_SECONDS = 60.0
"""How often a client re-reads Redis TIME for its link epochs."""

_SCRIPTS: dict[bool, Scripts] = {}


Target = tuple[str, str, str]
"""An object key split (Context.split_all): (key, prefix hash, suffix)."""


def node_runs(targets: Sequence[Target]) -> list[tuple[str, list[int], list[str]]]:
    """(prefix hash, positions, suffixes) of each run of consecutive targets of one node."""
    runs: list[tuple[str, list[int], list[str]]] = []
    current = None
    for position, (_, prefix_hash, suffix) in enumerate(targets):
        if prefix_hash != current:
            current = prefix_hash
            positions: list[int] = []
            suffixes: list[str] = []
            runs.append((prefix_hash, positions, suffixes))
        positions.append(position)
        suffixes.append(suffix)
    return runs


def shared_scripts(shebang: bool = True) -> Scripts:
    """The scripts, read and hashed once per process (without their Redis 7 shebangs for
    fakeredis, which has none)."""
    if shebang not in _SCRIPTS:
        _SCRIPTS[shebang] = Scripts(shebang)
    return _SCRIPTS[shebang]


def warn_if_redis_evicts(client: Any) -> None:
    """Log once per open if Redis may evict keys by itself (it would drop nodes behind the
    tree's back; `mooncake-redis doctor` says more). Silent where CONFIG is refused."""
    try:
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy", "noeviction")
    except Exception:  # CONFIG refused (ACL, managed Redis) or unsupported: doctor checks
        return
    if policy not in ("noeviction", None, ""):
        log.warning("Redis runs with maxmemory-policy %s: it may evict index keys on its own "
                    "and break the tree; set maxmemory-policy noeviction (mooncake-redis "
                    "doctor)", policy)


STRUCTURAL_SETTINGS = ("prefix_extractor", "enable_radix_tree")
"""Settings that decide where objects live and how nodes link: changing the extractor, or
turning the tree off, would leave stored nodes unreachable or their links wrong. (The
shard count is the keys' own: shard_layout.py; `set_config` refuses to change it.)"""


def holds_nodes(client: Any, schema: KeySchema) -> bool:
    """Whether any shard of the namespace counts a node (one pipeline of HGETs)."""
    pipe = client.pipeline(transaction=False)
    for shard in schema.shards:
        pipe.hget(schema.shard_keys(shard).stats, "nodes")
    return any(to_int(nodes) > 0 for nodes in pipe.execute())


def refuse_stranding(client: Any, schema: KeySchema, current: Settings,
                     changes: Mapping[str, Any]) -> None:
    """Refuse a change of a structural setting on a namespace that holds nodes (turning
    the tree on is always fine). The one rule for set_config and for filling settings in
    at open: a client that opens with another extractor must not switch everybody."""
    stranding = [name for name in STRUCTURAL_SETTINGS
                 if name in changes and changes[name] != getattr(current, name)
                 and not (name == "enable_radix_tree" and changes[name])]
    if not stranding:
        return
    if holds_nodes(client, schema):
        raise ConfigurationError(
            f"refusing to change {', '.join(stranding)} on namespace {schema.namespace!r}, "
            "which holds nodes: existing objects would be unreachable or their links wrong. "
            "Empty it first (remove_all), or use a new namespace")


def unreadable_message(key: str, unreadable: Mapping[str, str]) -> str:
    shown = ", ".join(f"{name}={value[:80]!r}" for name, value in sorted(unreadable.items()))
    return (f"{key} holds settings that cannot be read: {shown}; using the value read "
            "before or the default instead. Mend them with `mooncake-redis config set "
            "NAME=VALUE` or `mooncake-redis config reset NAME`")


def decoding(client: Any) -> Any:
    """The client itself if it decodes replies to str, else one on the same connection
    settings that does (replies are text everywhere in this package)."""
    if client.get_encoder().decode_responses:
        return client
    if isinstance(client, RedisCluster):
        raise ConfigurationError("pass a RedisCluster built with decode_responses=True")
    pool = client.connection_pool
    kwargs = {**pool.connection_kwargs, "decode_responses": True}
    return type(client)(connection_pool=type(pool)(connection_class=pool.connection_class,
                                                     **kwargs))


class EpochClock:
    """Link epochs: this client's estimate of Redis time in ms, strictly increasing. The
    protocol's safety does not depend on it (fences refuse stale epochs); freshness only
    keeps refusals rare (docs/ARCHITECTURE.md)."""

    def __init__(self, redis_time_ms: int):
        self._sync(redis_time_ms)
        self._last = 0

    def _sync(self, redis_time_ms: int) -> None:
        self._offset_ms = redis_time_ms - time.time() * 1000
        self._synced_at = time.monotonic()

    def needs_sync(self) -> bool:
        return time.monotonic() - self._synced_at > CLOCK_RESYNC_SECONDS

    def sync(self, redis_time_ms: int) -> None:
        self._sync(redis_time_ms)

    def next(self, at_least: int = 0) -> int:
        epoch = max(int(time.time() * 1000 + self._offset_ms), self._last + 1, at_least)
        self._last = epoch
        return epoch


class Context:
    """One namespace as one client process sees it."""

    def __init__(self, client: Any, schema: KeySchema, options: ClientOptions,
                 stored: Mapping[str, str], segments: Mapping[str, str],
                 token: str | None = None, layout_unknown: str = ""):
        self.client = client
        self.schema = schema
        """The namespace's keys, in the layout its keys were found in at open (never
        changed by a setting: shard_layout.py)."""
        self.layout_unknown = layout_unknown
        """Why writes are refused ('' when they are not): the keys fit several layouts."""
        self.scripts = shared_scripts(shebang=not is_in_process(client))
        self.options = options
        self.executor = Executor(client, self.scripts.all, Policy(
            options.cluster_retries, options.cluster_retry_backoff_ms, options.wait_acks,
            options.wait_timeout_ms))
        self.segments: dict[str, Segment] = parse_registry(segments)
        """The segment registry as last read (with the settings)."""
        self.unreadable_settings: dict[str, str] = {}
        """Stored settings that could not be read when last read (name -> stored value):
        each takes the value this client read before, or its default (config get and
        stats show them; `config set` or `config reset` mends them)."""
        self._apply_settings(self._readable(stored, None))
        self._settings_read_at = time.monotonic()
        self.token = token or secrets.token_urlsafe(8)[:10]
        """This client's writer token: put_start/put_end/put_revoke of the same key by the
        same token are re-sends, not conflicts."""
        self._clock: EpochClock | None = None
        self._deferred: list[tuple[Any, ...]] = []
        self._batches = 0
        self.partition: Callable[[str], str] | None = None
        """Tests only: shard -> the name of a pretend Redis node, so that one Redis serves
        shards as a cluster's nodes would (calls per node, links across nodes)."""

    @classmethod
    def open(cls, client: Any, namespace: str, arguments: Mapping[str, Any] | None = None,
             *, strict: bool = False, read_only: bool = False,
             token: str | None = None) -> Context:
        """Open a namespace: read its stored settings, fill in those not stored yet from
        the environment and `arguments` (never overwriting one: a difference is logged as
        a warning, or raised with strict=True), and take the client options."""
        env_settings, env_options = from_environment()
        arg_settings, arg_options = split_arguments(arguments or {})
        given = {**env_settings, **arg_settings}
        options = options_from({**env_options, **arg_options})
        client = decoding(client)
        schema = KeySchema(namespace)
        pipe = client.pipeline(transaction=False)
        pipe.hgetall(schema.settings)
        pipe.hgetall(schema.segments)
        stored, segments = pipe.execute()
        current, unreadable = read_stored(stored)
        if unreadable and strict:
            raise ConfigurationError(unreadable_message(schema.settings, unreadable))
        found = find_layout(client, namespace,
                            None if "shard_count" not in stored or "shard_count" in unreadable
                            else current.shard_count,
                            given.get("shard_count", NEW_SHARD_COUNT))
        schema = KeySchema(namespace, found.layout)
        for name, value in given.items():
            if name in stored and name not in unreadable and getattr(current, name) != value:
                message = (f"{schema.settings} has {name}={getattr(current, name)!r}; ignoring "
                           f"{value!r} from this client (change it with set_config or "
                           "`mooncake-redis config set`)")
                if strict:
                    raise ConfigurationError(message)
                log.warning(message)
        missing = {name: value for name, value in given.items() if name not in stored}
        missing["shard_count"] = found.layout.shard_count  # recorded, never read for keys
        if "shard_count" in stored and "shard_count" not in unreadable and \
                current.shard_count != found.layout.shard_count and not found.unknown:
            log.warning("%s has shard_count=%s, but the namespace's keys have %d shards: "
                        "the keys decide (the stored value is ignored)", schema.settings,
                        current.shard_count, found.layout.shard_count)
            missing.pop("shard_count")
        elif "shard_count" in stored:
            missing.pop("shard_count")
        if missing and not read_only:
            settings_from(missing, base=current)  # refuse a bad combination before writing
            refuse_stranding(client, schema, current, missing)
            pipe = client.pipeline(transaction=False)
            for name, value in missing.items():
                pipe.hsetnx(schema.settings, name, encode(value))
            pipe.execute()
            stored = client.hgetall(schema.settings)
        warn_if_redis_evicts(client)
        return cls(client, schema, options, stored, segments, token, found.unknown)

    # -- settings ------------------------------------------------------------------------

    def _apply_settings(self, settings: Settings) -> None:
        """Use these settings; while segments are registered the capacity is theirs. The
        shard count is the layout's, whatever is stored."""
        settings = replace(settings, shard_count=self.schema.shard_count)
        self._stored_settings = settings
        self.stored_capacity_bytes = settings.capacity_bytes
        capacity = segment_capacity(self.segments)
        if capacity is not None:
            settings = replace(settings, capacity_bytes=capacity)
        self._settings = settings
        self.extractor = extractor_named(settings.prefix_extractor)

    @property
    def settings(self) -> Settings:
        """The namespace's settings, re-read every settings_refresh_seconds."""
        if time.monotonic() - self._settings_read_at > self.options.settings_refresh_seconds:
            self.reload_settings()
        return self._settings

    def reload_settings(self) -> Settings:
        """Read the settings and the segment registry again (one round trip)."""
        batch = self.executor.batch()
        batch.command("HGETALL", self.schema.settings)
        batch.command("HGETALL", self.schema.segments)
        stored, segments = batch.execute()
        for reply in (stored, segments):
            if isinstance(reply, Exception):
                raise reply
        self.segments = parse_registry(segments)
        self._apply_settings(self._readable(stored, self._stored_settings))
        self._settings_read_at = time.monotonic()
        return self._settings

    def _readable(self, stored: Mapping[str, str], fallback: Settings | None) -> Settings:
        """The stored settings, with unreadable values replaced (logged when they change:
        a worker re-reads every few seconds and must not repeat itself)."""
        settings, unreadable = read_stored(stored, fallback)
        if unreadable != self.unreadable_settings and unreadable:
            log.error("%s", unreadable_message(self.schema.settings, unreadable))
        self.unreadable_settings = unreadable
        return settings

    def store_settings(self, changes: Mapping[str, Any]) -> Settings:
        """Write changes to stored settings; configuration.change_settings, which checks
        them first, is the one caller."""
        new = settings_from(changes, base=self.reload_settings())
        values = {name: encode(getattr(new, name)) for name in changes}
        if values:
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(self.schema.settings, mapping=values)
            # the layout too, where a read-only open found none recorded (and then wrote)
            pipe.hsetnx(self.schema.settings, "shard_count", encode(self.schema.shard_count))
            try:
                pipe.execute()
            except redis.exceptions.OutOfMemoryError as error:
                raise StoreFull(
                    f"Redis is at maxmemory and refused to store settings {sorted(values)} of "
                    f"namespace {self.schema.namespace} ({error}); nothing was changed: free "
                    "room (mooncake-redis evict, remove) or raise Redis's maxmemory, then "
                    "set them again") from None
        self._apply_settings(new)
        return new

    def check_maxmemory(self) -> bool:
        """Ask Redis whether it is at maxmemory (one INFO per node; a client that cannot
        tell changes nothing) and tell the scripts this client runs (header)."""
        if is_in_process(self.client):
            return False
        try:
            info = self.client.info("memory")
        except redis.exceptions.RedisError:
            return self.executor.at_maxmemory
        nodes = info.values() if isinstance(self.client, RedisCluster) else [info]
        self.executor.at_maxmemory = any(
            0 < int(node.get("maxmemory", 0)) <= int(node.get("used_memory", 0))
            for node in nodes if isinstance(node, dict))
        return self.executor.at_maxmemory

    # -- batches -------------------------------------------------------------------------

    def read(self, *command: Any) -> Any:
        """One read-only command through the executor (re-sent if its reply is lost, like
        every read; redis-py's own calls would raise ConnectionError instead): a keyed
        one (NAME upper case, then the key) as the lean reads go, TIME through a batch."""
        if command[0] in KEYLESS_COMMANDS:
            batch = self.executor.batch()
            batch.command(*command)
            (reply,) = batch.execute()
        else:
            (reply,) = self.executor.reads([command])
        if isinstance(reply, Exception):
            raise reply
        return reply

    def reads(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Replies of many read-only commands (NAME upper case, then the key), in order,
        errors in place: the hot reads' lean path (Executor.reads), or a batch while
        deferred cleanups wait to go out with the next one."""
        if self._deferred:
            batch = self.batch()
            batch.reads(commands)
            return batch.execute()
        return self.executor.reads(commands)

    def batch(self) -> Batch:
        """A new batch, carrying any deferred cleanup commands first."""
        batch = self.executor.batch()
        deferred, self._deferred = self._deferred, []
        for command in deferred:
            batch.preamble(*command)
        return batch

    def defer(self, *command: Any) -> None:
        """An idempotent cleanup (ZREM of a confirmed pending link or a finished unlink
        intent) that rides on the next batch; if this process dies first, the resolver
        does its work."""
        self._deferred.append(command)

    def flush(self) -> None:
        if self._deferred:
            self.batch().execute()

    def shard_call(self, script: str, shard: str, *script_args: Any) -> NodeCall:
        """A call of a script of one shard (fsck's repairs, trims): it serves only that
        shard, so a cascade into another one goes the way of one across nodes."""
        if self.layout_unknown:
            raise ConfigurationError(self.layout_unknown)
        return NodeCall(self.scripts[script], self, shard, shard, (shard, *script_args))

    def calls(self, script: str, *script_args: Any) -> NodeCalls[Any]:
        """Calls of a shard script, one per Redis node for the shards it serves, all with
        the same script arguments. Refused where the namespace's keys did not tell its
        layout at open (ConfigurationError, saying how to mend it)."""
        if self.layout_unknown:
            raise ConfigurationError(self.layout_unknown)
        return NodeCalls(self.scripts[script], self, script_args)

    # -- placement: which Redis node serves which shard (scripts.Placement) ---------------

    def header(self, served: str = "") -> list[Any]:
        """The common header of shard scripts (lua/_lib.lua): `served` the shards the
        call's node serves, joined ('' = every shard: a single Redis)."""
        settings = self.settings
        events = settings.events_max_len
        if self.executor.at_maxmemory:  # negative: free the stream first (lua/_lib.lua)
            events = -events
        return [self.schema.namespace, settings.put_start_release_timeout_ms, events,
                settings.link_epoch_horizon_ms, self.schema.tag_width,
                self.schema.shard_count, served]

    def routing_key(self, shard: str) -> str:
        return self.schema.shard_keys(shard).stats

    def node_of(self, shard: str) -> str:
        """The Redis node serving a shard now (its name), as this client's slot map has it:
        one name for a single Redis."""
        if self.partition is not None:
            return self.partition(shard)
        if not self.executor.cluster:
            return SINGLE_NODE
        return self.executor.node_name(self.routing_key(shard))

    def served(self, node: str) -> str:
        """What a call for a node tells its script it serves: '' on a single Redis (every
        shard), else the tags of the namespace's shards on that node, joined."""
        if self.partition is None and not self.executor.cluster:
            return ""
        return ",".join(shard for shard in self.schema.shards if self.node_of(shard) == node)

    def per_shard(self, *queues: Callable[[Batch, str], object],
                  shards: Iterable[str] | None = None,
                  raise_errors: bool = False) -> list[tuple[str, list[Any]]]:
        """What each `queue(batch, shard)` queues for each shard (default: all), sent in one
        batch (one round trip; per node on a cluster), and the replies gathered per shard:
        [(shard, [reply, ...]), ...] in the order the shards were given (a shard given
        twice is queued and answered twice). Each queue runs over every shard before the
        next one starts; a shard's replies come in the order they were queued. Errors stay
        in their place, unless raise_errors: then the first one is raised
        (executor.raise_first_error)."""
        where = self.all_shards() if shards is None else tuple(shards)
        batch = self.batch()
        spans = []
        for queue in queues:
            for position, shard in enumerate(where):
                start = len(batch)
                queue(batch, shard)
                spans.append((position, start, len(batch)))
        replies = batch.execute()
        if raise_errors:
            raise_first_error(replies)
        gathered: list[list[Any]] = [[] for _ in where]
        for position, start, end in spans:
            gathered[position] += replies[start:end]
        return list(zip(where, gathered))

    def batch_id(self) -> str:
        self._batches += 1
        return f"{self.token}.{self._batches}"

    # -- time ----------------------------------------------------------------------------

    def redis_time_ms(self) -> int:
        seconds, microseconds = self.read("TIME")
        return int(seconds) * 1000 + int(microseconds) // 1000

    def epoch(self, at_least: int = 0) -> int:
        if self._clock is None:
            self._clock = EpochClock(self.redis_time_ms())
        elif self._clock.needs_sync():
            self._clock.sync(self.redis_time_ms())
        return self._clock.next(at_least)

    # -- names ---------------------------------------------------------------------------

    def key(self, value: Any) -> str:
        return check_text(value, "object key", self._settings.max_key_length)

    def split(self, key: Any) -> tuple[str, str]:
        """(prefix hash, suffix) of an object key, validated (with the settings as last
        read: callers refresh them once per call, not per key)."""
        return split_key(self.extractor.prefix, self.key(key))

    def split_all(self, keys: Sequence[Any]) -> list[Target]:
        """(key, prefix hash, suffix) of each object key: what `split` gives. A list of
        plain texts (non-empty ASCII str within max_key_length, checked at once in C) is
        split by the extractor's `split_all` where it has one, else key by key with the
        checks inlined; any other key goes through `split` and its errors."""
        limit = self._settings.max_key_length
        whole = self.extractor.split_all
        if whole is not None:
            texts = list(keys)
            if plain_texts(texts, limit):
                return whole(texts)
            keys = texts
        prefix_of = self.extractor.prefix
        targets = []
        for key in keys:
            if key.__class__ is str and 0 < len(key) <= limit and key.isascii():
                prefix_hash = prefix_of(key)
                if prefix_hash.__class__ is str and prefix_hash and key.startswith(prefix_hash):
                    targets.append((key, prefix_hash, key[len(prefix_hash):]))
                    continue
            targets.append((key, *self.split(key)))
        return targets

    def node_hashes(self, values: Sequence[Any], what: str = "prefix hash") -> list[str]:
        """`node_hash` of each value: all at once where the extractor can check a whole
        list (`Extractor.all_hashes`), else its checks inlined for a well-formed ASCII
        hash; anything else goes through `node_hash` and its errors."""
        limit = self._settings.max_key_length
        all_hashes = self.extractor.all_hashes
        if all_hashes is not None:
            texts = list(values)
            if texts and all_hashes(texts) and max(map(len, texts)) <= limit:
                return texts  # hex digests: non-empty ASCII str, each a hash
            values = texts
        is_hash = self.extractor.is_hash
        return [value if value.__class__ is str and 0 < len(value) <= limit
                and value.isascii() and is_hash(value) else self.node_hash(value, what)
                for value in values]

    def prefix_hash(self, value: Any, what: str = "prefix hash") -> str:
        """A prefix hash given by a caller, well-formed under the namespace's rule."""
        text = check_text(value, what, self._settings.max_key_length)
        if not self.extractor.is_hash(text):
            raise InvalidArgument(
                f"{what} {text!r} is not a prefix hash: under the {self.extractor.name!r} rule "
                f"a hash is {self.extractor.hash_form}", prefix_hash=text)
        return text

    def names_a_node(self, text: str) -> bool:
        """Whether a text can name a node under the namespace's rule: a well-formed hash,
        or any prefix the extractor produces (a non-standard key is its own prefix: RFC,
        Design 4)."""
        if self.extractor.is_hash(text):
            return True
        try:
            return self.extractor.prefix(text) == text
        except Exception:  # noqa: BLE001 - a registered extractor that fails on odd text
            return False

    def node_hash(self, value: Any, what: str = "prefix hash") -> str:
        """A node named by a caller's query: a prefix hash, or any prefix the extractor can
        produce (queries accept every node a put can make; links still need a hash)."""
        text = check_text(value, what, self._settings.max_key_length)
        if self.names_a_node(text):
            return text
        try:
            prefix = f"its prefix is {self.extractor.prefix(text)}"
        except Exception:  # noqa: BLE001 - a registered extractor that fails on odd text
            prefix = "the extractor gives it no prefix"
        raise InvalidArgument(
            f"{what} {text!r} names no node: it is an object key; {prefix} (under the "
            f"{self.extractor.name!r} rule a hash is {self.extractor.hash_form}, and a key "
            "without one is its own prefix)", prefix_hash=text)

    def shard(self, prefix_hash: str) -> str:
        return self.schema.shard(prefix_hash)

    def all_shards(self) -> tuple[str, ...]:
        return self.schema.shards

    def with_settings(self, **changes: Any) -> Context:
        """A copy that sees other settings (tests and tools only; nothing is stored)."""
        copy = object.__new__(Context)
        copy.__dict__.update(self.__dict__)
        copy._apply_settings(replace(self._settings, **changes))
        copy._settings_read_at = float("inf")
        return copy
