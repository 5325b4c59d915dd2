#!/usr/bin/env python3
"""spead2 receive benchmark on a digitiser pcap, for `gpucbf bench recv`.

Receives the feed the way katgpucbf's F-engine does: a spead2.recv.ChunkRingStream (ChunkStream) whose
placement callback maps (timestamp, digitiser_id) to a chunk and heap slot. katgpucbf
writes that callback as a numba cfunc; without numba, this script compiles the same
callback from C with the system compiler (gcc/cc) and hands it to spead2 as a PyCapsule.
If no compiler is available it falls back to a plain heap loop (spead2.recv.Stream) and
says so in "mode". Prints one JSON line.

Transports: "pcap" (add_udp_pcap_file_reader on --pcap, passes repeated until
--min-seconds), or "udp": binds a loopback socket with a receive buffer of --buffer bytes
(SO_RCVBUFFORCE), prints "port N", waits for a line on stdin while the caller fills the
socket with the feed and a stop heap, then times the stream draining it (one pass).
"""

import argparse
import ctypes
import socket
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import spead2
import spead2.recv

TIMESTAMP_ID = 0x1600
DIGITISER_ID_ID = 0x3101

PLACE_C = r"""
#include <stddef.h>
#include <stdint.h>
struct chunk_place_data {
    const uint8_t *packet; size_t packet_size; const int64_t *items;
    int64_t chunk_id; size_t heap_index; size_t heap_offset; uint64_t *batch_stats;
    uint8_t *extra; size_t extra_offset; size_t extra_size;
};
void place(void *p, size_t size) {
    struct chunk_place_data *d = p;
    (void)size;
    int64_t ts = d->items[0], pol = d->items[1], len = d->items[2];
    if (len != HEAP_BYTES || ts < 0 || pol < 0 || (ts % HEAP_SAMPLES) != 0)
        return;
    d->chunk_id = ts / CHUNK_SAMPLES;
    d->heap_index = (size_t)(pol & 1) * HEAPS_PER_POL + (size_t)((ts % CHUNK_SAMPLES) / HEAP_SAMPLES);
    d->heap_offset = d->heap_index * HEAP_BYTES;
}
"""


def compile_place(heap_samples, bits, chunk_samples):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return None
    tmp = tempfile.mkdtemp(prefix="gpucbf-spead2-")
    src = os.path.join(tmp, "place.c")
    lib = os.path.join(tmp, "place.so")
    with open(src, "w") as f:
        f.write(PLACE_C)
    defs = [
        f"-DHEAP_BYTES={heap_samples * bits // 8}",
        f"-DHEAP_SAMPLES={heap_samples}",
        f"-DCHUNK_SAMPLES={chunk_samples}",
        f"-DHEAPS_PER_POL={chunk_samples // heap_samples}",
    ]
    subprocess.run([cc, "-O2", "-shared", "-fPIC", *defs, "-o", lib, src], check=True)
    so = ctypes.CDLL(lib)
    addr = ctypes.cast(so.place, ctypes.c_void_p).value
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new(addr, b"void (void *, size_t)", None)
    return so, capsule


