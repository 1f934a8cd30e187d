"""A PyTorch model whose embedding layer is backed by strata.

Run against a serving node (frozen embeddings, the layers above train),
here serving table `ctr` (the table deploy/examples/*.yaml define):
    PYTHONPATH=build/python /usr/bin/python3 docs/strata_torch_example.py 127.0.0.1:7100 ctr
or against a training cluster's gateway (manifest: gateway.port; async
mode), where the embeddings train in strata:
    PYTHONPATH=build/python /usr/bin/python3 docs/strata_torch_example.py --push 127.0.0.1:7300 ctr
Without keys on the command line it trains on 100 keys the server lists
(client.keys); `strata key --slot C1 --value 68fd1e64` computes the key of
a feature value. --help lists the options.

StrataEmbedding looks the batch's keys up in strata in forward() (one
binary-protocol request per batch, rows as a float32 tensor without a copy).
backward() hands the embedding gradients to `push` when one is given
(client.push: the cluster's shards apply them with the table's optimizer,
summed over duplicate keys, before the call returns); without it the strata
rows act as frozen features.
"""
import argparse

import numpy as np
import torch
from torch import nn


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
    import strata_client

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
    import strata_client

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


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="A PyTorch model whose embedding layer is a strata table: lookups from a "
        "serving node (frozen rows), or with --push from a training gateway (rows train in "
        "strata).")
    p.add_argument("replica", nargs="?", default="127.0.0.1:7100",
                   help="HOST:PORT of a serving node's binary port, or with --push of a "
                   "gateway (default %(default)s)")
    p.add_argument("table", nargs="?", default="ctr",
                   help="the table (manifest: table.name; default %(default)s, the table of "
                   "deploy/examples/*.yaml)")
    p.add_argument("keys", nargs="*", type=int,
                   help="keys to train on (default: 100 keys the server lists; "
                   "`strata key --slot C1 --value V` computes a value's key)")
    p.add_argument("--push", action="store_true",
                   help="train the embedding rows in strata through a gateway (async mode)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default 30, or 40 "
                   "with --push)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import strata_client

    keys = args.keys
    if not keys:
        keys = strata_client.Client([args.replica]).keys(args.table, 100)
        if len(keys) == 0:
            raise SystemExit("table %s on %s holds no rows to train on" % (args.table, args.replica))
    keys = np.array(keys, dtype=np.uint64)
    steps = {} if args.steps is None else {"steps": args.steps}
    if args.push:
        losses = train_embeddings(args.replica, args.table, keys, **steps)
    else:
        losses = train(args.replica, args.table, keys, **steps)
    print("loss: first %.4f last %.4f" % (losses[0], losses[-1]))


if __name__ == "__main__":
    main()
