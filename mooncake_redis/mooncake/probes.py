"""Existence checks: is_exist / batch_is_exist (a read lease, as Mooncake's master grants
one) and Mooncake 0.3.14's lease-free probes, probe_key / batch_probe_key.

batch_probe_key(keys, policy, candidate_size), as 0.3.14 answers (measured on its client
and master): one result per key, 1 stored and complete, 0 not, negative on error.
policy "none" grants no lease. "LastHitOnly" cuts the keys into consecutive groups of
candidate_size and leases the keys of the last group whose results are all 1 (none if no
group is): an engine probing candidate prefixes keeps the longest one it will read. Keys
whose count is not a multiple of candidate_size, or a candidate_size of 0 with
LastHitOnly: INVALID_PARAMS for every key. Any other policy name raises ValueError.
Here the probe and the lease are two round trips: a key evicted in between loses its 1
(Mooncake's docs warn of leases left on failed candidates after a concurrent eviction).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..index import Index
from .checks import check_keys, instance_or_default, uint64
from .codes import ErrorCode
from .records import ExistOptions
from .state import StoreCore

POLICIES = ("none", "LastHitOnly")


def leased_group(results: Sequence[int], candidate_size: int) -> range:
    """The positions LastHitOnly leases: the last group of candidate_size consecutive
    results that are all 1 (empty if none is)."""
    for start in range(len(results) - candidate_size, -1, -candidate_size):
        if all(result == 1 for result in results[start:start + candidate_size]):
            return range(start, start + candidate_size)
    return range(0)


class ProbeMethods:
    def is_exist(self: StoreCore, key: str, options: ExistOptions | None = None) -> int:
        """1 stored, 0 not (as Mooncake's master does, a probe grants a read lease), or a
        negative code. options (0.3.14): prefetch_to_memory is accepted (every replica
        is a file here: nothing to promote)."""
        return ProbeMethods._exist(self, check_keys([key]), options, lease=None)[0]

    def batch_is_exist(self: StoreCore, keys: Sequence[str],
                       options: ExistOptions | None = None) -> list[int]:
        return ProbeMethods._exist(self, check_keys(keys), options, lease=None)

    def probe_key(self: StoreCore, key: str) -> int:
        """is_exist without a read lease (0.3.14): 1 if the object was stored at the time
        of the call (it may be evicted before a get), 0 if not, or a negative code."""
        return ProbeMethods._exist(self, check_keys([key]), None, lease=False)[0]

    def batch_probe_key(self: StoreCore, keys: Sequence[str], policy: str = "none",
                        candidate_size: int = 1) -> list[int]:
        """probe_key for many, with a lease policy (module docstring)."""
        keys = check_keys(keys)
        if not isinstance(policy, str):
            raise TypeError(f"policy must be a str, got {type(policy).__name__}")
        candidate_size = uint64(candidate_size, "candidate_size")
        if policy not in POLICIES:
            raise ValueError(f"Unknown batch_probe_key policy: {policy}")
        if not keys:
            return []
        if policy == "LastHitOnly" and (not candidate_size or len(keys) % candidate_size):
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        results = ProbeMethods._exist(self, keys, None, lease=False)
        if policy == "LastHitOnly":
            group = leased_group(results, candidate_size)
            if group:
                leased = ProbeMethods._exist(self, [keys[i] for i in group], None, lease=True)
                for position, result in zip(group, leased):
                    results[position] = result
        return results

    def _exist(self: StoreCore, keys: list[str], options: ExistOptions | None,
               lease: bool | None) -> list[int]:
        instance_or_default(options, ExistOptions, "options")
        with self._lock:
            asked = self._ask(keys, lambda index, valid: Index.batch_is_exist(
                index, valid, lease))
            if isinstance(asked, int):
                return [asked] * len(keys)
            present = dict(zip(*asked))
            return [int(present.get(key, False)) for key in keys]
