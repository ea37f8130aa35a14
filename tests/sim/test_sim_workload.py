"""The chat workload: deterministic per seed, causal, and its page chains are Mooncake-shaped."""

from __future__ import annotations

import hashlib
import itertools

import pytest

from mooncake_redis.sim.indexes.runner import working_set_keys
from mooncake_redis.sim.indexes.workload import (
    SYSTEM_PROMPT_SEQUENCE,
    SpanKind,
    WorkloadConfig,
    generate_workload,
    page_chains,
)

SMALL = WorkloadConfig(
    sessions=3, turns=3, system_prompt_tokens=20, question_tokens=8, answer_tokens=10, seed=11
)


def test_the_same_seed_gives_the_same_workload_and_another_seed_does_not() -> None:
    first, again = generate_workload(SMALL), generate_workload(SMALL)
    assert first == again
    other = generate_workload(WorkloadConfig(**{**SMALL.__dict__, "seed": 12}))
    assert other.spans != first.spans and other.session_tokens != first.session_tokens


def test_every_read_is_of_positions_already_written() -> None:
    written: set[tuple[int, int]] = set()
    for span in generate_workload(SMALL).spans:
        positions = {(span.sequence, position) for position in range(span.start, span.end)}
        if span.kind is SpanKind.WRITE:
            assert not positions & written, "a position is written twice"
            written |= positions
        elif span.kind is SpanKind.READ:
            assert positions <= written
            assert span.start < span.end


def test_each_turn_asks_reads_and_answers_its_question_in_order() -> None:
    workload = generate_workload(SMALL)
    asked = [s for s in workload.spans if s.kind is SpanKind.QUESTION_ASKED]
    answered = [s for s in workload.spans if s.kind is SpanKind.QUESTION_ANSWERED]
    assert len(asked) == len(answered) == SMALL.sessions * SMALL.turns
    assert [(s.sequence, s.start, s.end) for s in asked] == [
        (s.sequence, s.start, s.end) for s in answered
    ]
    for span in asked:
        assert SMALL.question_tokens // 2 <= span.end - span.start <= SMALL.question_tokens * 3 // 2
    system_reads = [
        s for s in workload.spans
        if s.kind is SpanKind.READ and s.sequence == SYSTEM_PROMPT_SEQUENCE
    ]
    assert all((s.start, s.end) == (0, SMALL.system_prompt_tokens) for s in system_reads)


def test_working_set_counts_every_distinct_entry_once() -> None:
    workload = generate_workload(SMALL)
    keys = list(working_set_keys(workload))
    assert len(keys) == len(set(keys)) == workload.working_set_entries
    assert workload.working_set_entries == workload.distinct_positions * SMALL.layers * SMALL.heads


def test_page_chains_hash_token_prefixes_page_by_page() -> None:
    workload = generate_workload(SMALL)
    chains = page_chains(workload, page_tokens=4)
    assert len(chains) == SMALL.sessions
    for session, requests in enumerate(chains):
        assert len(requests) == SMALL.turns
        tokens = workload.system_prompt + workload.session_tokens[session]
        for request, end in zip(requests, workload.request_ends[session]):
            assert len(request) == end // 4
            assert all(len(page) == 64 and int(page, 16) >= 0 for page in request)
            last = len(request) * 4
            expected_last = hashlib.sha256(
                b"".join(token.to_bytes(4, "little") for token in tokens[:last])
            ).hexdigest()
            assert request[-1] == expected_last
        # A later request of the session extends the earlier one's chain.
        for earlier, later in itertools.pairwise(requests):
            assert later[: len(earlier)] == earlier
    # The shared system prompt gives every session the same first pages (prefix sharing) ...
    shared_pages = SMALL.system_prompt_tokens // 4
    assert len({tuple(requests[0][:shared_pages]) for requests in chains}) == 1
    # ... and their own turns diverge right after it.
    assert len({requests[0][shared_pages] for requests in chains}) == SMALL.sessions


def test_page_chains_reject_an_empty_page() -> None:
    with pytest.raises(ValueError, match="page_tokens"):
        page_chains(generate_workload(SMALL), page_tokens=0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("sessions", 0, "sessions must be an integer >= 1"),
        ("layers", 1001, "layers must be at most"),
        ("references_per_token", -1, "references_per_token must be an integer >= 0"),
        ("turns", 40_000, "more than the key schema"),
    ],
)
def test_bad_configs_name_the_field(field: str, value: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WorkloadConfig(**{field: value})
