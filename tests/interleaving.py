"""Stateless model checking of the real protocol: every interleaving of a few operations,
step by step, with crashes, over the real Python code and the real Lua scripts.

Each operation runs in its own thread with its own Index (its own writer token and
connections). Its executor is gated: before every Redis call that may write (and before
every run of consecutive reads, which counts as one step) the thread parks until the
scheduler lets it go. A schedule is a sequence of choices: "let operation i take its next
step", or "crash operation i" (it never runs again, as a client killed between two
steps). Every schedule is run from a fresh database; invariant S is checked after every
step, and after the last one the resolver runs (as an eviction job or fsck --repair would)
and fsck checks every invariant.

Two steps of different operations that touch different shards (or only read) commute, so
only one of their orders is explored (sleep sets, Godefroid 1996): the reduction keeps
every reachable state and outcome, and makes the scenarios cheap enough for CI. Epochs
come from one logical clock per run, so a schedule always replays the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from mooncake_redis import (
    CycleDetected,
    Index,
    InvalidObjectState,
    LinkContention,
    ObjectAlreadyExists,
    ObjectLeased,
    ObjectNotFound,
    ParentConflict,
)
from mooncake_redis.executor import Queued, tag_of
from mooncake_redis.operations.fsck import check
from mooncake_redis.tree.links import resolve
from mooncake_redis.values import split_node

Operation = Callable[[Index], Any]

EXPECTED_REFUSALS = (CycleDetected, ParentConflict, ObjectAlreadyExists, ObjectNotFound,
                     ObjectLeased, InvalidObjectState, LinkContention)
"""Refusals an operation may meet under concurrency (LinkContention: a writer racing a
resolver that runs with no grace period); anything else it raises is a bug."""


class Crashed(BaseException):
    """Raised in an operation's thread at the step where the schedule crashes it."""


@dataclass(frozen=True)
class Choice:
    op: int
    crash: bool = False

    def __str__(self) -> str:
        return f"{'crash' if self.crash else 'step'} {self.op}"


@dataclass(frozen=True)
class Step:
    """What an operation's next step touches (tags None: any shard)."""

    label: str
    tags: frozenset[str] | None
    writes: bool


def touched(part: Sequence[Queued]) -> frozenset[str] | None:
    """The shard tags a run of calls may touch: a shard script's call says (NodeCall.tags:
    None where a cascade may reach any shard its node serves), a command its key's tag."""
    tags: set[str] = set()
    for q in part:
        if q.call is not None:
            call_tags = q.call.tags()
            if call_tags is None:
                return None
            tags |= call_tags
        elif q.routing_key:
            tags.add(tag_of(q.routing_key))
    return frozenset(tags)


def independent(a: Choice, b: Choice, steps: dict[int, Step]) -> bool:
    """Whether two choices commute: steps of different operations on different shards, or
    reads only. A crash commutes with nothing (explored in every position)."""
    if a.crash or b.crash or a.op == b.op:
        return False
    first, second = steps[a.op], steps[b.op]
    if not (first.writes or second.writes):
        return True
    if first.tags is None or second.tags is None:
        return False
    return not (first.tags & second.tags)


WAIT_DEADLINE_S = 60.0
"""How long any wait of a run may last before the run fails as hung, naming the schedule so
far: an operation that never reaches its next step or its end (a protocol bug that blocks
it). A step takes milliseconds, so a correct run never comes near it."""


