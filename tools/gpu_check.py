#!/usr/bin/env python3
"""Compares two gpucbf output captures packet by packet (same order): payload bytes of the
SPEAD heaps' data items. Usage: gpu_check.py A.pcap B.pcap int8|int32. Prints the fraction of
values that differ by more than 1 (int8, F-engine tolerance) or at all (int32, exact)."""
import struct
import sys

import numpy as np


def payloads(path):
    data = open(path, "rb").read()
    e = "<" if struct.unpack("<I", data[:4])[0] in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    off = 24
    out = []
    while off < len(data):
        _, _, incl, _ = struct.unpack(e + "IIII", data[off:off + 16])
        frame = data[off + 16: off + 16 + incl]
        off += 16 + incl
        ip = frame[14:]
        ihl = (ip[0] & 0xF) * 4
        udp = ip[ihl:]
        ulen = struct.unpack("!H", udp[4:6])[0]
        spead = udp[8:ulen]
        n = struct.unpack("!H", spead[6:8])[0]
        ids = [(struct.unpack("!Q", spead[8 + 8 * i: 16 + 8 * i])[0] >> 48) & 0x7FFF for i in range(n)]
        if 0x4300 in ids or 0x1800 in ids:  # data heaps only (not descriptors)
            out.append(spead[8 + 8 * n:])
    return out


a, b, kind = sys.argv[1], sys.argv[2], sys.argv[3]
pa, pb = payloads(a), payloads(b)
assert len(pa) == len(pb), (len(pa), len(pb))
dt = np.int8 if kind == "int8" else "<i4"
x = np.concatenate([np.frombuffer(p, dt) for p in pa]).astype(np.int64)
y = np.concatenate([np.frombuffer(p, dt) for p in pb]).astype(np.int64)
d = np.abs(x - y)
tol = 1 if kind == "int8" else 0
frac = float(np.mean(d > tol))
print(f"{kind}: {x.size} values, max |diff| {d.max()}, fraction beyond {tol}: {frac:.6f}")
sys.exit(0 if (frac <= 1e-3 if kind == "int8" else frac == 0) else 1)
