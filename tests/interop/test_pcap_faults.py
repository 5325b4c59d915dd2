"""Engines writing pcap files when things go wrong: the disk fills (a file-size limit, and
/dev/full), or SIGTERM arrives mid-run. The engine reports a full disk with a clear message
and a non-zero exit; whatever stops it, the file ends at a whole record and reads back
(checked by walking the records here, and by spead2)."""

import signal
import struct
import subprocess
import time
from pathlib import Path

import spead2
import spead2.recv

from conftest import free_udp_port, read_pcap

ADC = 1712e6 / 256
C = 1024


def whole_records(path):
    """The number of records in a classic pcap file; fails unless the last one ends exactly at
    the end of the file."""
    data = Path(path).read_bytes()
    assert len(data) >= 24, f"{path}: {len(data)} bytes, no pcap header"
    e = "<" if struct.unpack("<I", data[:4])[0] in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    off, n = 24, 0
    while off < len(data):
        assert off + 16 <= len(data), f"{path}: a record header cut at byte {off} of {len(data)}"
        incl = struct.unpack(e + "I", data[off + 8 : off + 12])[0]
        assert off + 16 + incl <= len(data), f"{path}: record {n} cut ({incl} bytes at {off} of {len(data)})"
        off += 16 + incl
        n += 1
    assert all(ip_ok and udp_ok for ip_ok, udp_ok, *_ in read_pcap(path))
    return n


def spead2_heaps(path):
    stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=16))
    stream.add_udp_pcap_file_reader(str(path))
    return sum(1 for _ in stream)


def dsim_pcap(gpucbf, path, sync, heaps):
    subprocess.run(
        [gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--sync-time", sync, "--heaps", str(heaps),
         "--pcap", str(path), "--signals", "wgn(0.05);", "127.0.0.1:7148", "127.0.0.1:7149"],
        check=True, capture_output=True, timeout=120)


def fgpu_cmd(gpucbf, sync, out, src):
    return [gpucbf, "fgpu", "--adc-sample-rate", str(ADC), "--sync-time", sync, "--array-size", "1",
            "--wideband", f"name=wb,channels={C},dst=127.0.0.1:7150", "--dither-seed", "1",
            "--katcp-port", "0", "--send-pcap", str(out), "--backend", "cpu", src]


def test_a_disk_that_fills_stops_the_engine_with_a_whole_file(gpucbf, tmp_path):
    sync = str(int(time.time()) - 10)
    dpcap = tmp_path / "d.pcap"
    dsim_pcap(gpucbf, dpcap, sync, 4000)
    # A 3 MB file-size limit on the F-engine alone: its output (about 5 MB) fills it.
    out = tmp_path / "f.pcap"
    cmd = " ".join(f"'{a}'" for a in fgpu_cmd(gpucbf, sync, out, str(dpcap)))
    p = subprocess.run(["bash", "-c", f"ulimit -f 3000; exec {cmd}"], capture_output=True, text=True, timeout=120)
    assert p.returncode not in (0, -signal.SIGXFSZ, 128 + signal.SIGXFSZ), (p.returncode, p.stderr[-2000:])
    assert f"writing pcap {out}: File too large" in p.stderr, p.stderr[-2000:]
    assert "panicked" not in p.stderr
    size = out.stat().st_size
    assert 2_000_000 < size <= 3000 * 1024, size
    n = whole_records(out)
    assert n > 100 and spead2_heaps(out) > 0, n
    # /dev/full: refused at the first write, named.
    p = subprocess.run(fgpu_cmd(gpucbf, sync, "/dev/full", str(dpcap)), capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "writing pcap /dev/full: No space left on device" in p.stderr, p.stderr[-2000:]


def test_sigterm_leaves_whole_pcap_files(gpucbf, tmp_path):
    sync = str(int(time.time()) - 1)
    p0, p1 = free_udp_port(), free_udp_port()
    fpcap = tmp_path / "f.pcap"
    feng = subprocess.Popen(fgpu_cmd(gpucbf, sync, fpcap, f"127.0.0.1:{p0},127.0.0.1:{p1}"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # A live feed for the F-engine, and a dsim writing its own pcap as fast as it can.
    live = subprocess.Popen(
        [gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--sync-time", sync, "--heaps", str(int(30 * ADC / 4096)),
         "--period", str(1 << 22), "--katcp-port", "0", "--signals", "wgn(0.05);", f"127.0.0.1:{p0}", f"127.0.0.1:{p1}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dpcap = tmp_path / "d.pcap"
    writer = subprocess.Popen(
        [gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--sync-time", sync, "--heaps", str(1 << 22),
         "--period", str(1 << 22), "--pcap", str(dpcap), "--signals", "wgn(0.05);", "127.0.0.1:7148", "127.0.0.1:7149"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # The pcap-writing dsim is unpaced (gigabytes a second): stopped at 4 MiB or more.
        for _ in range(3000):
            if dpcap.exists() and dpcap.stat().st_size > (4 << 20):
                break
            time.sleep(0.01)
        writer.send_signal(signal.SIGTERM)
        for _ in range(100):
            if fpcap.exists() and fpcap.stat().st_size > (1 << 20):
                break
            time.sleep(0.1)
        feng.send_signal(signal.SIGTERM)
        _, ferr = feng.communicate(timeout=30)
        _, werr = writer.communicate(timeout=30)
    finally:
        live.kill()
        _, lerr = live.communicate(timeout=30)
        for p in (feng, writer):
            if p.poll() is None:
                p.kill()
    assert feng.returncode == 0, ferr[-2000:]
    assert writer.returncode == 0, werr[-2000:]
    assert whole_records(fpcap) > 100 and spead2_heaps(fpcap) > 0, ferr[-3000:] + lerr[-3000:]
    assert whole_records(dpcap) > 100 and spead2_heaps(dpcap) > 0
