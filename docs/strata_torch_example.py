"""A PyTorch model whose embedding layer is backed by strata serving.

Run (with a serving node up, see docs/serving.md):
    PYTHONPATH=build/python /usr/bin/python3 docs/strata_torch_example.py 127.0.0.1:7100 ads

StrataEmbedding looks the batch's keys up in strata in forward() (one
binary-protocol request per batch, rows as a float32 tensor without a copy).
backward() hands the embedding gradients to `push` when one is given
(training-cluster pushes in async mode; the serving client has none, see
docs/serving.md, "Not done"); without it the strata rows act as frozen
features and the layers above them train, as below.
"""
import sys

import numpy as np
import torch
from torch import nn

import strata_client


class _Lookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, anchor, client, table, keys, push):
        rows = client.lookup(table, keys)  # (n, dim) float32, owned by the array
        ctx.keys, ctx.push, ctx.table = keys, push, table
        return torch.from_numpy(rows)

    @staticmethod
    def backward(ctx, grad):
        if ctx.push is not None:
            ctx.push(ctx.table, ctx.keys, grad.detach().numpy())
        return None, None, None, None, None


class StrataEmbedding(nn.Module):
    """Embedding rows served by strata: forward = lookup, backward = push (if given)."""

    def __init__(self, client, table, push=None):
        super().__init__()
        self.client, self.table, self.push = client, table, push
        # A zero-size parameter ties the lookup into autograd.
        self.anchor = nn.Parameter(torch.zeros(0))

    def forward(self, keys):
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        return _Lookup.apply(self.anchor, self.client, self.table, keys, self.push)


class CtrModel(nn.Module):
    def __init__(self, client, table, dim, slots):
        super().__init__()
        self.embedding = StrataEmbedding(client, table)
        self.slots = slots
        self.mlp = nn.Sequential(nn.Linear(dim * slots, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, keys):  # keys: (batch, slots) uint64
        rows = self.embedding(keys.reshape(-1))
        return self.mlp(rows.reshape(keys.shape[0], -1)).squeeze(1)


def train(replica, table, keys, steps=30, seed=0):
    """Trains CtrModel a few steps on labels planted from the served rows; returns the losses."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    client = strata_client.Client([replica])
    dim = client.lookup(table, keys[:1]).shape[1]
    slots = 2
    model = CtrModel(client, table, dim, slots)
    batch = rng.choice(keys, size=(64, slots))
    # Labels a function of the served rows: learnable only through them.
    rows = client.lookup(table, batch.reshape(-1)).reshape(64, -1)
    labels = torch.from_numpy((rows.sum(axis=1) > np.median(rows.sum(axis=1))).astype(np.float32))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    loss_fn = nn.BCEWithLogitsLoss()
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_fn(model(batch), labels)
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return losses


if __name__ == "__main__":
    replica, table = sys.argv[1], sys.argv[2]
    keys = np.array([int(k) for k in sys.argv[3:]] or list(range(1000, 1100)), dtype=np.uint64)
    losses = train(replica, table, keys)
    print("loss: first %.4f last %.4f" % (losses[0], losses[-1]))
