"""A PyTorch model whose embedding layer is backed by strata.

Run against a serving node (frozen embeddings, the layers above train):
    PYTHONPATH=build/python /usr/bin/python3 docs/strata_torch_example.py 127.0.0.1:7100 ads
or against a training cluster's gateway (manifest: gateway.port; async
mode), where the embeddings train in strata:
    PYTHONPATH=build/python /usr/bin/python3 docs/strata_torch_example.py --push 127.0.0.1:7300 emb

StrataEmbedding looks the batch's keys up in strata in forward() (one
binary-protocol request per batch, rows as a float32 tensor without a copy).
backward() hands the embedding gradients to `push` when one is given
(client.push: the cluster's shards apply them with the table's optimizer,
summed over duplicate keys, before the call returns); without it the strata
rows act as frozen features.
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


def train_embeddings(gateway, table, keys, steps=40, seed=0):
    """Trains only the strata rows, through a gateway: logit = sum of the key's row.

    Labels are random per key, so the loss can only fall if every step's
    gradients reach strata (push) and the next lookup sees the updated rows.
    Returns the losses.
    """
    rng = np.random.default_rng(seed)
    client = strata_client.Client([gateway])
    embedding = StrataEmbedding(client, table, push=client.push)
    labels = torch.from_numpy(rng.integers(0, 2, size=len(keys)).astype(np.float32))
    loss_fn = nn.BCEWithLogitsLoss(reduction="sum")
    losses = []
    for _ in range(steps):
        logits = embedding(keys).sum(dim=1)
        loss = loss_fn(logits, labels)
        loss.backward()  # pushes d(loss)/d(rows) to strata
        losses.append(float(loss) / len(keys))
    return losses


if __name__ == "__main__":
    args = sys.argv[1:]
    push = bool(args) and args[0] == "--push"
    if push:
        args = args[1:]
    replica, table = args[0], args[1]
    keys = np.array([int(k) for k in args[2:]] or list(range(1000, 1100)), dtype=np.uint64)
    losses = train_embeddings(replica, table, keys) if push else train(replica, table, keys)
    print("loss: first %.4f last %.4f" % (losses[0], losses[-1]))
