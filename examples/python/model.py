#!/usr/bin/env python3
"""An external local model for asyrevel in Python, standard library only.

The same model as examples/quantized (a linear model with weights quantised
to a grid of step s and outputs clipped to [-C, C]), to show the protocol of
model/EXTERNAL.md in another language. msgpack is not in the standard
library, so this file carries the small subset the protocol needs.

    python3 model.py [--step 0.0625] [--clip 4] [--k 0]

Run it through the party, e.g.
    asyrevel train ... --model external --model-cmd "python3 examples/python/model.py"
"""

import argparse
import math
import random
import struct
import sys

PROTOCOL_VERSION = 1
MAX_FRAME = 64 << 20


# --- a minimal msgpack: maps, arrays, str, bin, ints, floats, bool, nil ---

def pack(obj, out):
    """Append the msgpack encoding of obj to the bytearray out."""
    if obj is None:
        out.append(0xC0)
    elif obj is True:
        out.append(0xC3)
    elif obj is False:
        out.append(0xC2)
    elif isinstance(obj, int):
        if 0 <= obj < 128:
            out.append(obj)
        elif 0 <= obj < 1 << 64:
            out += b"\xcf" + struct.pack(">Q", obj)
        elif -32 <= obj < 0:
            out += struct.pack(">b", obj)
        elif -(1 << 63) <= obj < 0:
            out += b"\xd3" + struct.pack(">q", obj)
        else:
            raise ValueError("integer out of range")
    elif isinstance(obj, float):
        out += b"\xcb" + struct.pack(">d", obj)
    elif isinstance(obj, str):
        b = obj.encode("utf-8")
        if len(b) < 32:
            out.append(0xA0 | len(b))
        else:
            out += b"\xdb" + struct.pack(">I", len(b))
        out += b
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        out += b"\xc6" + struct.pack(">I", len(obj))
        out += obj
    elif isinstance(obj, dict):
        out += b"\xdf" + struct.pack(">I", len(obj))
        for k, v in obj.items():
            pack(k, out)
            pack(v, out)
    elif isinstance(obj, (list, tuple)):
        out += b"\xdd" + struct.pack(">I", len(obj))
        for v in obj:
            pack(v, out)
    else:
        raise TypeError("cannot pack %r" % type(obj))
    return out


def unpack(buf):
    """Decode one msgpack value that fills buf (bytes) exactly."""
    value, off = _unpack(memoryview(buf), 0)
    if off != len(buf):
        raise ValueError("%d trailing bytes" % (len(buf) - off))
    return value


def _unpack(b, off):
    c = b[off]
    off += 1
    if c <= 0x7F:
        return c, off
    if c >= 0xE0:
        return c - 0x100, off
    if 0x80 <= c <= 0x8F:
        return _map(b, off, c & 0x0F)
    if 0x90 <= c <= 0x9F:
        return _array(b, off, c & 0x0F)
    if 0xA0 <= c <= 0xBF:
        n = c & 0x1F
        return str(b[off:off + n], "utf-8"), off + n
    if c == 0xC0:
        return None, off
    if c in (0xC2, 0xC3):
        return c == 0xC3, off
    sizes = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}
    if c in sizes:
        n, off = _len(b, off, sizes[c])
        if off + n > len(b):
            raise ValueError("truncated value")
        raw = bytes(b[off:off + n])
        return (raw if c <= 0xC6 else raw.decode("utf-8")), off + n
    fixed = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I",
             0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
    if c in fixed:
        fmt = fixed[c]
        n = struct.calcsize(fmt)
        return struct.unpack_from(fmt, b, off)[0], off + n
    if c in (0xDC, 0xDD):
        n, off = _len(b, off, 2 if c == 0xDC else 4)
        return _array(b, off, n)
    if c in (0xDE, 0xDF):
        n, off = _len(b, off, 2 if c == 0xDE else 4)
        return _map(b, off, n)
    raise ValueError("unsupported msgpack code 0x%02x" % c)


def _len(b, off, size):
    fmt = {1: ">B", 2: ">H", 4: ">I"}[size]
    return struct.unpack_from(fmt, b, off)[0], off + size