class Gate:
    """Lets one operation thread run at a time, to its next Redis step. Every wait has a
    deadline: a hang fails the test with the schedule so far instead of hanging the suite."""

    def __init__(self, schedule: list[str] | None = None,
                 deadline_s: float = WAIT_DEADLINE_S, title: str = "") -> None:
        self.cv = threading.Condition()
        self.parked: dict[int, Step] = {}
        self.granted: int | None = None
        self.crashing: set[int] = set()
        self.finished: set[int] = set()
        self.schedule = schedule if schedule is not None else []
        """The choices made so far (the explorer appends them), for a hang's report."""
        self.deadline_s = deadline_s
        self.title = title
        """The scenario and run, for a hang's report."""

    def hung(self, what: str) -> AssertionError:
        return AssertionError(f"{self.title}: hung: waited {self.deadline_s:g} s for {what}; "
                              "schedule so far:\n  " + ("\n  ".join(self.schedule) or "(none)"))

    def _wait(self, ready: Callable[[], bool], what: Callable[[], str]) -> None:
        """cv.wait until ready(), or raise once the deadline has passed (cv held)."""
        deadline = time.monotonic() + self.deadline_s
        while not ready():
            left = deadline - time.monotonic()
            if left <= 0:
                raise self.hung(what())
            self.cv.wait(left)

    def step(self, op: int, step: Step) -> None:
        with self.cv:
            self.parked[op] = step
            self.cv.notify_all()
            try:
                self._wait(lambda: self.granted == op or op in self.crashing,
                           lambda: f"the scheduler to let operation {op} go ({step.label})")
            finally:
                del self.parked[op]
            if op in self.crashing:
                raise Crashed
            self.granted = None

    def finish(self, op: int) -> None:
        with self.cv:
            self.finished.add(op)
            self.cv.notify_all()

    def settle(self, ops: int) -> None:
        """Wait until every operation is parked or finished."""
        with self.cv:
            self._wait(lambda: len(self.parked) + len(self.finished) >= ops
                       and self.granted is None,
                       lambda: "every operation to reach its next step or its end (running: "
                       f"{sorted(set(range(ops)) - set(self.parked) - self.finished)})")

    def go(self, choice: Choice, ops: int) -> None:
        with self.cv:
            if choice.crash:
                self.crashing.add(choice.op)
            else:
                self.granted = choice.op
            self.cv.notify_all()
            if choice.crash:
                self._wait(lambda: choice.op in self.finished,
                           lambda: f"operation {choice.op} to end at its crash")
        self.settle(ops)

    def join(self, threads: list[threading.Thread]) -> None:
        deadline = time.monotonic() + self.deadline_s
        for number, thread in enumerate(threads):
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                raise self.hung(f"operation {number}'s thread to end")


class LogicalClock:
    """Link epochs from one counter per run: deterministic in the schedule's order."""

    def __init__(self, base_ms: int):
        self.value = base_ms

    def next(self, at_least: int = 0) -> int:
        self.value = max(self.value + 1, at_least)
        return self.value

    def needs_sync(self) -> bool:
        return False


Partition = Callable[[str], str]
"""Which pretend Redis node serves a shard (Context.partition); None: one Redis serves all."""


def node_per_shard(shard: str) -> str:
    """Every shard on a Redis Cluster node of its own: every link across shards takes the
    link protocol's two steps, every link within a shard one call."""
    return shard


def one_cluster_node(shard: str) -> str:
    """Every shard on one Redis Cluster node: links written in one call, as on one Redis,
    but with a cluster's fences (another client may see these shards elsewhere)."""
    return "node"


class Slot:
    """One operation's Index, reused across runs; each run gives it a fresh gate."""

    def __init__(self, url: str, namespace: str, number: int,
                 settings: dict[str, Any] | None = None, partition: Partition | None = None):
        self.number = number
        # reset() reloads the settings before every run: a refresh coming due inside a run
        # would add a step that a replay of the same schedule does not have
        self.index = Index.from_url(url, namespace=namespace, settings_refresh_seconds=3600,
                                    **(settings or {}))
        self.index.ctx.partition = partition
        self.gate = Gate()
        run = self.index.ctx.executor.run

        def run_in_steps(queued: Sequence[Queued]) -> tuple[list[Any], set[int]]:
            if not self.gated:
                return run(queued)
            results: list[Any] = []
            resent: set[int] = set()
            start = 0
            while start < len(queued):
                end = start + 1
                if not queued[start].writes:
                    while end < len(queued) and not queued[end].writes:
                        end += 1
                part = queued[start:end]
                self.gate.step(self.number, Step(part[0].name, touched(part),
                                                 any(q.writes for q in part)))
                part_results, part_resent = run(part)
                resent.update(start + position for position in part_resent)
                results += part_results
                start = end
            return results, resent

        reads = self.index.ctx.executor.reads

        def reads_in_a_step(commands: Sequence[tuple[Any, ...]]) -> list[Any]:
            # the lean reads (Executor.reads) bypass run() on one Redis: their pipeline
            # is one step, as a run of reads through run() is
            if self.gated and commands:
                self.gate.step(self.number, Step(commands[0][0], frozenset(
                    tag_of(command[1]) for command in commands), False))
            return reads(commands)

        self.index.ctx.executor.run = run_in_steps  # type: ignore[method-assign]
        self.index.ctx.executor.reads = reads_in_a_step  # type: ignore[method-assign]
        self.gated = True
        """False while the slot is prepared outside any schedule (its reads run at once)."""

    def reset(self, gate: Gate, clock: LogicalClock) -> None:
        ctx = self.index.ctx
        self.gate = gate
        ctx._deferred.clear()
        ctx._clock = clock  # type: ignore[assignment]
        self.gated = False
        ctx.reload_settings()
        self.gated = True


