"""dsim → 3 × gpucbf fgpu → gpucbf xbgpu (CPU backend), all through pcap files; spead2
decodes the correlation products, which must equal numpy's correlation of the F-engine
heaps exactly (8-bit, and 4-bit: fgpu --send-sample-bits 4 → xbgpu --sample-bits 4); a lost
F-engine heap gives MISSING on that antenna's baselines."""

import numpy as np
import pytest
import spead2
import spead2.recv

from conftest import read_pcap, run, write_pcap

ADC = 1712e6
C = 1024
JONES = 262144
SPH = JONES // C
STEP = SPH * 2 * C
N_ANTS = 3
THRESHOLD = 4


def heaps(path, payload_id, dtype):
    stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=16))
    stream.add_udp_pcap_file_reader(str(path))
    out = []
    for heap in stream:
        items = {it.id: (it.immediate_value if it.is_immediate else np.frombuffer(it, dtype if it.id == payload_id else np.uint8)) for it in heap.get_items()}
        if payload_id in items:
            out.append((heap.cnt, items))
    return out


def make_fengine_pcaps(gpucbf, tmp_path, bits=8):
    fpcaps = []
    for a in range(N_ANTS):
        d = tmp_path / f"d{a}.pcap"
        f = tmp_path / f"f{a}.pcap"
        sig = "base = cw(0.2, 300e6) + wgn(0.05, 42); base + wgn(0.03); base + wgn(0.03);"
        run([gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--heaps", "1536", "--pcap", str(d),
             "--dither-seed", str(10 + a), "--signals", sig, "127.0.0.1:7148", "127.0.0.1:7149"])
        run([gpucbf, "fgpu", "--adc-sample-rate", str(ADC), "--sync-time", "0", "--feng-id", str(a),
             "--array-size", str(N_ANTS), "--wideband", f"name=wb,channels={C},dst=127.0.0.1:7150,jones_per_batch={JONES}",
             "--recv-chunk-samples", str(1 << 20), "--gain", "0.002" if bits == 8 else "0.0002",
             "--dither-seed", "3", "--send-sample-bits", str(bits),
             "--send-pcap", str(f), "--backend", "cpu", str(d)])
        fpcaps.append(f)
    return fpcaps


def merge(fpcaps, out, drop=None):
    """Interleaves the F-engine packets of all antennas into one capture (optionally
    dropping the packets of one (feng_id, timestamp) heap)."""
    per = [[p for _, _, _, _, p in read_pcap(f)] for f in fpcaps]
    grams = []
    for k in range(max(map(len, per))):
        for a, ps in enumerate(per):
            if k < len(ps):
                p = ps[k]
                ts = int.from_bytes(p[8 + 8 * 4 + 2 : 8 + 8 * 5], "big")
                if drop is not None and drop == (a, ts):
                    continue
                grams.append((("239.10.0.1", 7150), p))
    write_pcap(out, grams)


def xbgpu(gpucbf, fpcap, xpcap, bits=8):
    return run([gpucbf, "xbgpu", "--adc-sample-rate", str(ADC), "--sync-time", "0", "--array-size", str(N_ANTS),
                "--channels", str(C), "--channels-per-substream", str(C), "--samples-between-spectra", str(2 * C),
                "--jones-per-batch", str(JONES), "--heaps-per-fengine-per-chunk", "4", "--send-enabled",
                "--corrprod", f"name=bc,dst=127.0.0.1:7160,heap_accumulation_threshold={THRESHOLD}",
                "--sample-bits", str(bits), "--send-pcap", str(xpcap), "--backend", "cpu", str(fpcap)])


def unpack4(raw):
    """One byte per complex value, real in the high nibble (two's complement nibbles)."""
    u = raw.view(np.uint8).astype(np.int64)
    return (((u >> 4) ^ 8) - 8) + 1j * (((u & 15) ^ 8) - 8)


