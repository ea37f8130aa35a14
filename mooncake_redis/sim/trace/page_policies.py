"""Eviction policies for page chains, as sort keys: the evictable page with the smallest
score goes first. They keep state for cached pages only (`forget` drops an evicted one)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from mooncake_redis.sim.indexes.policies import (
    BlockHeatPolicy,
    LruPolicy,
    PrefixProtectedLruPolicy,
    heat_after_use,
)


class PagePolicy(ABC):
    """Told of every use of a cached page, in the order the engine reports them; a use is
    one tick of the policy's clock."""

    name: ClassVar[str]

    def __init__(self) -> None:
        self._ticks = 0

    def start_request(self) -> None:  # noqa: B027 (an optional hook)
        """A request begins: the offline optimum counts them, to know which comes next."""

    @abstractmethod
    def record_use(self, page: int) -> float:
        """A request used `page` (a hit, or the page it just stored); returns its new score."""

    @abstractmethod
    def score(self, page: int) -> float:
        """The page's sort key now; it changes only when the page is used."""

    @abstractmethod
    def forget(self, page: int) -> None:
        """`page` was evicted: its history goes with it."""


class PageLruPolicy(PagePolicy):
    """Least recently used first."""

    name = LruPolicy.name

    def __init__(self) -> None:
        super().__init__()
        self._last_use: dict[int, int] = {}

    def record_use(self, page: int) -> float:
        self._ticks += 1
        self._last_use[page] = self._ticks
        return self._ticks

    def score(self, page: int) -> float:
        return self._last_use[page]

    def forget(self, page: int) -> None:
        del self._last_use[page]


class PagePrefixProtectedPolicy(PageLruPolicy):
    """LRU that spares shared prefixes while anything else is left.

    The page analogue of protecting the system prompt: a page two or more requests have
    used since it was cached is a prefix they share, and is evicted only when no unshared
    page is evictable. (A request's own pages are never evicted while it stores the rest of
    its chain, under every policy: the engine holds them, as SGLang's lock_ref does.)"""

    name = PrefixProtectedLruPolicy.name

    SHARED_USES = 2
    _PROTECTED = 2**62  # above any tick: every shared page sorts after every unshared one

    def __init__(self) -> None:
        super().__init__()
        self._uses: dict[int, int] = {}

    def record_use(self, page: int) -> float:
        super().record_use(page)
        self._uses[page] = self._uses.get(page, 0) + 1
        return self.score(page)

    def score(self, page: int) -> float:
        shared = self._uses[page] >= self.SHARED_USES
        return self._last_use[page] + (self._PROTECTED if shared else 0)

    def forget(self, page: int) -> None:
        super().forget(page)
        del self._uses[page]


class PageBlockHeatPolicy(PagePolicy):
    """Coldest first: heat is a use count that halves every `half_life_uses` uses, as in the
    synthetic sim's block-heat (heat_after_use), with the trace's 512-token pages as the
    blocks. It changes only when the page is used."""

    name = BlockHeatPolicy.name

    def __init__(self, half_life_uses: int = 4096) -> None:
        super().__init__()
        if half_life_uses < 1:
            raise ValueError(f"half_life_uses must be at least 1, got {half_life_uses}")
        self._half_life = float(half_life_uses)
        self._log_heat: dict[int, float] = {}

    def record_use(self, page: int) -> float:
        self._ticks += 1
        heat = self._log_heat[page] = heat_after_use(self._log_heat.get(page),
                                                     self._ticks / self._half_life)
        return heat

    def score(self, page: int) -> float:
        return self._log_heat[page]

    def forget(self, page: int) -> None:
        del self._log_heat[page]


PAGE_POLICY_NAMES = (PageLruPolicy.name, PagePrefixProtectedPolicy.name,
                     PageBlockHeatPolicy.name)
