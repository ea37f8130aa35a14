"""A deterministic multi-turn chat workload: which KV positions are written and read, in order."""

from __future__ import annotations

import enum
import hashlib
import random
from dataclasses import dataclass, fields
from typing import NamedTuple

from mooncake_redis.sim.indexes.keys import MAX_HEAD, MAX_LAYER, MAX_POSITION, MAX_SEQUENCE

SYSTEM_PROMPT_SEQUENCE = 0
"""Sequence number of the system prompt, whose KV every session shares (prefix caching)."""

DEFAULT_PAGE_TOKENS = 16
"""Tokens per KV-cache page in page chains (SGLang and Mooncake use 16 to 64)."""

_TOKEN_ID_BYTES = 4
MAY_BE_ZERO = frozenset({"references_per_token", "recent_window_tokens", "seed"})
"""WorkloadConfig fields for which 0 is valid; every other field must be at least 1."""


class SpanKind(enum.Enum):
    """What happens to a span of positions of one sequence (in every layer and head)."""

    WRITE = "write"  # new tokens' KV is produced and stored
    READ = "read"  # attention reads the stored KV: a hit or a miss
    QUESTION_ASKED = "question-asked"  # the span is now the current user question
    QUESTION_ANSWERED = "question-answered"  # the span is no longer the current question


class Span(NamedTuple):
    """Positions start <= p < end of one sequence."""

    kind: SpanKind
    sequence: int
    start: int
    end: int


@dataclass(frozen=True)
class WorkloadConfig:
    """The shape of the chat workload; lengths are means, each turn draws from mean/2..3*mean/2."""

    sessions: int = 8
    turns: int = 4
    system_prompt_tokens: int = 32
    question_tokens: int = 16
    answer_tokens: int = 24
    layers: int = 2
    heads: int = 2
    references_per_token: int = 2
    reference_tokens: int = 4
    recent_window_tokens: int = 4
    vocabulary_size: int = 32_000
    seed: int = 0

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            minimum = 0 if field.name in MAY_BE_ZERO else 1
            if not isinstance(value, int) or value < minimum:
                raise ValueError(f"{field.name} must be an integer >= {minimum}, got {value!r}")
        limits = {
            "sessions": MAX_SEQUENCE,
            "layers": MAX_LAYER + 1,
            "heads": MAX_HEAD + 1,
            "vocabulary_size": 2 ** (8 * _TOKEN_ID_BYTES),
        }
        for name, limit in limits.items():
            if getattr(self, name) > limit:
                raise ValueError(f"{name} must be at most {limit}, got {getattr(self, name)}")
        longest_context = self.system_prompt_tokens + self.turns * 3 * (
            self.question_tokens + self.answer_tokens
        ) // 2
        if longest_context > MAX_POSITION:
            raise ValueError(
                f"a session may reach {longest_context} tokens, more than the key schema's "
                f"{MAX_POSITION}: lower turns or token lengths"
            )


@dataclass(frozen=True)
class Workload:
    """A generated workload: the span trace plus the token ids behind it."""

    config: WorkloadConfig
    spans: list[Span]
    system_prompt: list[int]
    session_tokens: list[list[int]]
    """Per session, the token ids after the system prompt (position = system length + index)."""
    request_ends: list[list[int]]
    """Per session, the context length (system prompt included) after each turn."""

    @property
    def distinct_positions(self) -> int:
        """(sequence, position) pairs ever written: the working set, per layer and head."""
        return len(self.system_prompt) + sum(len(tokens) for tokens in self.session_tokens)

    @property
    def working_set_entries(self) -> int:
        """Distinct KV entries the workload touches: every position in every layer and head."""
        return self.distinct_positions * self.config.layers * self.config.heads


