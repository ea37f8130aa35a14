"""Script rules, checked on what real Redis runs (MONITOR): every script is exercised, a
shard script's call declares at most one key (a shard's, for routing) and touches only keys
of its namespace, one of shards of the namespace (a call of one shard only that shard's),
and a script of other keys only the keys it declares; every Lua file documents its
interface; the executor refuses a cross-slot call of such a script before sending it.
On Redis Cluster (tests/test_cluster.py) every call runs where its keys are served."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from importlib import resources

import pytest
import redis
from clock import HANG_GUARD_S, joined
from helpers import assert_consistent, page

from mooncake_redis import Index, ObjectAlreadyExists
from mooncake_redis.errors import ReplyCode, ScriptError, from_script_error, split_script_error
from mooncake_redis.executor import CrossSlotCall
from mooncake_redis.keys import SHARD_KEY_NAMES
from mooncake_redis.layouts import LAYOUTS
from mooncake_redis.operations.fsck import check
from mooncake_redis.scripts import (
    LIBRARY,
    SCRIPT_NAMES,
    SHARD_SCRIPTS,
    USES,
    library_for,
    library_parts,
    read_lua,
)
from mooncake_redis.values import child_field

STOP = "mooncake-test-stop-monitor"
KEYLESS = {"TIME"}
KEY_AFTER_SUBCOMMAND = {"XINFO", "XGROUP"}
"""Commands whose key follows a subcommand (XINFO STREAM key, XGROUP CREATE key ...)."""
KEY_AFTER_STREAMS = {"XREAD", "XREADGROUP"}
"""Commands whose (one) key follows the word STREAMS."""


def key_of(words: list[str]) -> str:
    """The key of a command as MONITOR or a script writes it (words[0] is the command)."""
    command = words[0].upper().strip("'\"")
    if command in KEY_AFTER_STREAMS:
        streams = [w.upper().strip("'\"") for w in words].index("STREAMS")
        return words[streams + 1]
    position = 2 if command in KEY_AFTER_SUBCOMMAND else 1
    return words[position] if len(words) > position else ""


@dataclass
class ScriptCall:
    name: str
    keys: list[str]
    argument: str
    """Its last argument (a shard script's packed one)."""
    touched: list[tuple[str, str]] = field(default_factory=list)
    """(command, key) of every command the script ran"""


class Monitor(threading.Thread):
    """Every script call the server runs, with the commands it ran inside (MONITOR lists
    a script's own commands right after it)."""

    def __init__(self, url: str, script_names: dict[str, str]):
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url, decode_responses=True)
        self.names = script_names
        self.calls: list[ScriptCall] = []
        self.ready = threading.Event()

    def run(self) -> None:
        with self.client.monitor() as monitor:
            self.ready.set()
            for command in monitor.listen():
                words = command["command"].split(" ")
                if words == ["ECHO", STOP]:
                    return
                if command["client_type"] == "lua" and self.calls:
                    self.calls[-1].touched.append((words[0].upper(), key_of(words)))
                elif words[0].upper() == "EVALSHA":
                    count = int(words[2])
                    self.calls.append(ScriptCall(self.names[words[1].strip('"')],
                                                 [w.strip('"') for w in words[3:3 + count]],
                                                 words[-1]))

    def __enter__(self) -> Monitor:
        self.start()
        assert self.ready.wait(timeout=HANG_GUARD_S), "MONITOR never started"
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.echo(STOP)
        joined(self, "MONITOR to see the stop")


