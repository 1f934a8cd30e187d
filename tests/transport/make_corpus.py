#!/usr/bin/env python3
"""Writes the frame-decoder regression corpus (tests/fuzz/corpus/frame/).

Files named valid-* are well-formed frames (fuzzer seeds; the corpus test
expects them accepted); every other file is malformed in one way and must be
rejected by decode_frame or by the payload rules (docs/wire-format.md).
Run it again after a wire-format change: python3 tests/transport/make_corpus.py
"""
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz", "corpus", "frame")
MAGIC = 0x46525453


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def header(ftype, seq, payload_len, crc=0, magic=MAGIC, version=1, sender=7, request=1,
           target=0, reserved=0):
    return struct.pack("<IHHQQQIIII", magic, version, ftype, sender, seq, request, target,
                       payload_len, crc, reserved)


def frame(ftype, seq, payload, **kw):
    h = header(ftype, seq, len(payload), **kw)
    crc = crc32c(payload, crc32c(h))
    return header(ftype, seq, len(payload), crc=crc, **kw) + payload


def vec_u64(values):
    return struct.pack("<Q", len(values)) + b"".join(struct.pack("<Q", v) for v in values)


def string(s):
    return struct.pack("<Q", len(s)) + s


SHARD_PULL, SHARD_PUSH, SHARD_TICK, HEARTBEAT, REPLY_ERROR = 16, 17, 20, 3, 65
cases = {
    "valid-shard-pull": frame(SHARD_PULL, 1, vec_u64([1, 2, 3])),
    "valid-heartbeat": frame(HEARTBEAT, 0, b""),
    "valid-push": frame(SHARD_PUSH, 2, vec_u64([5]) + struct.pack("<Qff", 2, 1.0, -1.0)
                        + struct.pack("<Q", 9)),
    "valid-reply-error": frame(REPLY_ERROR, 3, string(b"node 'a': boom")),
    "empty": b"",
    "truncated-header": frame(SHARD_PULL, 1, vec_u64([1]))[:20],
    "bad-magic": frame(SHARD_PULL, 1, vec_u64([1]), magic=0x12345678),
    "other-version": frame(SHARD_PULL, 1, vec_u64([1]), version=2),
    "unknown-type": frame(999, 1, vec_u64([1])),
    "reserved-set": frame(SHARD_PULL, 1, vec_u64([1]), reserved=1),
    "oversized-length": header(SHARD_PULL, 1, 0xFFFFFFFF) + b"\0" * 16,
    "truncated-payload": frame(SHARD_PULL, 1, vec_u64([1, 2, 3, 4]))[:48 + 20],
    "bad-checksum": frame(SHARD_PULL, 1, vec_u64([1, 2]))[:-1] + b"\x01",
    "control-with-seq": frame(HEARTBEAT, 5, b""),
    "data-without-seq": frame(SHARD_PULL, 0, vec_u64([1])),
    "count-overflow": frame(SHARD_PULL, 1, struct.pack("<Q", 1 << 62) + b"\0" * 8),
    "push-truncated-grads": frame(SHARD_PUSH, 1, vec_u64([5]) + struct.pack("<Q", 1000)),
    "tick-trailing-bytes": frame(SHARD_TICK, 1, struct.pack("<IB", 3, 0)),
    "error-text-too-long": frame(REPLY_ERROR, 1, struct.pack("<Q", 100) + b"short"),
    "extra-bytes-after-frame": frame(SHARD_PULL, 1, vec_u64([1])) + b"\0\0",
}

os.makedirs(HERE, exist_ok=True)
for name, data in cases.items():
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
print(f"wrote {len(cases)} files to {HERE}")
