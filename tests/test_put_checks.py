"""batch_put_start checks a well-formed batch as lists (keys split at once, parents and
linked nodes as one list each) and a batch with a bad item item by item: whatever the
checks' order, the first bad item of the batch raises its own error."""

from __future__ import annotations

from itertools import count, permutations

import pytest
from helpers import page

from mooncake_redis import Index, InvalidArgument

A, B = page("checks-A"), page("checks-B")
_names = count()

BAD_SIZE = ("size must be >= 0", (f"{A}_0_k", -1, None))
BAD_KEY = ("object key must not be empty", ("", 1, None))
BAD_PARENT = ("is not a prefix hash", (f"{B}_0_k", 1, A[:40]))
UNLINKABLE = ("has no prefix hash", ("plain-key", 1, A))
BAD_ITEMS = [BAD_SIZE, BAD_KEY, BAD_PARENT, UNLINKABLE]


@pytest.mark.parametrize(("first", "second"), list(permutations(BAD_ITEMS, 2)),
                         ids=lambda bad: bad[0])
def test_the_first_bad_item_raises_its_own_error(first, second) -> None:
    index = Index.from_url(f"memory://put-checks-{next(_names)}")
    good = [(f"{page(f'checks-{n}')}_0_k", 1, B) for n in range(2)]
    with pytest.raises(InvalidArgument, match=first[0]):
        index.batch_put_start([good[0], first[1], good[1][:2], second[1]])
    assert index.usage().objects == 0