def _map(b, off, n):
    d = {}
    for _ in range(n):
        k, off = _unpack(b, off)
        v, off = _unpack(b, off)
        d[k] = v
    return d, off


def _array(b, off, n):
    a = []
    for _ in range(n):
        v, off = _unpack(b, off)
        a.append(v)
    return a, off


# --- frames: 4-byte little-endian length, then one msgpack map ---

def read_frame(f):
    hdr = f.read(4)
    if not hdr:
        return None  # EOF: the party closed our stdin
    if len(hdr) < 4:
        raise EOFError("truncated frame header")
    (n,) = struct.unpack("<I", hdr)
    if n == 0 or n > MAX_FRAME:
        raise ValueError("frame of %d bytes" % n)
    data = f.read(n)
    if len(data) < n:
        raise EOFError("truncated frame")
    return unpack(data)


def write_frame(f, msg):
    payload = pack(msg, bytearray())
    f.write(struct.pack("<I", len(payload)))
    f.write(payload)
    f.flush()


# --- the model ---

def round_half_away(v):
    """Round half away from zero, exactly as Go's math.Round."""
    a = abs(v)
    r = math.floor(a)
    if a - r >= 0.5:
        r += 1.0
    return math.copysign(r, v)


class Quantized:
    def __init__(self, step, clip, k):
        self.step, self.clip, self.k, self.d = step, clip, k, 0

    def describe(self, req):
        if req.get("version") != PROTOCOL_VERSION:
            raise ValueError("protocol version %r, this model speaks %d"
                             % (req.get("version"), PROTOCOL_VERSION))
        want = req.get("out_dim", 0)
        if self.k and want and want != self.k:
            raise ValueError("started with --k %d, the party needs %d" % (self.k, want))
        self.k = self.k or want or 1
        self.d = req["in_dim"]
        print("ready: in_dim=%d out_dim=%d" % (self.d, self.k), file=sys.stderr, flush=True)
        return {"name": "quantized-py", "version": PROTOCOL_VERSION,
                "in_dim": self.d, "out_dim": self.k,
                "num_params": self.d * self.k, "init": "model"}

    def init(self, req):
        rng = random.Random(req["seed"])
        w = [0.01 * (2 * rng.random() - 1) for _ in range(self.d * self.k)]
        return {"params": struct.pack("<%dd" % len(w), *w)}

    def forward(self, req):
        n, k, np_ = req["n"], self.k, self.d * self.k
        params = req["params"]
        if len(params) != 8 * np_:
            raise ValueError("params of %d bytes, want %d" % (len(params), 8 * np_))
        s = self.step
        qw = [s * round_half_away(v / s) for v in struct.unpack("<%dd" % np_, params)]
        indptr = struct.unpack("<%dI" % (n + 1), req["indptr"])
        nnz = len(req["indices"]) // 4
        indices = struct.unpack("<%dI" % nnz, req["indices"])
        values = struct.unpack("<%df" % nnz, req["values"])
        out = []
        for j in range(n):
            z = [0.0] * k
            for p in range(indptr[j], indptr[j + 1]):
                c, v = indices[p], values[p]
                if c >= self.d:
                    raise ValueError("column %d out of range" % c)
                for o in range(k):
                    z[o] += qw[c * k + o] * v
            out.extend(max(-self.clip, min(self.clip, t)) for t in z)
        return {"out": struct.pack("<%dd" % len(out), *out)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step", type=float, default=1 / 16)
    ap.add_argument("--clip", type=float, default=4.0)
    ap.add_argument("--k", type=int, default=0)
    args = ap.parse_args()
    model = Quantized(args.step, args.clip, args.k)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        req = read_frame(stdin)
        if req is None:
            return
        op, seq = req.get("op"), req.get("seq", 0)
        try:
            handler = {"describe": model.describe, "init": model.init,
                       "forward": model.forward}.get(op)
            if handler is None:
                raise ValueError("unknown op %r" % op)
            answer = handler(req)
            answer.update(op=op, seq=seq)
        except Exception as exc:  # report, do not crash: the party stops cleanly
            answer = {"op": "error", "seq": seq, "message": "%s: %s" % (type(exc).__name__, exc)}
        write_frame(stdout, answer)


if __name__ == "__main__":
    main()
