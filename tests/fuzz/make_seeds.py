#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).

Seeds are small well-formed inputs, one per path worth reaching: the
fuzzer mutates them. The frame corpus is also the frame decoder's regression
corpus: files named valid-* are well-formed node-to-node frames (corpus_test
expects them accepted); every other one is malformed in one way and must be
rejected by decode_frame or the payload rules (docs/wire-format.md). Files named crash-* are inputs that once crashed a
target (kept as regression tests; this script writes the ones found while
writing it). Run it again after a format change:
    python3 tests/fuzz/make_seeds.py
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


# --- wire: serving frames (client/wire.hpp) --------------------------------------------
LOOKUP, ROWS, PREFETCH, ACK, ERROR, SUBSCRIBE, UPDATES, PUSH = range(1, 9)
TABLES, TABLE_LIST, LIST_KEYS, KEY_LIST = range(11, 15)


def wire_frame(ftype, payload, request=1, length=None, crc=None):
    length = len(payload) if length is None else length
    crc = crc32c(payload) if crc is None else crc
    return struct.pack("<IHHIIQ", 0x56525453, 1, ftype, length, crc, request) + payload


def text16(s):
    return struct.pack("<H", len(s)) + s


def u64s(values):
    return b"".join(struct.pack("<Q", v) for v in values)


def f32s(values):
    return b"".join(struct.pack("<f", v) for v in values)


wire = {
    "lookup": wire_frame(LOOKUP, text16(b"ads") + struct.pack("<I", 3) + u64s([1, 2, 3])),
    "prefetch-then-ack": wire_frame(PREFETCH, text16(b"ads") + struct.pack("<I", 1) + u64s([9]))
    + wire_frame(ACK, struct.pack("<I", 1), request=2),
    "rows": wire_frame(ROWS, struct.pack("<II", 2, 2) + u64s([5, 6]) + f32s([0.5, -1, 2, 3])),
    "error": wire_frame(ERROR, struct.pack("<HI", 4, 12) + b"no such table"[:12]),
    "subscribe": wire_frame(SUBSCRIBE, text16(b"ads") + u64s([77, 10]), request=0),
    "updates": wire_frame(UPDATES, text16(b"ads") + u64s([77, 11]) + struct.pack("<II", 1, 2)
                          + u64s([4, 8]) + u64s([3, 3]) + f32s([1, 2]), request=0),
    "push": wire_frame(PUSH, text16(b"ads") + struct.pack("<II", 2, 1) + u64s([4])
                       + f32s([0.25, -0.25])),
    # with its optional push id (issue 15 item 5)
    "push-with-id": wire_frame(PUSH, text16(b"ads") + struct.pack("<II", 2, 1) + u64s([4])
                               + f32s([0.25, -0.25]) + u64s([0x1122334455667788])),
    # A rows reply whose counts wrap 8 + n*8 + n*dim*4 around to 8 bytes: the
    # client's zero-copy receive resized its buffers to gigabytes.
    "crash-rows-count-overflow": wire_frame(ROWS, struct.pack("<II", 0xFFFFFFFE, 1 << 30)),
    # metadata requests and their replies (issue 22)
    "tables-then-list": wire_frame(TABLES, b"")
    + wire_frame(TABLE_LIST, struct.pack("<I", 1) + text16(b"ads") + struct.pack("<I", 9),
                 request=2),
    "list-keys-then-keys": wire_frame(LIST_KEYS, text16(b"ads") + struct.pack("<I", 2))
    + wire_frame(KEY_LIST, struct.pack("<I", 2) + u64s([1, 2]), request=2),
}

# --- serving_http: `strata serve`'s HTTP API ------------------------------------------


def http(method, target, body=b"", headers=()):
    lines = [f"{method} {target} HTTP/1.1", "Host: strata"] + list(headers)
    if body or method == "POST":
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