def exercise_every_script(index: Index) -> None:
    other = Index(index.client, index.namespace)  # a second writer (its own token)
    a, b, c = page("a"), page("b"), page("c")
    index.put_start(f"{a}_0_k", 10)  # put_start
    index.put_end(f"{a}_0_k")  # put_end
    index.put_start(f"{b}_0_k", 10, parent_block_hash=a)  # link, put_start
    index.batch_put_start([(f"{c}_0_k", 1, b), ("plain", 1, None)])
    index.register_radix_tree_node(c, b, [f"{c}_0_k"])  # register
    index.get(f"{a}_0_k")  # grant_lease
    with pytest.raises(ObjectAlreadyExists):  # its link is settled at once: resolve, unlink
        other.put_start(f"{c}_0_k", 1, parent_block_hash=a)
    index.put_revoke(f"{c}_0_k")  # delete; c is left empty: unlink from b
    index.remove(f"{b}_0_k", force=True)
    index.put_end("plain")
    index.mount_segment("seg", 1 << 30)  # segment
    index.put_start(f"{a}_1_k", 10, replicas=[("seg", "0x10")])
    index.unmount_segment("seg")  # invalidate
    index.evict(target_ratio=0)  # lock_token, evict
    index.client.hset(index.ctx.schema.node(a), "b", 999)
    index.client.hset(index.ctx.schema.shard_keys(index.ctx.shard(a)).stats, "objects", 9)
    index.client.hset(index.ctx.schema.node(a), "pe", "1e999")
    assert check(index.ctx, repair=True).repaired  # repair_node, recount_shard, scrub
    index.remove_all(force=True)
    assert list(index.events("g", start="earliest", follow=False))  # read_events
    index.close()
    # shards on two pretend Redis nodes: links across them take the protocol's two steps
    split, rival = (Index(index.client, index.namespace) for _ in range(2))
    for one in (split, rival):
        one.ctx.partition = lambda shard: "odd" if int(shard, 16) % 2 else "even"
    x, y = page("x"), next(h for h in (page(("y", n)) for n in range(100))
                           if int(index.ctx.shard(h), 16) % 2 != int(index.ctx.shard(page("x")),
                                                                       16) % 2)
    split.put_start(f"{x}_0_k", 1)
    split.put_start(f"{y}_0_k", 1, parent_block_hash=x)  # link, then put
    # the rival's link must be newer than the one x lists, or its step 1 changes nothing
    # and leaves nothing to settle (each clock's epochs are Redis milliseconds, so the two
    # writers' can be equal): each epoch() call takes the rival's clock one further
    listed = int(index.client.hget(index.ctx.schema.node(x), child_field(y)))
    while rival.ctx.epoch() <= listed:
        pass
    with pytest.raises(ObjectAlreadyExists):  # its link is settled at once: resolve, unlink
        rival.put_start(f"{y}_0_k", 1, parent_block_hash=x)
    split.remove(f"{y}_0_k", force=True)  # delete: y's unlink from x waits for unlink
    split.resolve(grace_ms=0)  # fences: trim_fences
    split.remove_all(force=True)
    for one in (split, rival):
        one.close()


SHARD_KEY = re.compile(r"^scripts:\{([0-9a-f]{1,2})\}:(?:n:.+|" + "|".join(SHARD_KEY_NAMES)
                       + ")$")


def test_every_script_call_touches_only_keys_it_may(redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="scripts")
    names = {script.sha: script.name for script in index.ctx.scripts.all}
    with Monitor(redis_url, names) as monitor:
        exercise_every_script(index)
    assert {call.name for call in monitor.calls} == set(SCRIPT_NAMES)
    shards = set(index.ctx.all_shards())
    for call in monitor.calls:
        touched = [key for command, key in call.touched if command not in KEYLESS]
        if call.name not in SHARD_SCRIPTS:
            undeclared = [key for key in touched if key not in call.keys]
            assert not undeclared, f"{call.name} touched keys not in its KEYS: {undeclared}"
            continue
        assert len(call.keys) <= 1, call
        tags = [SHARD_KEY.match(key) for key in [*call.keys, *touched]]
        assert all(tags), f"{call.name} touched a key of no shard: {call}"
        seen = {tag.group(1) for tag in tags if tag}
        assert seen <= shards, call
        if LAYOUTS[call.name].per_shard:  # a call of one shard stays in it
            assert len(seen) == 1, f"{call.name} left its shard: {sorted(seen)}"


def test_a_call_with_keys_of_two_tags_is_refused_before_sending(index: Index) -> None:
    batch = index.ctx.batch()
    with pytest.raises(CrossSlotCall):
        batch.call(index.ctx.scripts["link"], ["t:{00}:x", "t:{01}:y"], [])
    assert len(batch) == 0
    assert batch.execute() == []


def lua_files() -> list[str]:
    return sorted(entry.name[:-4] for entry in resources.files("mooncake_redis.lua").iterdir()
                  if entry.name.endswith(".lua"))


