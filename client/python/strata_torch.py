"""`strata_torch`: PyTorch modules whose embedding tables live in strata.

    import strata_torch
    ebc = strata_torch.StrataEmbeddingBagCollection(
        ["127.0.0.1:7300"], tables={"user_id": "ctr", "item_id": "ctr"}, mode="sum",
        push=True, prefetch=True, max_staleness=2)
    for features, labels in ebc.prefetched(batches, features_of=lambda b: b[0]):
        pooled = ebc(features)           # {"user_id": (bags, dim), "item_id": (bags, dim)}
        loss = loss_fn(model(pooled), labels)
        loss.backward()                  # pushes d(loss)/d(row), summed per key, to strata
        dense_optimizer.step()
    ebc.close()                          # waits for every push; raises a failed one

In the manner of TorchRec's EmbeddingBagCollection: a dict feature -> table,
a forward that takes per feature a jagged batch (`values`, the keys of every
bag one after the other, and `offsets`, where each bag starts, as for
torch.nn.EmbeddingBag) and returns per feature the pooled rows (sum or mean)
as a (bags, dim) float32 tensor. An empty bag pools to zeros.

The rows are trained in strata, not in PyTorch: backward() hands the rows'
gradients (summed per key over every bag and feature of the batch) to a
training cluster's gateway (`push`), whose shards apply the table's own
optimizer (docs/optimizers.md). The dense layers above keep their PyTorch
optimizer. Without `push` the rows are frozen features (a serving node's
lookups work then too).

Two things keep a model's own speed (docs/serving.md, "PyTorch module"):
- prefetch: `prefetch(features)` (or the `prefetched()` generator) looks the
  next batch's rows up on a background thread while the current batch
  computes; forward() of those same features then takes them without a
  round trip. Features forward() was not given ahead are looked up at once.
- non-blocking pushes: backward() queues the push on a background thread and
  returns; at most `max_in_flight` pushes are unapplied at a time, the next
  backward() waits for the oldest one beyond that.
Bounded staleness, the rule of strata's async workers (staleness >=
prefetch depth + max in flight): the rows a batch reads miss the gradients
of at most `max_staleness` earlier batches. A prefetch is issued before
the current batch's backward, so it costs one batch; `max_in_flight` is
`max_staleness - 1` with prefetch and `max_staleness` without.
max_staleness=0 (no prefetch) is exactly synchronous training: every push
applied before the next lookup.

flush() waits until every push so far is applied; close() flushes and stops
the threads; neither loses a pushed gradient. An error of a background push
or prefetch is raised in the caller (by the next forward(), prefetch(),
backward's push, flush() or close()) as StrataTorchError naming the table and
the cause; the module is unusable after it (its later pushes would apply on
top of a lost one).

strata_client.Client is one per thread: the module holds one for the
caller's thread and one per background thread, all built by
`client_factory()` (default: strata_client.Client(addresses, timeout_s)).
"""
import collections
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import nn

import strata_client


class StrataTorchError(RuntimeError):
    """A lookup or push of the module failed (on the caller's or a background thread)."""