serving_http = {
    "health": http("GET", "/health"),
    "lookup": http("POST", "/lookup", b'{"table":"ads","keys":[1,2,"18446744073709551615"]}'),
    "lookup-unknown-table": http("POST", "/lookup", b'{"table":"clicks","keys":[1]}'),
    "lookup-bad-key": http("POST", "/lookup", b'{"table":"ads","keys":[-1, 2.5, "x"]}'),
    "keep-alive-two": http("GET", "/health") + http("POST", "/lookup", b'{"table":"ads","keys":[3]}',
                                                    ["Connection: close"]),
    "chunked": b"POST /lookup HTTP/1.1\r\nHost: strata\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"10\r\n{\"table\":\"ads\",\"\r\n9\r\nkeys\":[1]}\r\n0\r\n\r\n",
    "wrong-method": http("DELETE", "/lookup"),
    "keys": http("GET", "/keys?table=ads&limit=3&x"),
    # A target that is not UTF-8, quoted in the 404's JSON: dumping it threw,
    # and the exception ended the server process.
    "crash-non-utf8-target": b"GET /looku\xbe HTTP/1.1\r\nHost: strata\r\n\r\n",
}

# --- admin_http: the admin API (token "fuzz-token", see admin_http_fuzz.cpp) --------
AUTH = "Authorization: Bearer fuzz-token"
admin_http = {
    "status": http("GET", "/status", headers=[AUTH]),
    "scale": http("POST", "/scale", b'{"shards": 4}', [AUTH]),
    "scale-placement": http("POST", "/scale", b'{"shards": 2, "placement": ["node-0", "node-1"]}',
                            [AUTH]),
    "scale-spread-refused": http("POST", "/scale", b'{"shards": 100, "placement": "spread"}', [AUTH]),
    "checkpoint": http("POST", "/checkpoint", headers=[AUTH]),
    "stop": http("POST", "/stop", headers=[AUTH]),
    "no-token": http("GET", "/status"),
    "malformed-json": http("POST", "/scale", b'{"shards": ', [AUTH]),
    # JSON nested 30000 deep (under the 64 KiB body limit), quoted back in the
    # error: the recursive dump overflowed the connection thread's stack.
    "crash-deep-nesting": http("POST", "/scale", b'{"shards": ' + b"[" * 30000 + b"]" * 30000 + b"}",
                         [AUTH]),
    # As serving_http's: a non-UTF-8 target quoted in the 404 ended the process.
    "crash-non-utf8-target": b"GET /stat\xbe HTTP/1.1\r\nHost: strata\r\n" + AUTH.encode()
    + b"\r\n\r\n",
}

# --- reader: first byte picks format and window (reader_fuzz.cpp) -------------------
tsv_line = "\t".join(["1"] + [str(i) for i in range(13)] + ["%08x" % (i * 7919) for i in range(26)])
tsv_missing = "\t".join(["0", "", "-1", "260.0"] + [""] * 10 + ["68fd1e64"] + [""] * 25)
csv_header = ",".join(["label"] + ["I%d" % i for i in range(1, 14)] + ["C%d" % i for i in range(1, 27)])
csv_line = ",".join(["1.0"] + [str(i * 3) for i in range(13)] + ["%x" % (i * 31) for i in range(26)])
reader = {
    "criteo-tsv": b"\x00" + (tsv_line + "\n" + tsv_missing + "\r\n" + tsv_line).encode(),
    "criteo-tsv-bad-lines": b"\x00" + b"2\tx\n\n1\t1\n" + tsv_line.encode() + b"\n",
    "csv": b"\x01" + (csv_header + "\n" + csv_line + "\n" + csv_line.replace("1.0", "0", 1)
                      + "\n").encode(),
    "csv-sharded": b"\x05" + (csv_header + "\n" + csv_line + "\n" + csv_line + "\n").encode(),
    "libffm": b"\x02" + b"1 0:5:1 1:7:0.5 2:9:1\n0 3:1:1\n-1 0:2:2\n",
    "libffm-bad": b"\x02" + b"1 0:5\n2 1:1:1\nx\n1 a:b:c\n",
}

# --- frame: node-to-node transport frames (transport/frame.hpp) --------------------------
MAGIC = 0x46525453


def header(ftype, seq, payload_len, crc=0, magic=MAGIC, version=3, sender=7, request=1,
           target=0, reserved=0):
    return struct.pack("<IHHQQQIIII", magic, version, ftype, sender, seq, request, target,
                       payload_len, crc, reserved)


def node_frame(ftype, seq, payload, **kw):
    h = header(ftype, seq, len(payload), **kw)
    crc = crc32c(payload, crc32c(h))
    return header(ftype, seq, len(payload), crc=crc, **kw) + payload


def vec_u64(values):
    return struct.pack("<Q", len(values)) + b"".join(struct.pack("<Q", v) for v in values)


def string(s):
    return struct.pack("<Q", len(s)) + s


SHARD_PULL, SHARD_PUSH, SHARD_TICK, HEARTBEAT, REPLY_ERROR = 16, 17, 20, 3, 65
SHARD_PULL_AHEAD = 23
SHARD_MIGRATE, SHARD_COMMIT, CACHE_MAP, SPAWN_SHARD = 38, 43, 31, 56
WORKER_REBIND = 46


def vec_u32(values):
    return struct.pack("<Q", len(values)) + b"".join(struct.pack("<I", v) for v in values)


def actor_refs(refs):  # (node name, target) pairs: transport/payloads.hpp actor_ref
    return struct.pack("<Q", len(refs)) + b"".join(string(n) + struct.pack("<I", t)
                                                   for n, t in refs)


# routing_wire: epoch, owners, shards as actor refs
routing = struct.pack("<Q", 2) + vec_u32([0, 1, 0, 1]) + actor_refs([(b"n0", 0x10000),
                                                                     (b"n1", 0x10001)])
frame = {
    "valid-shard-pull": node_frame(SHARD_PULL, 1, vec_u64([1, 2, 3])),
    "valid-shard-pull-ahead": node_frame(SHARD_PULL_AHEAD, 1, vec_u64([4, 5])),
    "valid-heartbeat": node_frame(HEARTBEAT, 0, b""),
    # keys, grads, epoch 9, push id 77 (version 2)
    "valid-push": node_frame(SHARD_PUSH, 2, vec_u64([5]) + struct.pack("<Qff", 2, 1.0, -1.0)
                        + struct.pack("<QQ", 9, 77)),
    "valid-reply-error": node_frame(REPLY_ERROR, 3, string(b"node 'a': boom")),
    "empty": b"",
    "truncated-header": node_frame(SHARD_PULL, 1, vec_u64([1]))[:20],
    "bad-magic": node_frame(SHARD_PULL, 1, vec_u64([1]), magic=0x12345678),
    "other-version": node_frame(SHARD_PULL, 1, vec_u64([1]), version=2),
    "unknown-type": node_frame(999, 1, vec_u64([1])),
    "reserved-set": node_frame(SHARD_PULL, 1, vec_u64([1]), reserved=1),
    "oversized-length": header(SHARD_PULL, 1, 0xFFFFFFFF) + b"\0" * 16,
    "truncated-payload": node_frame(SHARD_PULL, 1, vec_u64([1, 2, 3, 4]))[:48 + 20],
    "bad-checksum": node_frame(SHARD_PULL, 1, vec_u64([1, 2]))[:-1] + b"\x01",
    "control-with-seq": node_frame(HEARTBEAT, 5, b""),
    "data-without-seq": node_frame(SHARD_PULL, 0, vec_u64([1])),
    "count-overflow": node_frame(SHARD_PULL, 1, struct.pack("<Q", 1 << 62) + b"\0" * 8),
    "push-truncated-grads": node_frame(SHARD_PUSH, 1, vec_u64([5]) + struct.pack("<Q", 1000)),
    "tick-trailing-bytes": node_frame(SHARD_TICK, 1, struct.pack("<IB", 3, 0)),
    "error-text-too-long": node_frame(REPLY_ERROR, 1, struct.pack("<Q", 100) + b"short"),
    "extra-bytes-after-frame": node_frame(SHARD_PULL, 1, vec_u64([1])) + b"\0\0",
    # scaling across nodes (issue 19): shards named as (node, target)
    "valid-shard-commit": node_frame(SHARD_COMMIT, 1, routing),
    "valid-cache-map": node_frame(CACHE_MAP, 1, routing),
    "valid-shard-migrate": node_frame(SHARD_MIGRATE, 1, struct.pack("<Q", 2) + vec_u32([3, 7])
                                      + actor_refs([(b"n2", 0x10003), (b"n2", 0x10003)])),
    "valid-spawn-shard": node_frame(SPAWN_SHARD, 1, struct.pack("<I", 3)),
    "commit-ref-name-overflow": node_frame(SHARD_COMMIT, 1, struct.pack("<Q", 2) + vec_u32([0])
                                           + struct.pack("<QQ", 1, 1 << 40) + b"n0"),
    "commit-ref-truncated-target": node_frame(SHARD_COMMIT, 1, routing[:-2]),
    "spawn-shard-path": node_frame(SPAWN_SHARD, 1, struct.pack("<I", 3) + string(b"/etc")),
    # a drain relocating cache tiers: a worker told its cache tiers as refs
    "valid-worker-rebind": node_frame(WORKER_REBIND, 1, actor_refs([(b"n0", 0x20000),
                                                                   (b"n1", 0x20001)])),
    "worker-rebind-truncated-ref": node_frame(WORKER_REBIND, 1,
                                              actor_refs([(b"n0", 0x20000)])[:-3]),
}

corpora = {"frame": frame, "wire": wire, "serving_http": serving_http, "admin_http": admin_http, "reader": reader}
for target, seeds in corpora.items():
    folder = os.path.join(HERE, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} seeds to {folder}")

# manifest: the shipped examples (valid, richly commented) and small variants.
folder = os.path.join(HERE, "corpus", "manifest")
os.makedirs(folder, exist_ok=True)
for example in ("local", "cluster3", "large"):
    shutil.copyfile(os.path.join(ROOT, "deploy", "examples", example + ".yaml"),
                    os.path.join(folder, example + ".yaml"))
small = {
    "minimal.yaml": b"name: m\nshards:\n  ssd_path: state\ndata:\n  path: d.tsv\n",
    "broken-size.yaml": b"name: broken\nshards:\n  count: 2\n  dram_bytes: lots\n  ssd_path: s\n"
    b"data:\n  path: d.tsv\n",
    "split.yaml": b"name: s\nshards:\n  ssd_path: st\nworkers:\n  count: 2\ndata:\n  path: d.csv\n"
    b"  format: csv\nsplit:\n  held_out: 0.1\n",
}
for name, data in small.items():
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)
print(f"wrote {3 + len(small)} seeds to {folder}")
