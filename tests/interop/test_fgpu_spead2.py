"""dsim → gpucbf fgpu (CPU backend) → pcap, decoded by spead2: the ICD's F-engine heaps,
a tone at a channel centre with the analytic amplitude A·Σw/2·gain, and skipped batches."""

import numpy as np
import spead2
import spead2.recv

from conftest import read_pcap, run, write_pcap

ADC = 1712e6
C = 1024
TAPS = 16


def pfb_weight_sum(channels=C, taps=TAPS):
    """Σw of the Hann-windowed sinc PFB weights normalised to Σw² = 1 (dsp.md §3.1)."""
    step = 2 * channels
    L = step * taps
    i = np.arange(L)
    w = np.sin(np.pi * i / (L - 1)) ** 2 * np.sinc((i + 0.5) / step - taps / 2)
    w /= np.sqrt(np.sum(w**2))
    return w.sum()


def read_f_heaps(path):
    stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=16))
    stream.add_udp_pcap_file_reader(str(path))
    heaps = []
    for heap in stream:
        items = {it.id: (it.immediate_value if it.is_immediate else np.frombuffer(it, np.int8)) for it in heap.get_items()}
        if 0x4300 in items:
            heaps.append((heap.cnt, items))
    return heaps


def fgpu(gpucbf, dpcap, fpcap, gain, extra=()):
    return run([gpucbf, "fgpu", "--adc-sample-rate", str(ADC), "--sync-time", "0", "--feng-id", "2", "--array-size", "4",
                "--wideband", f"name=wb,channels={C},dst=127.0.0.1:7150,127.0.0.1:7151,jones_per_batch=262144",
                "--recv-chunk-samples", str(1 << 20), "--gain", str(gain), "--dither-seed", "3",
                "--send-pcap", str(fpcap), "--backend", "cpu", *extra, str(dpcap)])


def test_tone_reaches_its_channel(gpucbf, tmp_path):
    d, f = tmp_path / "d.pcap", tmp_path / "f.pcap"
    k = 240
    freq = k * ADC / (2 * C)
    amp = 0.3
    run([gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--heaps", "1536", "--pcap", str(d), "--dither-seed", "1",
         "--signals", f"cw({amp}, {freq}) + wgn(0.01, 1); wgn(0.01, 2);", "127.0.0.1:7148", "127.0.0.1:7149"])
    A = amp * 511
    expect = 60.0
    gain = expect / (A * pfb_weight_sum() / 2)
    fgpu(gpucbf, d, f, gain)
    for _, _, _, dst, payload in read_pcap(f):
        assert dst[1] in (7150, 7151)
    heaps = read_f_heaps(f)
    sph = 262144 // C
    step = sph * 2 * C
    assert len(heaps) == 2 * 11  # (1536·4096 − (sph+15)·2C) // step + 1 batches, 2 substreams
    for cnt, items in heaps:
        assert cnt % 4 == 2, "heap counter ≡ feng_id (mod array size)"
        assert items[0x4101] == 2
        assert items[0x1600] % step == 0
        assert items[0x4103] in (0, 512)
        assert items[0x4300].size == 512 * sph * 2 * 2
    # Reassemble channel 240 (substream 0) and check the tone.
    sub0 = [items for _, items in heaps if items[0x4103] == 0]
    for items in sub0:
        x = items[0x4300].reshape(512, sph, 2, 2).astype(float)
        z = x[..., 0] + 1j * x[..., 1]
        mag = np.abs(z[k, :, 0])
        assert np.all(np.abs(mag - expect) < 1.5), (mag.min(), mag.max())
        others = np.abs(z[:, :, 0]).copy()
        others[k - 1 : k + 2] = 0
        assert others.max() <= 3
        # Pol 1 (noise of 0.01 FS) stays near zero.
        assert np.abs(z[:, :, 1]).max() <= 3


def test_missing_input_skips_batches(gpucbf, tmp_path):
    d, d2, f = tmp_path / "d.pcap", tmp_path / "d2.pcap", tmp_path / "f.pcap"
    run([gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--heaps", "1536", "--pcap", str(d), "--dither-seed", "1",
         "--signals", "wgn(0.05, 1);", "127.0.0.1:7148", "127.0.0.1:7149"])
    frames = list(read_pcap(d))
    # Drop pol 1's heap with timestamp 645·4096 (inside the windows of batches 4 and 5 only).
    keep = []
    for _, _, _, dst, payload in frames:
        ts = int.from_bytes(payload[8 + 8 * 4 + 2 : 8 + 8 * 5], "big")
        if not (dst[1] == 7149 and ts == 645 * 4096):
            keep.append((("127.0.0.1", dst[1]), payload))
    write_pcap(d2, keep)
    out = fgpu(gpucbf, d2, f, 0.01).stdout
    assert '"skipped_heaps": 4' in out
    ts = sorted({items[0x1600] for _, items in read_f_heaps(f)})
    step = 2 * 262144
    assert ts == [b * step for b in range(11) if b not in (4, 5)]
