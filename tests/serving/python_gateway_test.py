"""The Python module against a training cluster's gateway (started by gateway_test).

argv: gateway table learning_rate. The store's table uses SGD from zeros.
Exit 0: passed; 77: torch missing (the push checks still ran); else failed.
"""
import os
import sys

import numpy as np

import strata_client

gateway, table, lr = sys.argv[1], sys.argv[2], float(sys.argv[3])
c = strata_client.Client([gateway])
keys = np.array([501, 502, 501], dtype=np.uint64)
before = c.lookup(table, keys)
dim = before.shape[1]
grads = np.arange(3 * dim, dtype=np.float32).reshape(3, dim) / 8
c.push(table, keys, grads)
after = c.lookup(table, keys)
# Duplicates summed: key 501 got rows 0 and 2.
assert np.allclose(after[0], before[0] - lr * (grads[0] + grads[2])), (after[0], before[0])
assert np.allclose(after[1], before[1] - lr * grads[1]), (after[1], before[1])
assert np.array_equal(after[0], after[2])
try:
    c.push(table, keys, grads[:2])
    raise AssertionError("a push with fewer gradient rows than keys must raise")
except ValueError as e:
    assert "one row per key" in str(e), e
# A push id (issue 15 item 5): the same id twice is applied once.
k503 = np.array([503], dtype=np.uint64)
one = np.ones((1, dim), dtype=np.float32)
c.push(table, k503, one, id=9001)
c.push(table, k503, one, id=9001)
assert c.last_push_id == 9001, c.last_push_id
assert np.allclose(c.lookup(table, k503)[0], -lr * one[0]), c.lookup(table, k503)
c.push(table, k503, one)  # a fresh id: applied
assert c.last_push_id not in (0, 9001), c.last_push_id
assert np.allclose(c.lookup(table, k503)[0], -2 * lr * one[0]), c.lookup(table, k503)
print("push checks passed")

try:
    import torch  # noqa: F401
except ImportError:
    print("SKIP: python3-torch is not installed (deploy/install-deps.sh --bench)")
    sys.exit(77)
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "docs"))
import strata_torch_example

losses = strata_torch_example.train_embeddings(gateway, table,
                                               np.arange(1000, 1064, dtype=np.uint64))
print("losses", losses[0], losses[-1])
assert losses[-1] < 0.7 * losses[0], losses
print("torch training of strata embeddings passed")