def reference(fpcaps, bits=8):
    """V[acc][c, bl, p1 + 2·p2] from the F-engine heaps, in int64."""
    data = {}
    for a, f in enumerate(fpcaps):
        for _, items in heaps(f, 0x4300, np.int8):
            if bits == 4:
                data[(a, items[0x1600])] = unpack4(items[0x4300]).reshape(C, SPH, 2)
                continue
            x = items[0x4300].reshape(C, SPH, 2, 2).astype(np.int64)
            data[(a, items[0x1600])] = x[..., 0] + 1j * x[..., 1]
    out = {}
    for acc in range(2):
        v = np.zeros((C, N_ANTS * (N_ANTS + 1) // 2, 4), complex)
        for b in range(acc * THRESHOLD, (acc + 1) * THRESHOLD):
            for a2 in range(N_ANTS):
                for a1 in range(a2 + 1):
                    bl = a2 * (a2 + 1) // 2 + a1
                    for p1 in range(2):
                        for p2 in range(2):
                            v[:, bl, p1 + 2 * p2] += np.sum(data[(a1, b * STEP)][:, :, p1] * np.conj(data[(a2, b * STEP)][:, :, p2]), axis=1)
        out[acc * THRESHOLD * STEP] = v
    return out


@pytest.mark.parametrize("bits", [8, 4])
def test_correlation_products_exact(gpucbf, tmp_path, bits):
    fp = make_fengine_pcaps(gpucbf, tmp_path, bits)
    merged, x = tmp_path / "f.pcap", tmp_path / "x.pcap"
    merge(fp, merged)
    xbgpu(gpucbf, merged, x, bits)
    ref = reference(fp, bits)
    if bits == 4:
        # the 4-bit heaps really are 4-bit: one byte per complex value, not all clipped
        raw = heaps(fp[0], 0x4300, np.int8)[0][1][0x4300]
        assert raw.size == C * SPH * 2
        vals = unpack4(raw)
        assert np.abs(vals.real).max() <= 7 and np.mean(np.abs(vals.real) == 7) < 0.5
        assert np.any(vals != 0)
    got = heaps(x, 0x1800, "<i4")
    assert len(got) == 2, "two complete dumps; the partial one at end of file is not sent"
    # One counter sequence per stream (start channel_offset/cps, step channels/cps): the
    # descriptor heap sent at start-up takes the first value.
    assert sorted(c for c, _ in got) == [1, 2]
    for cnt, items in got:
        assert items[0x4103] == 0
        ts = items[0x1600]
        assert ts in ref
        v = items[0x1800].reshape(C, 6 * 4, 2).astype(np.int64)
        r = ref[ts].reshape(C, 24)
        assert np.array_equal(v[..., 0], r.real.astype(np.int64))
        assert np.array_equal(v[..., 1], r.imag.astype(np.int64))
        # The common tone correlates: cross-power on the tone channel is large.
        k = round(300e6 / (ADC / (2 * C)))
        assert abs(v[k, 4 * 1, 0]) > (1000 if bits == 8 else 50)


def test_missing_heap_marks_baselines(gpucbf, tmp_path):
    fp = make_fengine_pcaps(gpucbf, tmp_path)
    merged, x = tmp_path / "f.pcap", tmp_path / "x.pcap"
    merge(fp, merged, drop=(2, 5 * STEP))
    out = xbgpu(gpucbf, merged, x).stdout
    assert '"incomplete_accs": 1' in out
    got = {items[0x1600]: items[0x1800].reshape(C, 24, 2) for _, items in heaps(x, 0x1800, "<i4")}
    clean, hit = got[0], got[THRESHOLD * STEP]
    assert not np.any((clean[..., 0] == -(2**31)) & (clean[..., 1] == 1))
    for a2 in range(N_ANTS):
        for a1 in range(a2 + 1):
            bl = a2 * (a2 + 1) // 2 + a1
            marked = np.all(hit[:, 4 * bl : 4 * bl + 4, 0] == -(2**31)) and np.all(hit[:, 4 * bl : 4 * bl + 4, 1] == 1)
            assert marked == (2 in (a1, a2)), (a1, a2)
