#!/usr/bin/python3
"""PyTorch CPU baseline for `strata bench e2e`.

Trains strata's CTR model (model/ctr_model.hpp) on a Criteo-layout TSV with
stock PyTorch and prints one JSON line:
  {"examples_per_s": ..., "heldout_auc": ..., "heldout_logloss": ..., ...}

Same model and training setup as strata's defaults:
  * one hashed table of 2^22 rows of dim+1 floats, an nn.EmbeddingBag
    (mode="sum", sparse=True); element 0 of a row is the key's first-order
    weight, elements 1..dim its embedding; rows start N(0, 0.01^2);
  * per slot (13 integer + 26 categorical) the sum-pooled embedding, the
    concatenation through Linear+ReLU layers of --hidden sizes and a
    Linear(.., 1); logit = mlp + sum of first-order weights;
  * mean logloss (BCEWithLogits); sparse Adagrad on the table (lr 0.01,
    initial accumulator 0.1), Adam on the MLP (lr 0.001);
  * one epoch over the first --rows rows in order, batches of --batch,
    torch.set_num_threads(--threads); then the next --heldout-rows rows are
    evaluated (exact AUC with ties counted half, logloss clamped at 1e-7).

Feature hashing follows strata's semantics (a key per (slot, value); integer
values bucketized as v <= 0 -> max(v, -8), v > 0 -> 1 + floor(log2 v);
empty = missing = no feature) but not its hash function: here a key is
zlib.crc32(value bytes, seeded with a per-slot crc) mod 2^22, so distinct
features can share a row (about one key in five at 1M distinct keys), which strata's
64-bit keys avoid.

With --strata HOST:PORT the table lives in strata instead: a training
gateway's table (`--table`, rows of dim+1 floats, its own optimizer: the
bench's manifest sets Adagrad lr 0.01, initial accumulator 0.1, rows
N(0, 0.01^2)) through strata_torch.StrataEmbeddingBagCollection (PYTHONPATH
holds build/python), one feature whose bags are the (example, slot) pairs,
empty for a missing value; --no-prefetch and --max-staleness 0 turn the
overlap off (one lookup and one push per batch, nothing overlapped).
The row `e2e_torch_gateway_examples_per_s` of `strata bench e2e`.

examples_per_s counts the training loop only (forward, backward, optimizer
steps on pre-built tensors); parsing and hashing (parse_s) are excluded.
Run with Debian's /usr/bin/python3 and python3-torch.
"""

import argparse
import json
import math
import sys
import time
import zlib

import torch
from torch import nn

TABLE_ROWS = 1 << 22
INTEGERS, CATEGORICALS = 13, 26
SLOTS = INTEGERS + CATEGORICALS


def slot_seeds():
    return [zlib.crc32(b"strata slot %d" % s) for s in range(SLOTS)]


def read_rows(path, first, count, seeds):
    """Rows [first, first + count) of the TSV: labels [n], keys [n, 39]
    (row indices) and present [n, 39] (1.0, or 0.0 for a missing value)."""
    labels, keys, present = [], [], []
    bad = 0
    with open(path, "rb") as f:
        for line_no, line in enumerate(f):
            if line_no < first:
                continue
            if len(labels) >= count:
                break
            fields = line.rstrip(b"\r\n").split(b"\t")
            if len(fields) != 1 + SLOTS or fields[0] not in (b"0", b"1"):
                bad += 1
                continue
            row_keys, row_present = [0] * SLOTS, [0.0] * SLOTS
            try:
                for s in range(INTEGERS):
                    v = fields[1 + s]
                    if not v:
                        continue
                    v = int(v)
                    bucket = max(v, -8) if v <= 0 else v.bit_length()  # 1 + floor(log2 v)
                    row_keys[s] = zlib.crc32(b"%d" % bucket, seeds[s]) & (TABLE_ROWS - 1)
                    row_present[s] = 1.0
            except ValueError:
                bad += 1
                continue
            for s in range(INTEGERS, SLOTS):
                v = fields[1 + s]
                if v:
                    row_keys[s] = zlib.crc32(v, seeds[s]) & (TABLE_ROWS - 1)
                    row_present[s] = 1.0
            labels.append(1.0 if fields[0] == b"1" else 0.0)
            keys.append(row_keys)
            present.append(row_present)
    return (torch.tensor(labels, dtype=torch.float32),
            torch.tensor(keys, dtype=torch.int64).reshape(-1, SLOTS),
            torch.tensor(present, dtype=torch.float32).reshape(-1, SLOTS), bad)


