"""The Index is a facade: code outside it does not take its Context out of it.

The rule, checked with `ast` on every .py file of the package (lua/ and workers/ included),
benchmarks/, scripts/ and examples/: an attribute `.ctx` (or `getattr(..., "ctx")`) may only be read
on `self` (a class's own Context) or on a name `ctx` (a Context passed in). Anything else
(`index.ctx`, `self.index.ctx`, `plane.index.ctx`) reaches into an Index, and fails the
test. Exempt: mooncake_redis/index.py itself and the command modules (mooncake_redis/cli/,
and the simulator's cli.py and *_cli.py), which wire Contexts to the parts below the facade;
tests/ is not scanned. Code that needs more than the Index offers either gets a public Index
member (schema, redis_time_ms, split_key, batch, metrics_exporter) or is passed what it
needs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mooncake_redis import Index
from mooncake_redis.errors import InvalidArgument

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("mooncake_redis", "lua", "workers", "benchmarks", "scripts", "examples")
ALLOWED_OWNERS = {"self", "ctx"}


def exempt(path: Path) -> bool:
    """The facade itself and the command line, which runs the operations' loops on an
    Index's context; the failover benchmark runs the monitor's loop in a thread, as
    `mooncake-redis monitor` does, and fsck on the healed namespace."""
    return path == ROOT / "mooncake_redis" / "index.py" or \
        path == ROOT / "benchmarks" / "failover.py" or \
        (ROOT / "mooncake_redis" / "cli") in path.parents or path.name == "cli.py" or \
        path.name.endswith("_cli.py")


def reaches_in(source: str) -> list[tuple[int, str]]:
    """(line, expression) of each `.ctx` read on anything but `self` or a name `ctx`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "ctx":
            owner = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "getattr" and len(node.args) >= 2 and \
                isinstance(node.args[1], ast.Constant) and node.args[1].value == "ctx":
            owner = node.args[0]
        else:
            continue
        if not (isinstance(owner, ast.Name) and owner.id in ALLOWED_OWNERS):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def sources() -> list[Path]:
    return sorted(path for root in SCANNED for path in (ROOT / root).rglob("*.py")
                  if not exempt(path))


def test_nothing_outside_the_facade_takes_an_index_context() -> None:
    files = sources()
    assert len(files) > 80, "the scan found too few files"
    leaks = [f"{path.relative_to(ROOT)}:{line}: {text}" for path in files
             for line, text in reaches_in(path.read_text())]
    assert not leaks, "reaches into an Index's Context:\n" + "\n".join(leaks)


def test_the_check_sees_a_leak() -> None:
    assert reaches_in("def f(index):\n    return index.ctx.schema\n") == \
        [(2, "index.ctx")]
    assert reaches_in("x = self.index.ctx\ny = getattr(plane, 'ctx')\n") == \
        [(1, "self.index.ctx"), (2, "getattr(plane, 'ctx')")]
    assert reaches_in("a = self.ctx.schema\nb = ctx.ctx\nc = index.context\n") == []
    assert exempt(ROOT / "mooncake_redis" / "cli" / "eviction.py")
    assert not exempt(ROOT / "mooncake_redis" / "files" / "data_plane.py")


def test_the_public_members_give_what_the_index_uses(index: Index) -> None:
    page = "ab" * 32
    assert index.schema is index.ctx.schema
    assert index.schema.shard(page) == index.ctx.shard(page)
    assert index.split_key(f"{page}_0_k") == (page, "_0_k")
    with pytest.raises(InvalidArgument):
        index.split_key("")
    seconds, microseconds = index.client.time()
    assert abs(index.redis_time_ms() - (seconds * 1000 + microseconds // 1000)) < 60_000
    index.put_start(f"{page}_0_k", 10)
    batch = index.batch()
    batch.command("HGET", index.schema.node(page), "p")
    batch.command("EXISTS", index.schema.node(page))
    assert batch.execute() == [None, 1]
    pytest.importorskip("prometheus_client")
    assert index.metrics_exporter().collector.sources == [index.ctx]