def test_every_lua_file_is_a_known_script_or_the_library() -> None:
    assert lua_files() == sorted([*SCRIPT_NAMES, LIBRARY])


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_script_documents_its_interface(name: str) -> None:
    lines = read_lua(name).splitlines()[1:]  # after the shebang
    header = "\n".join(line for line in lines[:next(i for i, line in enumerate(lines)
                                                    if not line.startswith("--"))])
    for part in ("KEYS:", "ARGV:", "Returns:"):
        assert part in header, f"{name}.lua header lacks {part}"


FAIL_CODE = re.compile(r"fail\('([A-Z_]+)'")
LINK_REFUSALS = {ReplyCode.FENCED, ReplyCode.STALE_EPOCH, ReplyCode.CYCLE_CHECK,
                 ReplyCode.NOT_HERE}


def test_every_refusal_code_a_script_sends_is_a_reply_code_and_every_member_is_sent() -> None:
    sent = {code for name in [*SCRIPT_NAMES, LIBRARY] for code in FAIL_CODE.findall(read_lua(name))}
    assert sent, "no fail('CODE' found: the pattern no longer matches the scripts"
    assert sent == {code.value for code in ReplyCode}


@pytest.mark.parametrize("code", list(ReplyCode))
def test_a_refusal_becomes_the_exception_of_its_code(code: ReplyCode) -> None:
    """Each code but the link refusals (which registration handles itself) is raised as
    the exception carrying it."""
    assert split_script_error(f"MCERR_{code.value} some detail") == (code, "some detail")
    error = from_script_error(f"MCERR_{code.value} some detail", key="k")
    if code in LINK_REFUSALS:
        assert type(error) is ScriptError
    else:
        assert (error.code, str(error), error.key) == (code.value, "some detail", "k")


def test_a_code_this_version_does_not_know_stays_a_script_error() -> None:
    assert split_script_error("MCERR_NO_SUCH_CODE x") is None
    error = from_script_error("MCERR_NO_SUCH_CODE x")
    assert type(error) is ScriptError and str(error) == "MCERR_NO_SUCH_CODE x"


GROWING = {"put", "register"}
"""The scripts Redis must refuse whole at maxmemory; every other one frees memory, reads,
or must never be refused behind a write that was (link), so it runs there too."""


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_script_says_how_it_runs(name: str) -> None:
    """A shard script works in the shards of one Redis Cluster node, so in several slots
    (allow-cross-slot-keys); the growing ones are refused whole at maxmemory, the others
    run there (allow-oom)."""
    first = read_lua(name).splitlines()[0]
    flags = [] if name in GROWING else ["allow-oom"]
    if name in SHARD_SCRIPTS:
        flags.append("allow-cross-slot-keys")
    assert first == "#!lua flags=" + ",".join(flags), first


def test_the_library_documents_the_packed_argument() -> None:
    header = read_lua(LIBRARY).split("\n\n")[0]
    assert "ARGV[1] is" in header and "A[7]" in header and "KEYS:" in header


KEY_BUILDERS = re.compile(r"^(?:\w+\.(?:stats|key)|\w+\.base \.\. '(?:"
                          + "|".join(SHARD_KEY_NAMES) + r")'|\w+\.nbase \.\. [\w.\[\] +-]+)$")


@pytest.mark.parametrize("name", [*SCRIPT_NAMES, LIBRARY])
def test_keys_are_built_in_one_place(name: str) -> None:
    """A key is a variable (KEYS, a node record's key, a stream ...) or built from a shard
    record the library made (lua/_lib.lua shard(): `s.stats`, `s.base .. '<shard key>'`,
    `s.nbase .. <hash>`), never a literal or any other concatenation."""
    for arguments in re.findall(r"redis\.p?call\(('[^)]*)\)", read_lua(name)):
        words = [word.strip() for word in arguments.split(",")]
        if words[0].strip("'") in KEYLESS:
            continue
        key = key_of(words)
        assert key and not key.startswith(("'", '"')), f"{name}: redis.call({arguments})"
        assert ".." not in key or KEY_BUILDERS.match(key), \
            f"{name}: redis.call({arguments}) builds its key"


def test_a_script_carries_the_library_parts_it_names_and_what_they_need() -> None:
    """`-- uses:` (lua/_lib.lua): put_end names events and leaves and gets core with them,
    not the node records; a script without the line gets every part; an empty line none."""
    _, parts = library_parts()
    put_end = library_for(read_lua("put_end"))
    assert "local function event(" in put_end and "local function leaf_score" in put_end
    assert "local function now" in put_end  # core: events and leaves need it
    assert "local function node(" not in put_end and "local function finish" not in put_end
    assert "local function node(" in library_for(read_lua("delete"))
    assert library_for("return 1").endswith(parts["links"][1])
    assert all(text in library_for("return 1") for _, text in parts.values())
    assert library_for("-- uses:\nreturn 1") == ""


