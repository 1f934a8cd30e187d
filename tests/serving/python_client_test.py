"""The Python module against a live serving node (started by serving_server_test).

argv: replica table expected.json  where expected.json maps key -> [version, [row]].
Exit 0: passed; 77: torch missing (the lookup checks still ran); else failed.
"""
import json
import os
import sys

import numpy as np

import strata_client

replica, table, expected_path = sys.argv[1:4]
expected = {int(k): v for k, v in json.load(open(expected_path)).items()}
keys = np.array(sorted(expected)[:50] + [7, sorted(expected)[0]], dtype=np.uint64)

c = strata_client.Client([replica])
rows, versions = c.lookup_with_versions(table, keys)
assert rows.dtype == np.float32 and rows.shape[0] == len(keys), (rows.dtype, rows.shape)
for i, k in enumerate(keys):
    if int(k) in expected:
        version, row = expected[int(k)]
        assert int(versions[i]) == version, (k, versions[i], version)
        assert np.array_equal(rows[i], np.array(row, dtype=np.float32)), (k, rows[i], row)
    else:
        assert int(versions[i]) == 0 and not rows[i].any(), (k, rows[i])
assert np.array_equal(rows[-1], rows[0]), "a repeated key must get the same row"
assert c.lookup(table, np.array([], dtype=np.uint64)).shape[0] == 0
c.prefetch(table, keys)
try:
    c.lookup("no-such-table", keys)
    raise AssertionError("an unknown table must raise")
except ValueError as e:
    assert "unknown table" in str(e), e
print("lookup checks passed")

try:
    import torch  # noqa: F401
except ImportError:
    print("SKIP: python3-torch is not installed (deploy/install-deps.sh --bench)")
    sys.exit(77)
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "docs"))
import strata_torch_example

losses = strata_torch_example.train(replica, table, np.array(sorted(expected), dtype=np.uint64))
print("losses", losses[0], losses[-1])
assert losses[-1] < 0.8 * losses[0], losses
print("torch training through strata passed")
