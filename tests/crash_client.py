"""One client process of the client crash test (tests/test_crash.py).

All processes write the same chat-shaped tree (a shared system prompt, then one chain per
conversation), each its own objects in the shared nodes (a writer's keys end in
_<rank>_k), so they race on the same nodes and parent links, never on the same keys.
Victims also write the last pages of a conversation, which writers never do: nodes that
only a victim holds, so its removals delete nodes and unlink them from shared parents.

- writer: writes chains (batch_put_start, batch_put_end) and removes some of its objects
  (batch_remove) until the stop file appears; then prints a JSON summary with every
  error it saw and the keys it holds.
- victim: does the same with the keys of rank VICTIM_RANK, and logs one JSON line per
  call, until it is killed: by the test at a random moment ("external"), or by itself
  ("tripwire") at a random pipeline, after sending a random prefix of it (nothing, a cut
  command, or all of it) so the crash falls between or inside the steps of a batch; or
  right before its first put_end ("stall"), leaving objects processing.

    crash_client.py writer URL NAMESPACE RANK SEED STOP_FILE
    crash_client.py victim URL NAMESPACE SEED external|tripwire|stall LOG_FILE
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from helpers import page

from mooncake_redis import Index, Result

SYSTEM_PAGES = 3
CONVERSATIONS = 8
TURNS = 8
WRITER_TURNS = 6
SIZE = 100
VICTIM_RANK = 9

WRITER_ERRORS: dict[str, set[str]] = {
    "put_start": {"LinkContention"},
    "put_end": set(),
    "remove": set(),
}
"""What a writer may be told while victims crash beside it: nothing, except that a link
kept being fenced by deletions and the resolver racing it (it gave up after 4 sends;
nothing was written). Its own keys are touched by no one else."""

VICTIM_ERRORS: dict[str, set[str]] = {
    "put_start": {"ObjectAlreadyExists", "LinkContention"},
    "put_end": set(),
    "remove": {"ObjectNotFound", "InvalidObjectState"},
}
"""What a victim may be told: its keys may have been left by a killed victim, complete
(ObjectAlreadyExists) or processing (ObjectAlreadyExists until the discard timeout,
InvalidObjectState for a remove), or never stored (ObjectNotFound for a remove)."""


def system_chain() -> list[tuple[str, str | None]]:
    hashes = [page(f"system-{i}") for i in range(SYSTEM_PAGES)]
    return [(h, hashes[i - 1] if i else None) for i, h in enumerate(hashes)]


def conversation_chain(conversation: int, turns: int) -> list[tuple[str, str | None]]:
    """(page, parent) of a conversation's first `turns` pages, the system prompt first."""
    chain = system_chain()
    parent = chain[-1][0]
    for turn in range(turns):
        prefix_hash = page(f"conversation-{conversation}-{turn}")
        chain.append((prefix_hash, parent))
        parent = prefix_hash
    return chain


def tree() -> dict[str, str | None]:
    """Every page of the tree and its parent (None for the root)."""
    pages: dict[str, str | None] = {}
    for conversation in range(CONVERSATIONS):
        pages.update(conversation_chain(conversation, TURNS))
    return pages


def victim_only_pages() -> dict[str, str]:
    """The pages only victims write, and their parents: no writer ever links them."""
    pages: dict[str, str] = {}
    for conversation in range(CONVERSATIONS):
        chain = conversation_chain(conversation, TURNS)
        pages.update((h, parent) for h, parent in chain[SYSTEM_PAGES + WRITER_TURNS:]
                     if parent is not None)
    return pages


def key_of(prefix_hash: str, rank: int) -> str:
    return f"{prefix_hash}_{rank}_k"


def error_names(results: list[Result[None]]) -> Counter[str]:
    return Counter(type(r.error).__name__ for r in results if r.error is not None)