def test_a_put_call_answers_a_new_object_and_a_resent_one_as_alone(redis_url: str) -> None:
    """Within one put call, a new object and a re-sent one (this writer's own processing
    object) each answer as if sent alone, and the shard's stats count each object once."""
    index = Index.from_url(redis_url, namespace="both-paths", capacity_bytes="1GiB")
    first, again = page("paths-1"), "01" + page("paths-2")[2:]
    first = "01" + first[2:]  # one shard
    index.put_start(f"{again}_0_k", 10)
    results = index.batch_put_start([(f"{first}_0_k", 20, None), (f"{again}_0_k", 10, None)])
    assert [result.ok for result in results] == [True, True]
    shard = index.ctx.schema.shard(first)
    assert shard == index.ctx.schema.shard(again)
    stats = index.client.hgetall(index.ctx.schema.shard_keys(shard).stats)
    assert (stats["used_bytes"], stats["objects"], stats["nodes"]) == ("30", "2", "2")
    index.batch_put_end([f"{first}_0_k", f"{again}_0_k"])
    assert_consistent(index)


def _code(text: str) -> str:
    """Lua text without its comments and with its strings emptied."""
    text = re.sub(r"--[^\n]*", "", text)
    text = re.sub(r"'(?:\\.|[^'\\])*'", "''", text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def _top_level_names(text: str) -> set[str]:
    """The names a library part defines: its column-0 `local` declarations."""
    code = _code(text)
    names = set(re.findall(r"^local function (\w+)", code, re.MULTILINE))
    for declared in re.findall(r"^local ((?:\w+\s*,\s*)*\w+)\s*(?:=|$)", code, re.MULTILINE):
        names.update(name.strip() for name in declared.split(","))
    return names


def _library_names_used(body: str, defined: set[str]) -> set[str]:
    """The library's names a script body uses: identifiers (not fields) it does not
    declare itself (locals, loop variables, parameters)."""
    code = _code(body)
    own = set(re.findall(r"\blocal function (\w+)", code))
    for pattern in (r"\blocal ((?:\w+\s*,\s*)*\w+)", r"\bfor ((?:\w+\s*,\s*)*\w+)\s*(?:=|in)",
                    r"\bfunction\s*\w*\s*\(([^)]*)\)"):
        for names in re.findall(pattern, code):
            own.update(name.strip() for name in names.split(",") if name.strip())
    return (set(re.findall(r"(?<![\w.:])([A-Za-z_]\w*)", code)) - own) & defined


def _names_missing(body: str) -> set[str]:
    """Library names the body uses that the parts it names (uses and lazy, with what they
    need) do not define."""
    _, parts = library_parts()
    defined = {name: _top_level_names(text) for name, (_, text) in parts.items()}
    every = set().union(*defined.values())
    line = USES.search(body)
    named = line.group(1).split() if line else []
    todo, brought = list(named), set()
    while todo:
        part = todo.pop()
        if part not in brought:
            brought.add(part)
            todo.extend(parts[part][0])
    given = set().union(*(defined[part] for part in brought)) if brought else set()
    return _library_names_used(body, every) - given


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_script_names_the_library_parts_it_uses(name: str) -> None:
    """Each script declares what it takes from lua/_lib.lua (a `-- uses:` line, empty for
    none), and every library name it uses is defined by a part it names or one they need:
    no script gets the whole library by default, nor leans on a part it did not name."""
    body = read_lua(name)
    assert USES.search(body), f"{name}.lua has no '-- uses:' line"
    assert not _names_missing(body), f"{name}.lua uses {_names_missing(body)} unnamed"


def test_a_script_that_leans_on_a_part_it_did_not_name_is_caught() -> None:
    assert _names_missing("-- uses: leaves\nevent(s, 'stored', h, p, s, '1')\n") == \
        {"event"}
    assert not _names_missing("-- uses: events\nlocal emit = 1\nevent(emit)\n")
    assert _names_missing("-- uses:\nlocal x = num(1)\n") == {"num"}