class CtrModel(nn.Module):
    def __init__(self, dim, hidden, table=None):
        super().__init__()
        self.dim = dim
        if table is None:
            self.table = nn.EmbeddingBag(TABLE_ROWS, dim + 1, mode="sum", sparse=True)
            nn.init.normal_(self.table.weight, 0.0, 0.01)
        else:  # a StrataEmbeddingBagCollection of the one feature "slots"
            self.strata = table
        layers, width = [], SLOTS * dim
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, keys, present, features=None):
        b = keys.shape[0]
        if features is not None:  # strata: the bags of prefetch()'s features
            rows = self.strata(features)["slots"].reshape(b, SLOTS, self.dim + 1)
            linear = rows[:, :, 0].sum(dim=1)
            return self.mlp(rows[:, :, 1:].reshape(b, SLOTS * self.dim)).squeeze(1) + linear
        # One bag per (example, slot): a 2-D input of bag size 1, weighted by
        # presence so that a missing value contributes nothing.
        rows = self.table(keys.reshape(-1, 1), per_sample_weights=present.reshape(-1, 1))
        rows = rows.reshape(b, SLOTS, self.dim + 1)
        linear = rows[:, :, 0].sum(dim=1)
        return self.mlp(rows[:, :, 1:].reshape(b, SLOTS * self.dim)).squeeze(1) + linear


def auc(predictions, labels):
    """Exact AUC, tied predictions sharing their average rank."""
    order = sorted(range(len(predictions)), key=predictions.__getitem__)
    positives = sum(1 for y in labels if y > 0.5)
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return 0.5
    rank_sum, i = 0.0, 0
    while i < len(order):
        j = i
        while j < len(order) and predictions[order[j]] == predictions[order[i]]:
            j += 1
        group_positives = sum(1 for k in range(i, j) if labels[order[k]] > 0.5)
        rank_sum += (i + 1 + j) / 2.0 * group_positives
        i = j
    return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)


def logloss(predictions, labels):
    total = 0.0
    for p, y in zip(predictions, labels):
        p = min(max(p, 1e-7), 1 - 1e-7)
        total -= y * math.log(p) + (1 - y) * math.log(1 - p)
    return total / max(len(labels), 1)


def strata_features(keys, present):
    """The batch as strata_torch features: one bag per (example, slot), empty
    where the value is missing (what weight 0 does in the EmbeddingBag)."""
    mask = present.reshape(-1) > 0
    values = keys.reshape(-1)[mask]
    counts = mask.to(torch.int64)
    offsets = torch.cumsum(counts, 0) - counts
    return {"slots": (values, offsets)}