def _varied_length(rng: random.Random, mean: int) -> int:
    return rng.randint(max(1, mean // 2), mean + mean // 2)


def _interleaved_turn_order(rng: random.Random, sessions: int, turns: int) -> list[int]:
    """Sessions take turns in random order, like users of one server; each keeps its own order."""
    remaining = [turns] * sessions
    order = []
    while any(remaining):
        session = rng.choice([index for index, left in enumerate(remaining) if left])
        remaining[session] -= 1
        order.append(session)
    return order


def generate_workload(config: WorkloadConfig) -> Workload:
    """The trace of one run; the same config (seed included) gives the same trace."""
    rng = random.Random(config.seed)
    system_length = config.system_prompt_tokens
    system_prompt = [rng.randrange(config.vocabulary_size) for _ in range(system_length)]
    spans = [Span(SpanKind.WRITE, SYSTEM_PROMPT_SEQUENCE, 0, system_length)]
    session_tokens: list[list[int]] = [[] for _ in range(config.sessions)]
    request_ends: list[list[int]] = [[] for _ in range(config.sessions)]
    for session in _interleaved_turn_order(rng, config.sessions, config.turns):
        sequence = session + 1
        question_start = system_length + len(session_tokens[session])
        question_end = question_start + _varied_length(rng, config.question_tokens)
        answer_end = question_end + _varied_length(rng, config.answer_tokens)
        system_read = Span(SpanKind.READ, SYSTEM_PROMPT_SEQUENCE, 0, system_length)
        question_read = Span(SpanKind.READ, sequence, question_start, question_end)
        spans.append(Span(SpanKind.QUESTION_ASKED, sequence, question_start, question_end))
        # Prefill: the prompt attends to the system prompt and the whole history.
        spans.append(system_read)
        if question_start > system_length:
            spans.append(Span(SpanKind.READ, sequence, system_length, question_start))
        spans.append(Span(SpanKind.WRITE, sequence, question_start, question_end))
        for position in range(question_end, answer_end):
            # Decode: each new token re-reads the system prompt and the question, looks back
            # at a few spans of earlier turns and at the tokens it has just written.
            spans.append(system_read)
            spans.append(question_read)
            history = question_start - system_length
            for _ in range(config.references_per_token if history else 0):
                length = min(config.reference_tokens, history)
                start = system_length + rng.randrange(history - length + 1)
                spans.append(Span(SpanKind.READ, sequence, start, start + length))
            window_start = max(question_end, position - config.recent_window_tokens)
            if window_start < position:
                spans.append(Span(SpanKind.READ, sequence, window_start, position))
            spans.append(Span(SpanKind.WRITE, sequence, position, position + 1))
        spans.append(Span(SpanKind.QUESTION_ANSWERED, sequence, question_start, question_end))
        new_tokens = answer_end - question_start
        session_tokens[session].extend(
            rng.randrange(config.vocabulary_size) for _ in range(new_tokens)
        )
        request_ends[session].append(answer_end)
    return Workload(config, spans, system_prompt, session_tokens, request_ends)


def page_chains(workload: Workload,
                page_tokens: int = DEFAULT_PAGE_TOKENS) -> list[list[list[str]]]:
    """The workload as Mooncake would store it: per session, per request (turn), the page hashes.

    A request's tokens are its whole context after the turn (system prompt, history, question,
    answer); only full pages are hashed. A page's hash is the sha256 hex digest of the token
    ids (4-byte little-endian each) of the prefix up to and including that page, so equal
    prefixes give equal hashes across sessions, and each page's parent is the page before it.
    """
    if page_tokens < 1:
        raise ValueError(f"page_tokens must be at least 1, got {page_tokens}")
    chains = []
    for tokens_after_system, ends in zip(workload.session_tokens, workload.request_ends):
        tokens = workload.system_prompt + tokens_after_system
        # Every request of a session extends the previous one, so hash the longest once.
        prefix_hash = hashlib.sha256()
        page_hashes = []
        for page_end in range(page_tokens, len(tokens) + 1, page_tokens):
            page = tokens[page_end - page_tokens : page_end]
            prefix_hash.update(
                b"".join(token.to_bytes(_TOKEN_ID_BYTES, "little") for token in page))
            page_hashes.append(prefix_hash.copy().hexdigest())
        chains.append([page_hashes[: end // page_tokens] for end in ends])
    return chains
