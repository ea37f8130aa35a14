"""Mooncake traces: parsing (a clear error with the line number for every malformed line),
page chains with parent links, and the prefix hashes the service will store them under."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from blake3 import blake3

from mooncake_redis.sim.trace.files import TraceFormatError, iter_trace
from mooncake_redis.sim.trace.pages import (
    NO_PARENT,
    build_page_trace,
    hash_chain_pages,
    prefix_hashes,
    read_page_trace,
    service_pages,
)
from mooncake_redis.sim.trace.synthesis import ChainShape, synthetic_chains, write_trace
from mooncake_redis.sim.trace.synthesis import main as synthesis_main

PUBLISHED_TRACE = Path(__file__).parents[1] / "data" / "mooncake_synthetic_trace_head.jsonl"
"""The first 200 requests of Mooncake's published synthetic trace (tests/data/README.md)."""


def _line(hash_ids: object, **fields: object) -> str:
    record = {"timestamp": 0, "input_length": 1024, "output_length": 3, "hash_ids": hash_ids}
    record.update(fields)
    return json.dumps(record)


def _write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_requests_are_read_in_order_with_their_lines_skipping_blank_ones(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path, _line([0, 1]), "", _line([0, 2], timestamp=40.5), "  ")
    requests = list(iter_trace(path))
    assert [(r.line, r.timestamp, r.hash_ids) for r in requests] == [
        (1, 0, (0, 1)), (3, 40.5, (0, 2))]
    assert (requests[0].input_length, requests[0].output_length) == (1024, 3)
    assert [r.line for r in iter_trace(path, limit=1)] == [1]


@pytest.mark.parametrize(
    ("bad_line", "problem"),
    [
        ('{"timestamp": 0, "hash_ids": [1, 2', "not JSON (Expecting"),
        ("[1, 2, 3]", "expected a JSON object, got list"),
        (json.dumps({"timestamp": 0, "input_length": 1}), "missing field output_length, hash_ids"),
        (_line("0,1,2"), "hash_ids is str, not a list"),
        (_line([7, "8"]), "hash_ids[1] '8' is not an integer"),
        (_line([7, 8.0]), "hash_ids[1] 8.0 is not an integer"),
        (_line([True]), "hash_ids[0] True is not an integer"),
        (_line([7], timestamp="noon"), "timestamp 'noon' is not a number"),
        (_line([7], input_length=-1), "input_length -1 is not a non-negative integer"),
        (_line([7], output_length=None), "output_length None is not a non-negative integer"),
    ],
)
def test_a_malformed_line_is_reported_with_its_file_and_line_number(
    tmp_path: Path, bad_line: str, problem: str
) -> None:
    path = _write(tmp_path, _line([0, 1]), _line([0, 2]), bad_line, _line([0, 3]))
    with pytest.raises(TraceFormatError) as error:
        read_page_trace(path)
    assert error.value.line == 3
    assert str(error.value).startswith(f"{path}:3: ")
    assert problem in str(error.value)


def test_bytes_that_are_not_utf8_are_reported_with_their_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_bytes((_line([0]) + "\n").encode() + b'{"timestamp": "\xff"}\n')
    with pytest.raises(TraceFormatError, match=r":2: .*utf-8"):
        list(iter_trace(path))


def test_nothing_past_the_limit_is_read(tmp_path: Path) -> None:
    path = _write(tmp_path, _line([0, 1]), _line([0, 2]), "not json at all")
    assert len(read_page_trace(path, limit=2).chains) == 2
    with pytest.raises(ValueError, match="limit must be at least 1"):
        list(iter_trace(path, limit=0))


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        ([[1, 2, 3], [5, 2]], "hash_ids[1] 2 follows id 5 here but id 1 on line 1"),
        ([[1, 2], [2, 9]], "hash_ids[0] 2 follows the start of the request here but id 1 on "
                           "line 1"),
        ([[4], [1, 4]], "hash_ids[1] 4 follows id 1 here but the start of the request on line 1"),
        ([[6, 6]], "hash_ids[1] 6 follows id 6 here but the start of the request on line 1"),
    ],
)
def test_an_id_must_always_follow_the_same_id(
    tmp_path: Path, lines: list[list[int]], problem: str
) -> None:
    path = _write(tmp_path, *(_line(ids) for ids in lines))
    with pytest.raises(TraceFormatError) as error:
        read_page_trace(path)
    assert error.value.line == len(lines)
    assert problem in str(error.value)