@dataclass
class Node:
    """A decision point of one explored path."""

    prefix: list[Choice]
    enabled: list[Choice]
    steps: dict[int, Step]
    sleep: frozenset[Choice]
    explored: list[Choice] = field(default_factory=list)


@dataclass
class Scenario:
    """Operations to interleave on a namespace prepared by `setup`."""

    name: str
    setup: Operation
    ops: list[Operation]
    crashable: Sequence[int] = ()
    max_crashes: int = 1
    check_end: Callable[[Index, dict[int, Any]], None] | None = None
    """Called after the resolver with the observer and each operation's outcome."""
    shards: Sequence[str] = ()
    """The shards the scenario's nodes live in: the final resolver and fsck look there."""
    preemptions: int | None = None
    """At most this many switches away from an operation that could go on (None: no
    bound). Bounded exploration covers every schedule with that few preemptions, which
    is where concurrency bugs are found in practice (Musuvathi & Qadeer, CHESS)."""
    check_step: Callable[[Index], list[str]] | None = None
    """An invariant of the scenario's own, checked with S after every step (what it finds
    broken, [] for nothing)."""
    refusals: tuple[type[Exception], ...] = ()
    """Refusals expected here besides EXPECTED_REFUSALS (NoSpace where space is short)."""
    index_settings: dict[str, Any] = field(default_factory=dict)
    """Settings every Index of the scenario is opened with (shard_count, for instance: give
    the scenario a namespace of its own, since a stored namespace keeps its layout)."""
    views: Sequence[Partition | None] = ()
    """Per operation, where it thinks each shard lives (Context.partition; missing or None:
    one Redis serves every shard). Operations with different views race a link written in
    one call against the same link in two steps, as clients with slot maps of different
    ages do while a slot moves."""


def invariant_s(index: Index) -> list[str]:
    """Invariant S: a live node naming a parent is listed by that parent, which lives."""
    client = index.client
    on_every_master = {"target_nodes": client.PRIMARIES} if index.ctx.executor.cluster else {}
    # a test database of a few keys; on a cluster KEYS asks one node unless told
    keys = client.keys(index.ctx.schema.node_pattern(), **on_every_master)
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hgetall(key)
    nodes = {index.ctx.schema.hash_of_node_key(key): split_node(fields)
             for key, fields in zip(keys, pipe.execute())}
    broken = []
    for child, node in nodes.items():
        parent = node.parent
        if parent is None:
            continue
        if parent not in nodes:
            broken.append(f"{child[:8]} names {parent[:8]}, which does not exist")
        elif child not in nodes[parent].children:
            broken.append(f"{child[:8]} names {parent[:8]}, which does not list it")
    return broken


