"""A running F-engine (live UDP input from dsim) controlled by aiokatcp: ?gain changes the
output from the steady-state timestamp it reports, ?delays from the first spectrum at or after
its load time, bad requests fail and change nothing, and
the Prometheus counters move while it runs."""

import asyncio
import signal
import subprocess
import time

import aiokatcp
import numpy as np
import pytest
import spead2
import spead2.recv

from conftest import free_tcp_port, free_udp_port, katcp_connect, scrape, send_udp, spead_packet

ADC = 1712e6 / 256
C = 1024
JONES = 1 << 18
SPH = JONES // C
K = 256



def test_gain_changes_output_at_steady_state_timestamp(gpucbf, tmp_path):
    kport, mport = free_tcp_port(), free_tcp_port()
    p0, p1 = free_udp_port(), free_udp_port()
    fpcap = tmp_path / "f.pcap"
    sync = str(int(time.time()) - 1)
    feng = subprocess.Popen(
        [gpucbf, "fgpu", "--adc-sample-rate", str(ADC), "--sync-time", sync, "--array-size", "1",
         "--wideband", f"name=wb,channels={C},dst=127.0.0.1:7150,jones_per_batch={JONES}",
         "--recv-chunk-samples", str(1 << 19), "--gain", "0.05", "--dither-seed", "1", "--katcp-port", str(kport), "--prometheus-port", str(mport),
         "--katcp-host", "127.0.0.1", "--send-pcap", str(fpcap), "--backend", "cpu", f"127.0.0.1:{p0},127.0.0.1:{p1}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    freq = K * ADC / (2 * C)
    dsim = subprocess.Popen(
        [gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--sync-time", sync, "--period", str(1 << 22), "--heaps", str(int(5 * ADC / 4096)),
         "--signals", f"cw(0.05, {freq}) + wgn(0.01);", f"127.0.0.1:{p0}", f"127.0.0.1:{p1}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    async def drive():
        client = await katcp_connect(kport, "fgpu")
        try:
            await asyncio.sleep(1.0)
            first = scrape(mport)
            await asyncio.sleep(0.5)
            second = scrape(mport)
            for name in ['fgpu_input_heaps_total{pol="0"}', 'fgpu_input_samples_total{pol="1"}',
                         'fgpu_input_bytes_total{pol="0"}', 'fgpu_input_chunks_total', 'fgpu_input_packets_total',
                         'fgpu_output_heaps_total{stream="wb"}', 'fgpu_output_bytes_total{stream="wb"}',
                         'fgpu_output_samples_total{stream="wb"}']:
                assert second[name] > first[name], (name, first.get(name), second.get(name))
            for gauge in ["fgpu_input_ready_chunks", "fgpu_input_free_chunks"]:
                assert 0 <= second[gauge] <= 16, (gauge, second.get(gauge))
            # Receive drops by reason move while the engine runs (not only in its exit summary):
            # 2 bad-timestamp heaps, 1 too old (chunk 0 left the window long ago), 3 not SPEAD,
            # 1 wrong size (dsim's descriptor heaps may add to that one).
            dig = lambda ts, size=5120: spead_packet({0x1600: ts, 0x3101: 0, 0x3102: 0}, bytes(size), heap_cnt=ts + 7)
            send_udp(p0, [dig(4096 * 1000 + 1), dig(4096 * 1000 + 2), dig(0), b"junk", b"\x53\x04", b"x" * 100,
                          dig(4096, size=100)])
            drops = {"fgpu_input_bad_timestamp_heaps_total": 2, "fgpu_input_too_old_heaps_total": 1,
                     "fgpu_input_malformed_packets_total": 3, "fgpu_input_metadata_heaps_total": 1}
            for _ in range(50):
                await asyncio.sleep(0.1)
                third = scrape(mport)
                if all(third[k] - second[k] >= v for k, v in drops.items()):
                    break
            for k, v in drops.items():
                assert third[k] - second[k] == v or (k.endswith("metadata_heaps_total") and third[k] - second[k] > v), (k, second[k], third[k])
            assert third["fgpu_input_duplicate_packets_total"] == 0
            reply, _ = await client.request("gain", "wb", "0")
            assert reply[0] == b"0.05+0j"
            for bad in [("gain", "wb", "2", "1"), ("gain", "wb", "0", "nan"), ("gain", "nosuch", "0", "1"),
                        ("gain", "wb", "0", "1", "2"), ("delays", "wb", sync, "0,0:0,0"),
                        ("delays", "wb", sync, "0,2:0,0", "0,0:0,0"), ("delays", "wb", "0", "0,0:0,0", "0,0:0,0")]:
                with pytest.raises(aiokatcp.FailReply):
                    await client.request(*bad)
            reply, _ = await client.request("gain", "wb", "0")
            assert reply[0] == b"0.05+0j", "a failed request changes nothing"
            await client.request("gain", "wb", "0", "0.1")
            _, informs = await client.request("sensor-value", "steady-state-timestamp")
            steady = int(informs[0].arguments[4])
            _, informs = await client.request("sensor-value", "wb.input0.eq")
            assert b"0.1+0j" in informs[0].arguments[4]
            # dig-rms-dbfs reports once per second of data (katgpucbf's window).
            for _ in range(100):
                _, informs = await client.request("sensor-value", "input0.dig-rms-dbfs")
                if informs[0].arguments[3] != b"unknown":
                    break
                await asyncio.sleep(0.1)
            assert -40 < float(informs[0].arguments[4]) < -10, informs[0].arguments
            # A phase step of a quarter turn on input 0 from a load time inside the stream: it
            # must land on the first spectrum whose timestamp is at or after the load time.
            t_load = time.time() + 0.5
            await client.request("delays", "wb", repr(t_load), "0,0:1.5707963267948966,0", "0,0:0,0")
            start = int(np.floor((t_load - int(sync)) * ADC + 0.5))
            _, informs = await client.request("sensor-value", "steady-state-timestamp")
            steady_delay = int(informs[0].arguments[4])
            return steady, start, steady_delay
        finally:
            client.close()
            await client.wait_closed()

    steady, start, steady_delay = asyncio.run(drive())
    assert steady_delay == -(-start // (2 * C)) * (2 * C), (steady_delay, start)
    dsim.wait(timeout=30)
    time.sleep(0.5)
    feng.send_signal(signal.SIGTERM)
    out, err = feng.communicate(timeout=30)
    assert feng.returncode == 0, err

    stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=16))
    stream.add_udp_pcap_file_reader(str(fpcap))
    ratios = []
    phases = []  # (spectrum timestamp, phase of input 0 relative to input 1 in the tone channel)
    for heap in stream:
        items = {it.id: (it.immediate_value if it.is_immediate else np.frombuffer(it, np.int8)) for it in heap.get_items()}
        if 0x4300 not in items:
            continue
        x = items[0x4300].reshape(C, SPH, 2, 2).astype(float)
        amp = np.abs(x[K, :, :, 0] + 1j * x[K, :, :, 1]).mean(axis=0)  # per pol
        ratios.append((items[0x1600], amp[0] / amp[1]))
        z = x[K, :, :, 0] + 1j * x[K, :, :, 1]
        for k, d in enumerate(np.angle(z[:, 0] * np.conj(z[:, 1]))):
            phases.append((items[0x1600] + k * 2 * C, d))
    # Both inputs carry the same tone: input 0 / input 1 is 1 before the change and 2 from
    # the steady-state timestamp on (batches in between may show either).
    ratios.sort()
    after = [r for t, r in ratios if t >= steady]
    assert after and ratios[0][0] < steady, (len(ratios), len(after))
    assert abs(ratios[0][1] - 1) < 0.1, ratios[0]
    assert all(abs(r - 2) < 0.1 for r in after), after
    phases.sort()
    before = [d for t, d in phases if t < start]
    since = [d for t, d in phases if t >= start]
    assert before and since, (len(before), len(since), start)
    assert all(abs(d) < 0.3 for d in before), max(abs(d) for d in before)
    assert all(abs(abs(d) - np.pi / 2) < 0.3 for d in since), [d for d in since if abs(abs(d) - np.pi / 2) >= 0.3][:5]
