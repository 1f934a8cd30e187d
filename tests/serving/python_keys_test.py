"""strata_client.key(), tables() and keys() against a live serving node
(started by key_lookup_test after a tiny count-objective training run).

argv: replica table slot value expected_key. Exit 0: passed.
"""
import sys

import numpy as np

import strata_client

replica, table, slot, value, expected_key = sys.argv[1:6]
expected_key = int(expected_key)

# The C++ function: the same key as `strata key` and the reader.
assert strata_client.key(slot, value) == expected_key, (strata_client.key(slot, value), expected_key)
assert strata_client.key(13, "68fd1e64") == strata_client.key("C1", "68fd1e64")
assert strata_client.key("C1", "68fd1e64") == 0x2DA8351397FAB253  # features_test's golden vector
assert strata_client.key("I1", 1000) == strata_client.key(0, 1000) == 0x2BF6E1B0FE6C450B
try:
    strata_client.key("C27", "x")
    raise AssertionError("an unknown slot must raise")
except ValueError as e:
    assert "unknown slot 'C27'" in str(e), e

c = strata_client.Client([replica])
tables = c.tables()
assert [t["name"] for t in tables] == [table], tables
dim = tables[0]["dim"]

# The key of a value seen in training is a stored row (version != 0).
rows, versions = c.lookup_with_versions(table, np.array([expected_key], dtype=np.uint64))
assert rows.shape == (1, dim) and versions[0] != 0, (rows, versions)
assert rows[0][0] >= 1, rows  # objective count: sightings

keys = c.keys(table, 5)
assert keys.dtype == np.uint64 and keys.shape == (5,), keys
_, versions = c.lookup_with_versions(table, keys)
assert (versions != 0).all(), versions
assert len(c.keys(table)) == 10  # the default limit
for bad in (0, 1001):
    try:
        c.keys(table, bad)
        raise AssertionError("limit %d must raise" % bad)
    except ValueError as e:
        assert "outside 1..1000" in str(e), e
try:
    c.keys("nope", 5)
    raise AssertionError("an unknown table must raise")
except ValueError as e:
    assert "unknown table 'nope'" in str(e), e
print("python keys checks passed")
