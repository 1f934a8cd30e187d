#!/usr/bin/python3
"""strata_torch.StrataEmbeddingBagCollection against a real training gateway.

Usage: python_torch_module_test.py STRATA_BINARY PYTHON_MODULE_DIR
Starts `strata node` (a store with a gateway, no workers; SGD with learning
rate 1/8 from zeros, so every row is exactly minus an eighth of the sum of
its gradients: gradients that are multiples of 1/8 keep every sum exact)
and checks:
- pooled lookups (sum, mean, empty bags, two features on one table) equal
  the rows strata returns, summed or averaged per bag;
- backward pushes: rows change by exactly -lr * sum(grad) per key, with
  synchronous pushes and with prefetch + background pushes after flush();
- a prefetched batch answers the rows of a plain lookup, without a lookup of
  its own;
- close() waits for every background push (all N applied, counted);
- a failed background lookup (unknown table) and a failed background push
  (the node killed under it) raise StrataTorchError in the caller, naming
  the table;
- docs/two_tower_example.py trains: its loss falls.
Exit 0: passed; 77: python3-torch missing (skipped, says why).
"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


def preload_sanitizer_runtime(module_dir):
    """Re-executes under LD_PRELOAD of the sanitizer runtime the module links
    (an ASan/TSan build): the runtime must come first in the process."""
    if os.environ.get("STRATA_TORCH_TEST_PRELOADED"):
        return
    so = [f for f in os.listdir(module_dir) if f.startswith("strata_client") and f.endswith(".so")]
    if not so:
        return
    out = subprocess.run(["ldd", os.path.join(module_dir, so[0])], capture_output=True,
                         text=True).stdout
    runtime = re.search(r"(/\S*/lib[at]san\.so\S*)", out)
    if not runtime:
        return
    cxx = re.search(r"(/\S*/libstdc\+\+\.so\S*)", out)
    env = dict(os.environ, STRATA_TORCH_TEST_PRELOADED="1",
               STRATA_TORCH_TEST_ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", ""),
               LD_PRELOAD=runtime.group(1) + (":" + cxx.group(1) if cxx else ""))
    if "asan" in runtime.group(1):  # CPython and numpy do not free at exit
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


STRATA, MODULE_DIR = sys.argv[1], sys.argv[2]
preload_sanitizer_runtime(MODULE_DIR)
sys.path.insert(0, MODULE_DIR)
try:
    import torch
except ImportError:
    print("SKIP: python3-torch is not installed for %s (deploy/install-deps.sh installs it)"
          % sys.executable)
    sys.exit(77)
import numpy as np

import strata_client
import strata_torch

DIM = 4  # embedding_dim 3: rows of 4
LR = 0.125


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """`strata node` with a gateway; its output collected by a thread."""

    def __init__(self, work):
        self.port = free_port()
        manifest = os.path.join(work, "store.yaml")
        with open(manifest, "w") as f:
            f.write("name: store\nmode: async\npartitions: 64\nthreads: 2\n"
                    "table:\n  name: emb\n  optimizer:\n    kind: sgd\n    learning_rate: 0.125\n"
                    "  initializer:\n    kind: zeros\nmodel:\n  embedding_dim: 3\n"
                    "shards:\n  count: 2\n  dram_bytes: 1MiB\n  ssd_path: %s\n"
                    "  map_bytes: 256MiB\ncaches:\n  count: 1\n  sets: 8\nworkers:\n  count: 0\n"
                    "gateway:\n  port: %d\ncheckpoint:\n  dir: %s\n" %
                    (os.path.join(work, "state"), self.port, os.path.join(work, "ckpt")))
        # The node as the test runner started this script: no preload, its
        # own sanitizer options (leak checks on).
        env = dict(os.environ)
        if env.pop("STRATA_TORCH_TEST_PRELOADED", None):
            env.pop("LD_PRELOAD", None)
            env["ASAN_OPTIONS"] = env.pop("STRATA_TORCH_TEST_ASAN_OPTIONS", "")
        self.process = subprocess.Popen([STRATA, "node", "--manifest", manifest],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=env)
        self.lines, self.serving = [], threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        # A guard against a node that never starts, not a speed check.
        if not self.serving.wait(300):
            self.stop()
            raise AssertionError("strata node did not serve:\n" + "".join(self.lines))
        self.address = "127.0.0.1:%d" % self.port

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line)
            if "gateway: serving" in line:
                self.serving.set()

    def stop(self, sig=signal.SIGTERM):
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(300)


def bags(rng, n_bags, keys, max_len=4):
    """(values, offsets, lists): random bags of `keys`, some empty."""
    lists = [list(rng.choice(keys, size=rng.integers(0, max_len + 1))) for _ in range(n_bags)]
    offsets = np.cumsum([0] + [len(b) for b in lists[:-1]]).astype(np.int64)
    values = np.array([k for b in lists for k in b], dtype=np.uint64)
    return values, offsets, lists


def rows_of(client, keys):
    return {int(k): r for k, r in zip(keys, client.lookup("emb", np.array(keys, dtype=np.uint64)))}


def check_pooled_lookups(node, client):
    rng = np.random.default_rng(1)
    keys = np.array([strata_client.key(s, v) for s in (1, 2) for v in range(6)], dtype=np.uint64)
    # Non-zero rows first: one synchronous push of known gradients.
    client.push("emb", keys, rng.standard_normal((len(keys), DIM)).astype(np.float32))
    stored = rows_of(client, keys)
    user = bags(rng, 7, keys[:6])
    item = bags(rng, 7, keys[6:])
    for mode in ("sum", "mean"):
        with strata_torch.StrataEmbeddingBagCollection(
                [node.address], {"user": "emb", "item": "emb"}, mode=mode, push=False,
                prefetch=False, max_staleness=0) as ebc:
            out = ebc({"user": user[:2], "item": (torch.from_numpy(item[0].view(np.int64)),
                                                   torch.from_numpy(item[1]))})
        for name, (_, _, lists) in (("user", user), ("item", item)):
            got = out[name].detach().numpy()
            assert got.shape == (7, DIM), (name, got.shape)
            for b, members in enumerate(lists):
                want = np.zeros(DIM, dtype=np.float64)
                for k in members:
                    want += stored[int(k)]
                if mode == "mean" and members:
                    want /= len(members)
                assert np.allclose(got[b], want, rtol=1e-6, atol=1e-6), (mode, name, b, got[b], want)
    assert any(len(b) == 0 for b in user[2] + item[2]), "no empty bag drawn: change the seed"
    print("pooled lookups equal strata's rows summed/averaged per bag")


def train_steps(ebc, batches, weights):
    """Per batch: loss = sum over features of <pooled, weight>; backward (pushes)."""
    for features in ebc.prefetched(batches):
        out = ebc(features)
        loss = sum((out[f] * weights[f]).sum() for f in out)
        loss.backward()


def expected_sums(batches, weights):
    """Per key: the sum over batches of d(loss)/d(row) (sum pooling: the bag's weight row)."""
    sums = {}
    for features in batches:
        for f, (values, offsets) in features.items():
            ends = list(offsets[1:]) + [len(values)]
            for b, (s, e) in enumerate(zip(offsets, ends)):
                for k in values[s:e]:
                    sums[int(k)] = sums.get(int(k), 0) + weights[f][b].numpy().astype(np.float64)
    return sums


def check_pushes(node, client, first_key, **options):
    rng = np.random.default_rng(first_key)
    keys = np.arange(first_key, first_key + 20, dtype=np.uint64)
    before = rows_of(client, keys)
    batches = []
    for _ in range(6):
        u, i = bags(rng, 5, keys[:10]), bags(rng, 5, keys[10:])
        batches.append({"user": (u[0], u[1]), "item": (i[0], i[1])})
    # Gradients that are exact in float32 (multiples of 1/8), so the sums are exact.
    weights = {f: torch.from_numpy(rng.integers(-8, 9, (5, DIM)).astype(np.float32) / 8)
               for f in ("user", "item")}
    ebc = strata_torch.StrataEmbeddingBagCollection([node.address],
                                                    {"user": "emb", "item": "emb"}, **options)
    train_steps(ebc, batches, weights)
    ebc.close()
    after = rows_of(client, keys)
    sums = expected_sums(batches, weights)
    assert sums, "no key was pushed"
    for k in keys:
        want = before[int(k)] - LR * sums.get(int(k), 0)
        assert np.array_equal(after[int(k)], want.astype(np.float32)), (options, k, after[int(k)],
                                                                       want)
    assert ebc.stats["pushes"] == len(batches), ebc.stats
    print("pushes exact (%s): rows moved by -lr * sum(grad); stats %s" % (options, ebc.stats))
    return ebc.stats


def check_prefetch(node, client):
    keys = np.arange(3000, 3010, dtype=np.uint64)
    client.push("emb", keys, np.arange(10 * DIM, dtype=np.float32).reshape(10, DIM))
    features = {"f": (keys, np.array([0, 3, 3, 7], dtype=np.int64))}
    plain = client.lookup("emb", keys)
    with strata_torch.StrataEmbeddingBagCollection([node.address], {"f": "emb"}, push=False,
                                                   prefetch=True, max_staleness=1) as ebc:
        ebc.prefetch(features)
        out = ebc(features)["f"].numpy()
        assert ebc.stats["prefetch_hits"] == 1 and ebc.stats["lookups"] == 0, ebc.stats
        other = {"f": (keys[:2], np.array([0], dtype=np.int64))}
        ebc.prefetch(other)
        ebc(features)  # not what was prefetched: a lookup of its own, the prefetch dropped
        assert ebc.stats["lookups"] == 1 and ebc.stats["prefetch_misses"] == 1, ebc.stats
    want = np.stack([plain[0:3].sum(0), np.zeros(DIM, np.float32), plain[3:7].sum(0),
                     plain[7:10].sum(0)])
    assert np.array_equal(out, want), (out, want)
    print("a prefetched batch answers the rows of a plain lookup")


def check_close_waits(node, client):
    keys = np.array([4001, 4002, 4003], dtype=np.uint64)
    n = 40
    features = {"f": (keys, np.array([0], dtype=np.int64))}
    # max_staleness 40: up to 39 pushes in flight; close() must wait for all.
    ebc = strata_torch.StrataEmbeddingBagCollection([node.address], {"f": "emb"},
                                                    prefetch=True, max_staleness=n)
    # Forwards first, then backwards back to back: the pushes queue faster
    # than they are applied, so close() finds many in flight.
    outs = [ebc(features)["f"] for _ in range(n)]
    for out in outs:
        out.sum().backward()
    in_flight = len(ebc._in_flight)
    ebc.close()
    rows = client.lookup("emb", keys)
    assert np.array_equal(rows, np.full((3, DIM), -LR * n, np.float32)), (rows, in_flight)
    print("close() waited for every push (%d of %d in flight at close)" % (in_flight, n))


def check_two_tower(node):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "docs"))
    import two_tower_example

    losses = two_tower_example.train(node.address, "emb", steps=300, batch=128)
    first, last = np.mean(losses[:20]), np.mean(losses[-20:])
    print("two-tower example: loss %.4f -> %.4f" % (first, last))
    assert last < 0.95 * first, losses