def train_in_strata(args, model, keys, present, labels, ebc):
    """The same loop with the table in strata: rows prefetched one batch
    ahead, gradients pushed by backward(); returns the seconds it took,
    every push applied (close())."""
    dense_opt = torch.optim.Adam(model.mlp.parameters(), lr=args.dense_lr)
    loss_fn = nn.BCEWithLogitsLoss()
    n = labels.shape[0]

    def batches():
        for first in range(0, n, args.batch):
            last = min(first + args.batch, n)
            yield first, last, strata_features(keys[first:last], present[first:last])

    start = time.perf_counter()
    for first, last, features in ebc.prefetched(batches(), features_of=lambda b: b[2]):
        dense_opt.zero_grad()
        loss = loss_fn(model(keys[first:last], present[first:last], features),
                       labels[first:last])
        loss.backward()  # pushes the rows' gradients
        dense_opt.step()
    ebc.flush()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--hidden", default="64,32")
    parser.add_argument("--heldout-rows", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.01, help="Adagrad, embeddings")
    parser.add_argument("--initial-accumulator", type=float, default=0.1)
    parser.add_argument("--dense-lr", type=float, default=0.001, help="Adam, MLP")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--strata", metavar="HOST:PORT",
                        help="the table in strata: a training gateway (async mode)")
    parser.add_argument("--table", default="ctr", help="with --strata: its table")
    parser.add_argument("--no-prefetch", action="store_true",
                        help="with --strata: look each batch up when it runs")
    parser.add_argument("--max-staleness", type=int, default=2,
                        help="with --strata: batches of gradients a lookup may miss (0: "
                        "every push applied before the next lookup)")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    hidden = [int(h) for h in args.hidden.split(",") if h]
    seeds = slot_seeds()

    start = time.perf_counter()
    labels, keys, present, bad = read_rows(args.data, 0, args.rows, seeds)
    h_labels, h_keys, h_present, h_bad = read_rows(args.data, args.rows, args.heldout_rows, seeds)
    parse_s = time.perf_counter() - start

    if args.strata:
        import strata_torch

        ebc = strata_torch.StrataEmbeddingBagCollection(
            [args.strata], {"slots": args.table}, mode="sum", push=True,
            prefetch=not args.no_prefetch, max_staleness=args.max_staleness)
        model = CtrModel(args.dim, hidden, ebc)
        n = labels.shape[0]
        train_s = train_in_strata(args, model, keys, present, labels, ebc)
        predictions = []
        with torch.no_grad():  # no pushes
            for first in range(0, h_labels.shape[0], 4096):
                last = min(first + 4096, h_labels.shape[0])
                features = strata_features(h_keys[first:last], h_present[first:last])
                logits = model(h_keys[first:last], h_present[first:last], features)
                predictions += torch.sigmoid(logits).tolist()
        stats = ebc.stats
        ebc.close()
        print(json.dumps(report(args, n, train_s, parse_s, predictions, h_labels.tolist(),
                                bad + h_bad, strata=args.strata, prefetch=not args.no_prefetch,
                                max_staleness=args.max_staleness, stats=stats)))
        return 0

    model = CtrModel(args.dim, hidden)
    sparse_opt = torch.optim.Adagrad([model.table.weight], lr=args.lr,
                                     initial_accumulator_value=args.initial_accumulator)
    dense_opt = torch.optim.Adam(model.mlp.parameters(), lr=args.dense_lr)
    loss_fn = nn.BCEWithLogitsLoss()

    n = labels.shape[0]
    start = time.perf_counter()
    for first in range(0, n, args.batch):
        last = min(first + args.batch, n)
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss = loss_fn(model(keys[first:last], present[first:last]), labels[first:last])
        loss.backward()
        sparse_opt.step()
        dense_opt.step()
    train_s = time.perf_counter() - start

    predictions = []
    with torch.no_grad():
        for first in range(0, h_labels.shape[0], 4096):
            last = min(first + 4096, h_labels.shape[0])
            logits = model(h_keys[first:last], h_present[first:last])
            predictions += torch.sigmoid(logits).tolist()
    print(json.dumps(report(args, n, train_s, parse_s, predictions, h_labels.tolist(),
                            bad + h_bad)))
    return 0


def report(args, n, train_s, parse_s, predictions, h, bad, **more):
    result = {
        "examples_per_s": n / train_s if train_s > 0 else 0.0,
        "heldout_auc": auc(predictions, h) if h else None,
        "heldout_logloss": logloss(predictions, h) if h else None,
        "train_rows": n,
        "heldout_rows": len(h),
        "bad_lines": bad,
        "train_s": train_s,
        "parse_s": parse_s,
        "batch": args.batch,
        "threads": args.threads,
        "torch": torch.__version__,
    }
    result.update(more)
    return result


if __name__ == "__main__":
    sys.exit(main())