def _keys(values, feature):
    """`values` as a contiguous 1-d uint64 numpy array (int64 tensors' bits kept)."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu()
        if values.dtype not in (torch.int64, torch.int32, torch.uint8, torch.int16):
            raise StrataTorchError(
                "strata_torch: feature %r: values must be integer keys, not %s" %
                (feature, values.dtype))
        values = values.to(torch.int64).numpy()
    values = np.asarray(values)
    if values.ndim != 1:
        raise StrataTorchError("strata_torch: feature %r: values must be 1-d, not of shape %s" %
                               (feature, values.shape))
    if values.dtype == np.int64:
        return np.ascontiguousarray(values).view(np.uint64)
    if values.dtype.kind not in "ui":
        raise StrataTorchError("strata_torch: feature %r: values must be integer keys, not %s" %
                               (feature, values.dtype))
    return np.ascontiguousarray(values, dtype=np.uint64)


def _offsets(offsets, n, feature):
    if isinstance(offsets, torch.Tensor):
        offsets = offsets.detach().cpu().to(torch.int64)
    else:
        offsets = torch.as_tensor(np.asarray(offsets, dtype=np.int64))
    if offsets.dim() != 1:
        raise StrataTorchError("strata_torch: feature %r: offsets must be 1-d" % (feature,))
    if len(offsets) and (int(offsets[0]) != 0 or int(offsets[-1]) > n or
                         bool((offsets[1:] < offsets[:-1]).any())):
        raise StrataTorchError(
            "strata_torch: feature %r: offsets must start at 0, not decrease and stay <= %d "
            "(the number of values)" % (feature, n))
    return offsets


class _Batch:
    """One batch's keys per table, deduplicated, and (once looked up) their rows."""

    def __init__(self, features, tables):
        self.parts = {}  # feature -> (table, start in the table's keys, count, offsets)
        self.keys = {}  # feature -> its values as uint64
        keys_of = {}
        for feature, table in tables.items():
            if feature not in features:
                raise StrataTorchError("strata_torch: the batch has no feature %r (the "
                                       "module's features: %s)" % (feature, sorted(tables)))
            values, offsets = features[feature]
            keys = _keys(values, feature)
            chunks = keys_of.setdefault(table, [])
            start = sum(len(c) for c in chunks)
            chunks.append(keys)
            self.parts[feature] = (table, start, len(keys), _offsets(offsets, len(keys), feature))
            self.keys[feature] = keys
        self.chunks = keys_of
        self.tables = sorted(keys_of)
        self.unique, self.inverse = {}, {}  # filled by look_up()
        self.rows = None  # table -> (unique keys, dim) float32 array

    def look_up(self, client):
        """Deduplicates the keys per table and looks them up (on the thread of `client`)."""
        for table, chunks in self.chunks.items():
            keys = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
            self.unique[table], inverse = np.unique(keys, return_inverse=True)
            self.inverse[table] = torch.from_numpy(inverse.reshape(-1).astype(np.int64))
        self.rows = {t: client.lookup(t, k) for t, k in self.unique.items()}
        return self

    def same_features(self, other):
        return self.parts.keys() == other.parts.keys() and all(
            np.array_equal(self.keys[f], other.keys[f]) and
            torch.equal(self.parts[f][3], other.parts[f][3]) for f in self.parts)


