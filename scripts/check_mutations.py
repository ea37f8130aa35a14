"""Is the interleaving checker sensitive? Breaks the link protocol on purpose, one
mutation at a time, and runs the interleaving scenarios against each broken version.

    .venv/bin/python scripts/check_mutations.py            # every mutation, then unmutated
    .venv/bin/python scripts/check_mutations.py --only resolver-keep-no-raise --every

Each mutation is a text substitution on one file of a temporary copy of lua/ (the
checkout is never touched): this process reads its scripts from the copy
(mooncake_redis.scripts.read_lua), so every Index it opens loads the broken script under
a SHA of its own. The scenarios are tests/test_interleavings.py's, in each of its
topologies, run by tests/interleaving.py's Explorer against a redis-server of its own on
a free port. A mutation is caught when a scenario breaks an invariant (S after a step,
fsck after the resolver, a scenario's end check, an operation failing unexpectedly) in
some schedule; its relevant scenarios run first, then the others if none caught it.
Without --every the first catch ends a mutation's run. Finally every scenario runs
unmutated, which must give 0 violations (--no-baseline skips that).

Prints a table: mutation, caught, by which scenario (topology), at which schedule, the
violation. Exit 1 if a mutation is not caught or the unmutated code breaks.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from interleaving import Explorer, Scenario  # noqa: E402
from redis_server import RedisServer  # noqa: E402
from test_interleavings import SCENARIOS, TOPOLOGIES  # noqa: E402

import mooncake_redis.context as context_module  # noqa: E402
import mooncake_redis.scripts as scripts_module  # noqa: E402

LUA = ROOT / "lua"


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    what: str
    file: str
    old: str
    new: str
    relevant: tuple[str, ...] = ()
    """Scenario names tried first (the rest run only if none of these catches it)."""


MUTATIONS = [
    Mutation(
        "unlink-no-epoch-test",
        "unlink without the epoch test (a child field goes whatever epoch it holds)",
        "_lib.lua",
        "if not q.exists or q.dead or not current or tonumber(current) ~= epoch then",
        "if not q.exists or q.dead or not current then",
        ("put/remove of the same page", "remove/re-put, remover crashes between steps")),
    Mutation(
        "step2-no-fence",
        "step 2 without the fence check (check_parent accepts a fenced epoch)",
        "_lib.lua",
        "    if fence and fence >= epoch then return nil, fail('FENCED', num(fence)) end\n",
        "",
        ("two writers of one page and a remover (fences)", "put/remove of the same page")),
    Mutation(
        "c-links-as-l",
        "'C' links confirmed like 'L' (no pending entry for the resolver's walk)",
        "_lib.lua",
        "n.lb0 ~= batch then flag = 'C' end",
        "n.lb0 ~= batch then flag = 'L' end",
        ("put/put, crossed parents, existing roots", "register/register, crossed parents",
         "three writers closing a cycle")),
    Mutation(
        "resolver-keep-no-raise",
        "the resolver keeps a link without raising the child's epoch",
        "resolve.lua",
        "      if epoch > (n.pe or 0) then set(n, 'pe', epoch) end\n",
        "",
        ("a link the resolver keeps, then a removal",)),
    Mutation(
        "local-link-no-child-field",
        "a local link written without its parent's child field (general path, "
        "apply_parent: the child names the parent, the parent does not list it)",
        "_lib.lua",
        "    if not listed or listed < pe then\n",
        "    if false then\n",
        ("remove/re-put of a child, in one shard",)),
    Mutation(
        "lean-local-link-no-child-field",
        "the same in put.lua's lean path (the parent's field and child count not written)",
        "put.lua",
        "        W[parent_at][#W[parent_at] + 1] = f\n"
        "        W[parent_at][#W[parent_at] + 1] = epoch_s\n"
        "        C[parent_at] = C[parent_at] + 1\n",
        "",
        ("local link/removal of its parent, in one shard", "put/put, crossed parents, "
         "new nodes")),
]


@contextmanager
def lua_from(mutation: Mutation | None) -> Iterator[None]:
    """While open, this process's scripts come from a copy of lua/ with the mutation
    applied (exactly once: a substitution that finds nothing is a stale mutation)."""
    with tempfile.TemporaryDirectory(prefix="mooncake-mutation-") as directory:
        copy = Path(directory)
        for source in LUA.glob("*.lua"):
            shutil.copy(source, copy / source.name)
        if mutation is not None:
            target = copy / mutation.file
            text = target.read_text("utf-8")
            found = text.count(mutation.old)
            if found != 1:
                raise SystemExit(f"mutation {mutation.name}: its text occurs {found} times in "
                                 f"lua/{mutation.file} (expected once): update the mutation")
            target.write_text(text.replace(mutation.old, mutation.new), "utf-8")
        original = scripts_module.read_lua
        scripts_module.read_lua = lambda name: (copy / f"{name}.lua").read_text("utf-8")
        context_module._SCRIPTS.clear()
        try:
            yield
        finally:
            scripts_module.read_lua = original
            context_module._SCRIPTS.clear()


@dataclasses.dataclass
class Outcome:
    scenario: str
    topology: str
    schedules: int
    violation: str | None = None
    """The first line of what broke and its details (None: every schedule passed)."""


def run_one(url: str, scenario: Scenario, topology: str) -> Outcome:
    view = TOPOLOGIES[topology]
    placed = dataclasses.replace(scenario, views=[view(op) for op in range(len(scenario.ops))])
    explorer = Explorer(url, placed)
    try:
        explorer.explore()
    except AssertionError as error:
        lines = str(error).splitlines()
        details = [line for line in lines[1:] if not line.startswith("  ")]
        head = lines[0].split(": ", 1)[-1]
        return Outcome(scenario.name, topology, explorer.runs,
                       "; ".join([head.split(" after schedule")[0], *details[:2]]))
    finally:
        for slot in explorer.slots:
            slot.index.close()
        explorer.observer.close()
        explorer.client.close()
    return Outcome(scenario.name, topology, explorer.runs)


def ordered(relevant: Sequence[str]) -> list[Scenario]:
    first = [s for s in SCENARIOS if s.name in relevant]
    return first + [s for s in SCENARIOS if s.name not in relevant]


def check(url: str, mutation: Mutation | None, every: bool) -> list[Outcome]:
    """The outcomes of the scenarios (in each topology) against the mutated scripts: up to
    the first catch, or all of them with `every` (or unmutated)."""
    outcomes = []
    with lua_from(mutation):
        for scenario in ordered(mutation.relevant if mutation else ()):
            for topology in TOPOLOGIES:
                started = time.monotonic()
                outcome = run_one(url, scenario, topology)
                outcomes.append(outcome)
                print(f"  {mutation.name if mutation else 'unmutated'}: {scenario.name} "
                      f"({topology}): {outcome.schedules:,} schedules, "
                      f"{'CAUGHT' if outcome.violation else 'passed'} "
                      f"({time.monotonic() - started:.1f} s)", flush=True)
                if outcome.violation and mutation is not None and not every:
                    return outcomes
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=[m.name for m in MUTATIONS],
                        help="run this mutation (repeatable; default: all)")
    parser.add_argument("--every", action="store_true",
                        help="run every scenario against each mutation, not only up to "
                        "the first that catches it")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the unmutated run")
    parser.add_argument("--url", help="a Redis to use (its database is flushed); default: "
                        "a redis-server of this run's own")
    args = parser.parse_args()
    logging.getLogger("mooncake_redis").setLevel(logging.CRITICAL)  # the resolver's warnings
    server = None if args.url else RedisServer()
    url = args.url or server.url  # type: ignore[union-attr]
    rows = []
    failed = False
    started = time.monotonic()
    try:
        for mutation in [m for m in MUTATIONS if not args.only or m.name in args.only]:
            outcomes = check(url, mutation, args.every)
            caught = [o for o in outcomes if o.violation]
            failed |= not caught
            first = caught[0] if caught else None
            rows.append((mutation.name, "yes" if caught else "**no**",
                         f"{first.scenario} ({first.topology})" if first else "-",
                         f"#{first.schedules}" if first else "-",
                         first.violation if first else "-"))
            if args.every and len(caught) > 1:
                others = ", ".join(f"{o.scenario} ({o.topology}) #{o.schedules}"
                                   for o in caught[1:])
                rows.append(("", "", f"also: {others}", "", ""))
        if not args.no_baseline:
            outcomes = check(url, None, True)
            broken = [o for o in outcomes if o.violation]
            failed |= bool(broken)
            rows.append(("(unmutated)", f"{len(broken)} violations",
                         f"{len(outcomes)} scenario runs",
                         f"{sum(o.schedules for o in outcomes):,} schedules",
                         "; ".join(f"{o.scenario} ({o.topology}): {o.violation}"
                                   for o in broken) or "-"))
    finally:
        if server is not None:
            server.stop()
    print(f"\n{time.monotonic() - started:.0f} s\n")
    print("| mutation | caught | by (topology) | schedule | violation |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