def test_pages_are_numbered_by_first_appearance_with_parent_links(tmp_path: Path) -> None:
    path = _write(tmp_path, _line([10, 11, 12]), _line([10, 11, 20]), _line([30]), _line([]),
                  _line([10, 11, 12, 13]))
    trace = read_page_trace(path)
    assert trace.chains == [(0, 1, 2), (0, 1, 3), (4,), (), (0, 1, 2, 5)]
    assert trace.parents == [NO_PARENT, 0, 1, 1, NO_PARENT, 2]
    assert trace.block_ids == [10, 11, 12, 20, 30, 13]
    assert (trace.distinct_pages, trace.requested_pages, trace.page_tokens) == (6, 11, 512)
    assert all(parent < page for page, parent in enumerate(trace.parents))


def test_service_pages_carry_the_prefix_hash_of_their_ids_and_their_parents(
    tmp_path: Path,
) -> None:
    trace = read_page_trace(_write(tmp_path, _line([0, 1, 2]), _line([0, 1, 9])))
    pages = service_pages(trace)

    def prefix_hash(*ids: int) -> str:
        return blake3(",".join(map(str, ids)).encode()).hexdigest()

    assert pages.hashes == prefix_hashes(trace) == [
        prefix_hash(0), prefix_hash(0, 1), prefix_hash(0, 1, 2), prefix_hash(0, 1, 9)]
    assert [pages.parent_hash(page) for page in range(4)] == [
        None, prefix_hash(0), prefix_hash(0, 1), prefix_hash(0, 1)]
    assert len(prefix_hash(0)) == 64


def test_chains_of_prefix_hashes_are_numbered_as_trace_pages() -> None:
    a, b, c, d = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)
    pages = hash_chain_pages([[a, b], [a, b, c], [d]], "hashes", page_tokens=16)
    assert pages.trace.chains == [(0, 1), (0, 1, 2), (3,)]
    assert pages.trace.parents == [NO_PARENT, 0, 1, NO_PARENT]
    assert pages.hashes == [a, b, c, d] and pages.trace.page_tokens == 16
    assert [pages.parent_hash(page) for page in range(4)] == [None, a, b, None]
    with pytest.raises(ValueError, match="equal ids must have equal prefixes"):
        hash_chain_pages([[a, b], [c, b]], "hashes", page_tokens=16)


def test_synthetic_traces_round_trip_through_the_reader(tmp_path: Path) -> None:
    shape = ChainShape(system_prompts=2, new_pages=(0, 3), branch=0.5)
    chains = synthetic_chains(300, seed=3, shape=shape)
    assert chains == synthetic_chains(300, seed=3, shape=shape)
    path = tmp_path / "synthetic.jsonl"
    write_trace(path, chains)
    trace = build_page_trace(iter_trace(path), str(path))
    assert [[trace.block_ids[page] for page in chain] for chain in trace.chains] == chains
    assert trace.distinct_pages == len({page for chain in chains for page in chain})


def test_the_published_synthetic_trace_reads_as_documented() -> None:
    trace = read_page_trace(PUBLISHED_TRACE)
    assert len(trace.chains) == 200
    assert (trace.requested_pages, trace.distinct_pages) == (5_330, 5_007)
    assert sum(parent == NO_PARENT for parent in trace.parents) == 190
    requests = [json.loads(line) for line in PUBLISHED_TRACE.read_text().splitlines()]
    chains = [request["hash_ids"] for request in requests]  # the same, read plainly
    assert [[trace.block_ids[page] for page in chain] for chain in trace.chains] == chains
    assert trace.distinct_pages == len({block for chain in chains for block in chain})
    assert sum(parent == NO_PARENT for parent in trace.parents) == len({c[0] for c in chains})


def test_the_generator_command_writes_a_trace_of_the_asked_shape(tmp_path: Path) -> None:
    out = tmp_path / "generated.jsonl"
    assert synthesis_main([str(out), "--requests", "200", "--system-prompts", "1",
                           "--system-prompt-pages", "5,5", "--follow-up", "0"]) == 0
    trace = read_page_trace(out)
    assert len(trace.chains) == 200
    assert {trace.chains[0][:5]} == {chain[:5] for chain in trace.chains}  # the one prompt
    with pytest.raises(SystemExit):
        synthesis_main([str(out), "--new-pages", "3,1"])