class StrataEmbeddingBagCollection(nn.Module):
    """Pooled embedding lookups per feature, rows in strata tables, trained there.

    addresses: ["host:port", ...] of a training gateway (or a serving node with
      push=False); ignored when client_factory is given.
    tables: {feature: table}; several features may share a table (their keys
      are then kept apart by slot, e.g. strata_client.key(slot, value)).
    mode: "sum" or "mean" pooling.
    push: send gradients to strata on backward (else the rows are frozen).
    prefetch: look up prefetch()'s batch on a background thread.
    max_staleness: batches of gradients a lookup may miss (see the module doc);
      0 = synchronous pushes; with prefetch at least 1.
    """

    def __init__(self, addresses=None, tables=None, mode="sum", push=True, prefetch=True,
                 max_staleness=2, timeout_s=5.0, client_factory=None):
        super().__init__()
        if not tables:
            raise StrataTorchError("strata_torch: tables must map at least one feature to a table")
        if mode not in ("sum", "mean"):
            raise StrataTorchError("strata_torch: mode must be 'sum' or 'mean', not %r" % (mode,))
        if max_staleness < 0 or (prefetch and max_staleness < 1):
            raise StrataTorchError(
                "strata_torch: max_staleness %d: a prefetch reads before the current batch's "
                "push, so prefetch=True needs max_staleness >= 1 (0 needs prefetch=False)" %
                max_staleness)
        if client_factory is None:
            if not addresses:
                raise StrataTorchError("strata_torch: give addresses or a client_factory")
            addresses = [addresses] if isinstance(addresses, str) else list(addresses)
            client_factory = lambda: strata_client.Client(addresses, timeout_s)  # noqa: E731
        self.tables = dict(tables)
        self.mode, self.push, self.prefetch_on = mode, push, prefetch
        self.max_staleness = max_staleness
        self.max_in_flight = max_staleness - 1 if prefetch else max_staleness
        self._factory = client_factory
        self._client = client_factory()
        self._local = threading.local()  # a background thread's own Client
        self._prefetcher = ThreadPoolExecutor(1, "strata-prefetch") if prefetch else None
        self._pusher = ThreadPoolExecutor(1, "strata-push") if push and self.max_in_flight else None
        self._prefetched = collections.deque()  # (_Batch, Future of its lookup), oldest first
        self._in_flight = []  # Futures of queued pushes, oldest first
        self._error = None
        self._closed = False
        self.stats = {"lookups": 0, "prefetch_hits": 0, "prefetch_misses": 0, "pushes": 0,
                      "pushed_keys": 0}
        # Ties the lookups into autograd (a zero-size parameter, as nn.Module wants one).
        self.anchor = nn.Parameter(torch.zeros(0))

    # ------------------------------------------------------------------ threads
    def _thread_client(self):
        c = getattr(self._local, "client", None)
        if c is None:
            c = self._local.client = self._factory()
        return c

    def _raise_pending(self):
        if self._error is not None:
            raise self._error
        while self._in_flight and self._in_flight[0].done():
            self._settle(self._in_flight.pop(0))

    def _settle(self, future):
        try:
            future.result()
        except StrataTorchError as e:
            self._error = e
            raise
        except Exception as e:  # noqa: BLE001 (the client's ValueError / RuntimeError)
            self._error = StrataTorchError("strata_torch: a background call failed: %s" % e)
            raise self._error from e

    def _check_open(self):
        if self._closed:
            raise StrataTorchError("strata_torch: the module is closed")
        self._raise_pending()

    # ------------------------------------------------------------------ lookups
    def prefetch(self, features):
        """Starts looking up `features` (forward()'s argument) on the background thread.
        Up to two batches wait: a third prefetch first waits for the oldest."""
        self._check_open()
        if self._prefetcher is None:
            return
        if len(self._prefetched) >= 2:
            self._prefetched.popleft()[1].result()
            self.stats["prefetch_misses"] += 1
        batch = _Batch(features, self.tables)
        self._prefetched.append((batch, self._prefetcher.submit(self._look_up_named, batch, True)))

    def _look_up_named(self, batch, background):
        try:
            return batch.look_up(self._thread_client() if background else self._client)
        except Exception as e:  # noqa: BLE001
            raise StrataTorchError("strata_torch: lookup of table(s) %s failed: %s" %
                                   (", ".join(map(repr, batch.tables)), e)) from e

    def prefetched(self, iterable, features_of=lambda item: item):
        """Yields the items of `iterable`, each after prefetching the next one's features:
        the next batch's lookup runs while the caller computes the current one."""
        it = iter(iterable)
        try:
            current = next(it)
        except StopIteration:
            return
        self.prefetch(features_of(current))
        for following in it:
            self.prefetch(features_of(following))
            yield current
            current = following
        yield current

    def _rows_for(self, features):
        batch = _Batch(features, self.tables)
        while self._prefetched:
            pending, future = self._prefetched.popleft()
            if not pending.same_features(batch):
                self.stats["prefetch_misses"] += 1  # prefetched, never asked for: dropped
                continue
            try:
                found = future.result()
            except StrataTorchError as e:
                self._error = e
                raise
            self.stats["prefetch_hits"] += 1
            return found
        self.stats["lookups"] += 1
        return self._look_up_named(batch, False)

    def forward(self, features):
        """features: {feature: (values, offsets)}; returns {feature: (bags, dim) float32}."""
        self._check_open()
        batch = self._rows_for(features)
        weights = {}
        for table, rows in batch.rows.items():
            w = torch.from_numpy(rows)
            if self.push and torch.is_grad_enabled():
                w = _Rows.apply(self.anchor, w, self, table, batch.unique[table])
            weights[table] = w
        out = {}
        for feature, (table, start, count, offsets) in batch.parts.items():
            index = batch.inverse[table][start:start + count]
            out[feature] = nn.functional.embedding_bag(index, weights[table], offsets,
                                                       mode=self.mode)
        return out

    # ------------------------------------------------------------------ pushes
    def _push_now(self, background, table, keys, grads):
        try:
            (self._thread_client() if background else self._client).push(table, keys, grads)
        except Exception as e:  # noqa: BLE001
            raise StrataTorchError("strata_torch: push to table %r (%d keys) failed: %s" %
                                   (table, len(keys), e)) from e

    def _push(self, table, keys, grads):
        self._check_open()
        self.stats["pushes"] += 1
        self.stats["pushed_keys"] += len(keys)
        if self._pusher is None:
            self._push_now(False, table, keys, grads)
            return
        while len(self._in_flight) >= self.max_in_flight:
            self._settle(self._in_flight.pop(0))
        self._in_flight.append(self._pusher.submit(self._push_now, True, table, keys, grads))

    def flush(self):
        """Waits until every push so far is applied; raises the first that failed."""
        if self._error is not None:
            raise self._error
        while self._in_flight:
            self._settle(self._in_flight.pop(0))

    def close(self):
        """flush(), then stops the background threads. Idempotent."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            for pool in (self._prefetcher, self._pusher):
                if pool is not None:
                    pool.shutdown(wait=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Rows(torch.autograd.Function):
    """Identity on a table's rows whose backward pushes the rows' gradient."""

    @staticmethod
    def forward(ctx, anchor, rows, module, table, keys):
        ctx.module, ctx.table, ctx.keys = module, table, keys
        return rows.view_as(rows)

    @staticmethod
    def backward(ctx, grad):
        grads = np.ascontiguousarray(grad.detach().cpu().numpy(), dtype=np.float32)
        ctx.module._push(ctx.table, ctx.keys, grads)
        return None, None, None, None, None