class Client:
    """A writer (or a victim) of one rank."""

    def __init__(self, index: Index, rank: int, seed: int):
        self.index = index
        self.rank = rank
        self.rng = random.Random(seed)
        self.stored: set[str] = set()
        self.errors: dict[str, Counter[str]] = {call: Counter() for call in WRITER_ERRORS}
        self.examples: list[str] = []
        self.calls = 0
        self.current = ""
        """The batch call running now."""
        self.call_started = False
        """No pipeline of the current call was started yet."""

    def step(self, report: Any = None) -> None:
        """A writer writes one conversation's chain (the keys it does not hold yet), then
        half of the time removes some of its keys of another conversation. A victim
        (report given) first removes some keys of the chain it is about to write, so its
        deletions and its links race the writers' on the same nodes."""
        rng = self.rng
        if report is None:
            chain = conversation_chain(rng.randrange(CONVERSATIONS), rng.randint(1, WRITER_TURNS))
        else:  # whole chains, whose last pages only victims write: removing them deletes
            # nodes and cascades up into the writers' nodes
            chain = conversation_chain(rng.randrange(CONVERSATIONS), TURNS)
            keys = [key_of(h, self.rank) for h, _ in chain[-3:]]
            self._call("remove", keys, lambda: self.index.batch_remove(keys), report)
        items = [(key_of(h, self.rank), SIZE, parent) for h, parent in chain
                 if key_of(h, self.rank) not in self.stored]
        started = self._call("put_start", [i[0] for i in items],
                             lambda: self.index.batch_put_start(items), report)
        done = self._call("put_end", started, lambda: self.index.batch_put_end(started),
                          report)
        if report is not None:
            return
        self.stored.update(done)
        if rng.random() < 0.5:
            pages = conversation_chain(rng.randrange(CONVERSATIONS), WRITER_TURNS)
            if rng.random() < 0.8:  # mostly conversation pages, sometimes the system prompt
                pages = pages[SYSTEM_PAGES:]
            keys = [key_of(h, self.rank) for h, _ in rng.sample(pages, rng.randint(1, 4))
                    if key_of(h, self.rank) in self.stored]
            removed = self._call("remove", keys, lambda: self.index.batch_remove(keys), report)
            self.stored.difference_update(removed)

    def _call(self, name: str, keys: list[str], call: Any, report: Any) -> list[str]:
        """Run one batch call; returns the keys it wrote. Errors are counted by kind."""
        if not keys:
            return []
        self.calls += 1
        if report is not None:
            report("call", name)
        self.current, self.call_started = name, True
        results: list[Result[None]] = call()
        self.current = ""
        assert [r.key for r in results] == keys
        errors = error_names(results)
        self.errors[name].update(errors)
        for r in results:
            if r.error is not None and len(self.examples) < 5:
                self.examples.append(f"{name} {r.key}: {type(r.error).__name__}: {r.error}")
        if report is not None:
            report("result", name, dict(errors))
        return [r.key for r in results if r.ok]


def writer(index: Index, rank: int, seed: int, stop: Path) -> dict[str, Any]:
    client = Client(index, rank, seed)
    print("ready", flush=True)
    while not stop.exists():
        client.step()
    index.close()
    return {"calls": client.calls, "stored": sorted(client.stored),
            "errors": {call: dict(c) for call, c in client.errors.items()},
            "examples": client.examples}


class Log:
    """A victim's log: one JSON line per event, flushed at once (it may die any moment)."""

    def __init__(self, path: Path):
        self.file = path.open("a")

    def __call__(self, *fields: Any) -> None:
        self.file.write(json.dumps(fields) + "\n")
        self.file.flush()


def install_tripwire(client: Client, rng: random.Random, log: Log, stall: bool = False) -> None:
    """Die by SIGKILL in a random batch call (put_start, put_end or remove), at its first
    pipeline half of the time (link + put_start steps; delete; put_end), else at a later
    one (settling unconfirmed links, a cycle walk, a level of a cascade), having sent a
    random prefix of that pipeline: nothing (the crash falls before this step), all of
    it (after this step, its replies unread), or, half of the time, a cut inside (the
    commands before the cut ran, the cut one never does). stall: die right before the
    first put_end, leaving what the first put_start wrote processing."""
    from mooncake_redis import executor

    original = executor.Pipeline.start.__func__  # type: ignore[attr-defined]
    target = rng.choices(["put_start", "put_end", "remove"], weights=[4, 1, 5])[0]
    call, pipeline = rng.randint(1, 3), rng.choice([1, 1, 2, 3])
    if stall:
        target, call, pipeline = "put_end", 1, 1
    calls = pipelines = 0

    def start(cls: Any, redis_client: Any, commands: list[tuple[Any, ...]], *rest: Any) -> Any:
        nonlocal calls, pipelines
        if client.current == target:
            if client.call_started:  # the first pipeline of the next call of the kind
                client.call_started = False
                calls, pipelines = calls + 1, 0
            pipelines += 1
            # a call with fewer pipelines than chosen: the first of a later call
            if (calls >= call and pipelines == pipeline) or (calls >= call + 3
                                                               and pipelines == 1):
                connection = redis_client.connection_pool.get_connection()
                if connection._sock is None:
                    connection.connect()
                payload = b"".join(bytes(part) for part in executor.pack(connection, commands))
                cut = 0 if stall else rng.choice([0, len(payload), rng.randrange(len(payload) + 1),
                                                  rng.randrange(len(payload) + 1)])
                connection._sock.sendall(payload[:cut])
                log("tripwire", target, pipelines, cut, len(payload))
                os.kill(os.getpid(), signal.SIGKILL)
        return original(cls, redis_client, commands, *rest)

    executor.Pipeline.start = classmethod(start)  # type: ignore[method-assign,assignment]


def victim(index: Index, seed: int, mode: str, log: Log) -> None:
    client = Client(index, VICTIM_RANK, seed)
    if mode in ("tripwire", "stall"):
        install_tripwire(client, random.Random(-seed), log, stall=mode == "stall")
    print("ready", flush=True)
    while True:
        client.step(report=log)


if __name__ == "__main__":
    role, url, namespace = sys.argv[1:4]
    index = Index.from_url(url, namespace=namespace)
    if role == "writer":
        print(json.dumps(writer(index, int(sys.argv[4]), int(sys.argv[5]), Path(sys.argv[6]))),
              flush=True)
    else:
        victim(index, int(sys.argv[4]), sys.argv[5], Log(Path(sys.argv[6])))  # until killed
