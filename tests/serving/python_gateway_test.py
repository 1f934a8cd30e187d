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