def check_errors(node, client):
    features = {"f": (np.array([1], dtype=np.uint64), np.array([0], dtype=np.int64))}
    ebc = strata_torch.StrataEmbeddingBagCollection([node.address], {"f": "no_such_table"},
                                                    prefetch=True, max_staleness=1)
    ebc.prefetch(features)
    try:
        ebc(features)
        raise AssertionError("a lookup of an unknown table must raise")
    except strata_torch.StrataTorchError as e:
        assert "'no_such_table'" in str(e), e
        print("background lookup error raised in the caller:", e)
    try:
        ebc.close()
        raise AssertionError("close() must raise the failed lookup")
    except strata_torch.StrataTorchError as e:
        assert "'no_such_table'" in str(e), e

    # A push that fails on the background thread: the node killed under it.
    ebc = strata_torch.StrataEmbeddingBagCollection([node.address], {"f": "emb"}, prefetch=True,
                                                    max_staleness=4, timeout_s=2.0)
    out = ebc(features)["f"]
    node.stop(signal.SIGKILL)
    out.sum().backward()  # queued: returns at once
    try:
        ebc.flush()
        raise AssertionError("flush() must raise the failed background push")
    except strata_torch.StrataTorchError as e:
        assert "push to table 'emb'" in str(e), e
        print("background push error raised in the caller:", e)
    try:
        ebc(features)
        raise AssertionError("the module must stay failed after a lost push")
    except strata_torch.StrataTorchError as e:
        assert "push to table 'emb'" in str(e), e
    try:
        ebc.close()
        raise AssertionError("close() must raise the failed push too")
    except strata_torch.StrataTorchError:
        pass


def main():
    with tempfile.TemporaryDirectory() as work:
        node = Node(work)
        try:
            client = strata_client.Client([node.address])
            check_pooled_lookups(node, client)
            check_pushes(node, client, 1000, prefetch=False, max_staleness=0)
            check_pushes(node, client, 2000, prefetch=True, max_staleness=3)
            check_pushes(node, client, 2500, prefetch=False, max_staleness=2)
            check_prefetch(node, client)
            check_close_waits(node, client)
            check_two_tower(node)
            check_errors(node, client)
        finally:
            rc = node.stop()
            if rc not in (0, -signal.SIGKILL):
                print("".join(node.lines))
                raise AssertionError("strata node exited %d" % rc)
    print("strata_torch module checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