class Explorer:
    def __init__(self, url: str, scenario: Scenario, namespace: str = "mc-check",
                 wait_deadline_s: float = WAIT_DEADLINE_S):
        self.url = url
        self.scenario = scenario
        self.namespace = namespace
        self.wait_deadline_s = wait_deadline_s
        self.runs = 0
        self.states = 0
        self.client = redis.Redis.from_url(url)
        views = list(scenario.views) + [None] * len(scenario.ops)
        self.slots = [Slot(url, namespace, n, scenario.index_settings, views[n])
                      for n in range(len(scenario.ops))]
        self.observer = Index.from_url(url, namespace=namespace, **scenario.index_settings)

    def explore(self, max_runs: int = 5_000) -> int:
        """Run schedules until every reachable state (up to commuting steps) is covered;
        raise AssertionError naming the first schedule that breaks an invariant. Returns
        how many schedules ran."""
        stack = self.run([], frozenset())
        while stack:
            node = stack[-1]
            alternative = next((c for c in node.enabled
                                if c not in node.sleep and c not in node.explored), None)
            if alternative is None:
                stack.pop()
                continue
            sleep = frozenset(s for s in node.sleep | set(node.explored)
                              if independent(s, alternative, node.steps))
            node.explored.append(alternative)
            stack += self.run(node.prefix + [alternative], sleep)
            if self.runs >= max_runs:
                raise AssertionError(f"{self.scenario.name}: more than {max_runs} schedules")
        return self.runs

    def run(self, prefix: list[Choice], sleep: frozenset[Choice]) -> list[Node]:
        """Replay prefix, then extend it (first choice not asleep) to the end; returns the
        decision points after the prefix."""
        self.runs += 1
        self.client.flushdb()
        scenario = self.scenario
        scenario.setup(self.observer)
        self.observer.ctx.reload_settings()
        labels: list[str] = []
        gate = Gate(labels, self.wait_deadline_s, f"{scenario.name}, schedule #{self.runs}")
        # Epochs a little in the past (within the link horizon), so that a pending entry
        # is always old enough for a grace-0 resolver, whatever the speed of the run.
        clock = LogicalClock(self.observer.ctx.redis_time_ms() - 10_000)
        outcomes: dict[int, Any] = {}
        threads = []
        for slot, op in zip(self.slots, scenario.ops):
            slot.reset(gate, clock)
            threads.append(threading.Thread(target=self._operate, args=(slot, op, outcomes),
                                            daemon=True))
        for started, thread in enumerate(threads, 1):
            thread.start()  # one at a time: each draws its first epoch in a fixed order
            gate.settle(started)
        choices: list[Choice] = []
        nodes: list[Node] = []
        crashes = preemptions = 0
        while len(gate.finished) < len(threads):
            running = choices[-1].op if choices and not choices[-1].crash else None
            enabled = [Choice(op) for op in sorted(gate.parked)]
            if scenario.preemptions is not None and running in gate.parked \
                    and preemptions >= scenario.preemptions:
                enabled = [Choice(running)]  # type: ignore[arg-type]
            if crashes < scenario.max_crashes:
                enabled += [Choice(op, True) for op in sorted(gate.parked)
                            if op in scenario.crashable]
            steps = dict(gate.parked)
            if len(choices) < len(prefix):
                choice = prefix[len(choices)]
            else:
                awake = [c for c in enabled if c not in sleep]
                if not awake:
                    break  # every continuation is covered by an explored sibling
                choice = awake[0]
                nodes.append(Node(list(choices), enabled, steps, sleep, [choice]))
                sleep = frozenset(s for s in sleep if independent(s, choice, steps))
            if choice.op not in steps:  # a replayed prefix that this run did not follow
                raise RuntimeError(self._describe(
                    f"replay diverged: operation {choice.op} is not waiting at a step",
                    labels, []))
            labels.append(f"{choice} {steps[choice.op].label}")
            if not choice.crash and running in gate.parked and choice.op != running:
                preemptions += 1
            choices.append(choice)
            crashes += choice.crash
            gate.go(choice, len(threads))
            self.states += 1
            broken = invariant_s(self.observer)
            if broken:
                raise AssertionError(self._describe("invariant S broken", labels, broken))
            if scenario.check_step is not None and (broken := scenario.check_step(
                    self.observer)):
                raise AssertionError(self._describe("step check failed", labels, broken))
        else:
            self._check_end(gate, threads, outcomes, labels)
        self._stop(gate, threads)
        return nodes

    def _check_end(self, gate: Gate, threads: list[threading.Thread],
                   outcomes: dict[int, Any], labels: list[str]) -> None:
        gate.join(threads)
        for number, outcome in sorted(outcomes.items()):
            if isinstance(outcome, Exception) and not isinstance(
                    outcome, EXPECTED_REFUSALS + self.scenario.refusals):
                raise AssertionError(self._describe(f"operation {number} failed: {outcome!r}",
                                                    labels, []))
        resolve(self.observer.ctx, grace_ms=0, shards=self.scenario.shards)
        report = check(self.observer.ctx, shards=self.scenario.shards)
        if not report.clean:
            raise AssertionError(self._describe("not consistent after the resolver", labels,
                                                [f"{k}: {d}" for k, d in report.problems]))
        if self.scenario.check_end is not None:
            try:
                self.scenario.check_end(self.observer, outcomes)
            except AssertionError as error:
                raise AssertionError(self._describe(f"end check: {error}", labels, [])) \
                    from None

    @staticmethod
    def _stop(gate: Gate, threads: list[threading.Thread]) -> None:
        """Crash whatever still waits (a path cut short by its sleep set)."""
        with gate.cv:
            gate.crashing.update(range(len(threads)))
            gate.cv.notify_all()
        gate.join(threads)

    @staticmethod
    def _operate(slot: Slot, op: Operation, outcomes: dict[int, Any]) -> None:
        try:
            outcomes[slot.number] = op(slot.index)
            slot.index.close()
        except Crashed as crashed:
            outcomes[slot.number] = crashed
        except Exception as error:  # judged by the explorer
            outcomes[slot.number] = error
        finally:
            slot.gate.finish(slot.number)

    def _describe(self, what: str, labels: list[str], details: list[str]) -> str:
        return (f"{self.scenario.name}: {what} after schedule #{self.runs}:\n  "
                + "\n  ".join(labels) + ("\n" + "\n".join(details) if details else ""))
