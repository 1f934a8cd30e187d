"""A two-tower recommendation model whose embedding tables train in strata.

Run against a training cluster's gateway (manifest: gateway.port; async mode),
e.g. deploy/examples/local.yaml's node:
    PYTHONPATH=build/python /usr/bin/python3 docs/two_tower_example.py 127.0.0.1:7300 ctr
--help lists the options.

The user tower pools the features user_id and user_segment, the item tower
item_id and item_category, each feature a bag of keys (sum pooling) looked up
through strata_torch.StrataEmbeddingBagCollection; each tower is an MLP over
its features' pooled rows, and the score is the dot product of the two
towers' outputs. Clicks are planted: each user segment likes half of the
item categories; a user clicks an item it likes with probability 0.9, any
other with 0.1.

The embedding rows train in strata (backward pushes their gradients to the
gateway, whose shards apply the table's optimizer); the towers' layers train
in PyTorch (Adam). The next batch's rows are prefetched while the current
one computes, and pushes do not block the next step (max_staleness batches).

Tables. A cluster holds one table today (the manifest's `table:`), so every
feature maps to that one table and the features' keys are kept apart by slot:
strata_client.key(slot, value) hashes the slot into the key, as strata's own
training does for the Criteo slots (docs/model.md). With several tables per
cluster (issue 20: `tables:` in the manifest) each feature maps to its own
table, with its own width and optimizer: only the `tables` dict changes, e.g.
    {"user_id": "users", "user_segment": "segments",
     "item_id": "items", "item_category": "categories"}.
"""
import argparse

import numpy as np
import torch
from torch import nn

# Slot numbers of the four features (any distinct numbers; strata's Criteo
# slots are 0..38, these stay clear of them).
SLOTS = {"user_id": 101, "user_segment": 102, "item_id": 103, "item_category": 104}
USER_FEATURES, ITEM_FEATURES = ("user_id", "user_segment"), ("item_id", "item_category")


def planted_data(seed, users=500, items=300, segments=8):
    """A click model to learn: (user segment, item category) -> click probability."""
    rng = np.random.default_rng(seed)
    user_segment = rng.integers(0, segments, users)
    item_category = rng.integers(0, segments, items)
    # Each segment likes half of the categories (a random half).
    likes = rng.permuted(np.tile(np.arange(segments) < segments // 2, (segments, 1)), axis=1)

    def batch(size):
        u = rng.integers(0, users, size)
        i = rng.integers(0, items, size)
        liked = likes[user_segment[u], item_category[i]]
        labels = (rng.random(size) < np.where(liked, 0.9, 0.1)).astype(np.float32)
        values = {"user_id": u, "user_segment": user_segment[u], "item_id": i,
                  "item_category": item_category[i]}
        return values, torch.from_numpy(labels)

    return batch


def features_of(values):
    """{feature: (keys, offsets)}: one key per example (bags of one), keyed by slot."""
    import strata_client

    out = {}
    for name, column in values.items():
        keys = np.fromiter((strata_client.key(SLOTS[name], int(v)) for v in column),
                           dtype=np.uint64, count=len(column))
        out[name] = (keys, np.arange(len(column), dtype=np.int64))
    return out


class Tower(nn.Module):
    def __init__(self, features, dim, out=16):
        super().__init__()
        self.features = features
        self.mlp = nn.Sequential(nn.Linear(dim * len(features), 32), nn.ReLU(), nn.Linear(32, out))

    def forward(self, pooled):
        return self.mlp(torch.cat([pooled[f] for f in self.features], dim=1))


class TwoTower(nn.Module):
    """Embeddings in strata (`embeddings`), towers in PyTorch."""

    def __init__(self, embeddings, dim):
        super().__init__()
        self.embeddings = embeddings
        self.user, self.item = Tower(USER_FEATURES, dim), Tower(ITEM_FEATURES, dim)

    def forward(self, features):
        pooled = self.embeddings(features)
        return (self.user(pooled) * self.item(pooled)).sum(dim=1)


def train(gateway, table, steps=200, batch=256, seed=0, max_staleness=2):
    """Trains the two-tower model through `gateway`; returns the losses per step."""
    import strata_client
    import strata_torch

    torch.manual_seed(seed)
    dims = {t["name"]: t["dim"] for t in strata_client.Client([gateway]).tables()}
    if table not in dims:
        raise SystemExit("the gateway %s has no table %r (it has %s)" % (gateway, table,
                                                                        sorted(dims)))
    tables = {f: table for f in SLOTS}  # one table today; one per feature with issue 20
    embeddings = strata_torch.StrataEmbeddingBagCollection(
        [gateway], tables, mode="sum", push=True, prefetch=True, max_staleness=max_staleness)
    model = TwoTower(embeddings, dims[table])
    # The towers only: the embedding rows' optimizer is the table's, in strata.
    optimizer = torch.optim.Adam(list(model.user.parameters()) + list(model.item.parameters()),
                                 lr=0.01)
    loss_fn = nn.BCEWithLogitsLoss()
    make = planted_data(seed)
    data = [make(batch) for _ in range(steps)]
    batches = ((features_of(values), labels) for values, labels in data)
    losses = []
    with embeddings:  # close(): waits for every push, raises a failed one
        for features, labels in embeddings.prefetched(batches, features_of=lambda b: b[0]):
            optimizer.zero_grad()
            loss = loss_fn(model(features), labels)
            loss.backward()  # the rows' gradients go to strata
            optimizer.step()
            losses.append(float(loss))
    return losses


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Train a two-tower model whose embedding rows live in strata (a training "
        "gateway, async mode).")
    p.add_argument("gateway", nargs="?", default="127.0.0.1:7300",
                   help="HOST:PORT of a training cluster's gateway (default %(default)s)")
    p.add_argument("table", nargs="?", default="ctr",
                   help="the table every feature maps to (default %(default)s)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--max-staleness", type=int, default=2,
                   help="batches of gradients a lookup may miss (default %(default)s)")
    args = p.parse_args(argv)
    losses = train(args.gateway, args.table, args.steps, args.batch,
                   max_staleness=args.max_staleness)
    k = max(1, len(losses) // 10)
    print("loss: first %d steps %.4f, last %d steps %.4f" %
          (k, sum(losses[:k]) / k, k, sum(losses[-k:]) / k))


if __name__ == "__main__":
    main()