def make_stream(heap_samples, bits, chunk_samples, place, affinity, stop_on_stop_item):
    heap_bytes = heap_samples * bits // 8
    n_heaps = 2 * (chunk_samples // heap_samples)
    items = [TIMESTAMP_ID, DIGITISER_ID_ID, spead2.HEAP_LENGTH_ID]
    chunk_cfg = spead2.recv.ChunkStreamConfig(items=items, max_chunks=2, place=(place, None, None))
    stream_cfg = spead2.recv.StreamConfig(max_heaps=4, stop_on_stop_item=stop_on_stop_item)
    data_ring = spead2.recv.ChunkRingbuffer(4)
    free_ring = spead2.recv.ChunkRingbuffer(4)
    pool = spead2.ThreadPool(1, [affinity]) if affinity is not None else spead2.ThreadPool(1)
    stream = spead2.recv.ChunkRingStream(pool, stream_cfg, chunk_cfg, data_ring, free_ring)
    for _ in range(4):
        stream.add_free_chunk(
            spead2.recv.Chunk(present=np.zeros(n_heaps, np.uint8), data=np.zeros(n_heaps * heap_bytes, np.uint8))
        )
    return stream, data_ring


def drain(stream, data_ring):
    chunks = 0
    heaps = 0
    for chunk in data_ring:
        chunks += 1
        heaps += int(chunk.present.sum())
        stream.add_free_chunk(chunk)
    return heaps, chunks


def run_udp(args, place):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, 33, args.buffer)  # SO_RCVBUFFORCE
    sock.bind(("127.0.0.1", 0))
    print(f"port {sock.getsockname()[1]}", flush=True)
    sys.stdin.readline()
    stream, data_ring = make_stream(args.heap_samples, args.bits, args.chunk_samples, place, args.affinity, True)
    t0, c0 = time.perf_counter(), time.process_time()
    stream.add_udp_reader(sock)
    heaps, chunks = drain(stream, data_ring)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    stats = stream.stats
    stream.stop()
    # Data packets only (the stop heap's packet is not one).
    return stats["packets"] - 1, heaps, chunks, dt, cpu


def run_chunks(path, heap_samples, bits, chunk_samples, place, affinity):
    stream, data_ring = make_stream(heap_samples, bits, chunk_samples, place, affinity, False)
    t0, c0 = time.perf_counter(), time.process_time()
    stream.add_udp_pcap_file_reader(path)
    heaps, chunks = drain(stream, data_ring)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    stream.stop()
    return stream.stats["packets"], heaps, chunks, dt, cpu


def run_heaps(path):
    stream = spead2.recv.Stream(spead2.ThreadPool(1), spead2.recv.StreamConfig(max_heaps=4))
    t0, c0 = time.perf_counter(), time.process_time()
    stream.add_udp_pcap_file_reader(path)
    heaps = sum(1 for _ in stream)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    return stream.stats["packets"], heaps, 0, dt, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pcap", required=True)
    ap.add_argument("--heap-samples", type=int, default=4096)
    ap.add_argument("--bits", type=int, default=10)
    ap.add_argument("--chunk-samples", type=int, default=1 << 20)
    ap.add_argument("--min-seconds", type=float, default=2.0)
    ap.add_argument("--transport", choices=["pcap", "udp"], default="pcap")
    ap.add_argument("--affinity", type=int, default=None, help="core for spead2's receive thread")
    ap.add_argument("--buffer", type=int, default=256 << 20, help="UDP socket buffer (bytes)")
    args = ap.parse_args()
    compiled = compile_place(args.heap_samples, args.bits, args.chunk_samples)
    mode = "ChunkStream + C placement callback" if compiled else "heap loop (no C compiler)"
    mode += f", {args.transport}"
    if args.transport == "udp":
        if not compiled:
            raise SystemExit("the udp transport needs the C placement callback (no C compiler found)")
        p, h, c, dt, cpu = run_udp(args, compiled[1])
        print(json.dumps({
            "backend": "spead2", "spead2_version": spead2.__version__, "mode": mode,
            "passes": 1, "packets": p, "heaps": h, "chunks": c,
            "seconds": dt, "cpu_seconds": cpu, "packets_per_second": p / dt if dt > 0 else 0.0,
        }))
        return
    packets = heaps = chunks = 0
    seconds = cpu_seconds = 0.0
    passes = 0
    while seconds < args.min_seconds or passes == 0:
        if compiled:
            p, h, c, dt, cpu = run_chunks(args.pcap, args.heap_samples, args.bits, args.chunk_samples, compiled[1], args.affinity)
        else:
            p, h, c, dt, cpu = run_heaps(args.pcap)
        packets += p
        heaps += h
        chunks += c
        seconds += dt
        cpu_seconds += cpu
        passes += 1
    print(json.dumps({
        "backend": "spead2", "spead2_version": spead2.__version__, "mode": mode,
        "passes": passes, "packets": packets, "heaps": heaps, "chunks": chunks,
        "seconds": seconds, "cpu_seconds": cpu_seconds,
        "packets_per_second": packets / seconds if seconds > 0 else 0.0,
    }))


if __name__ == "__main__":
    sys.exit(main())
