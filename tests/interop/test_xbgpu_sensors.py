"""xbgpu's data-path sensors and steady state as katgpucbf's (#23 items 1 and 3), on a running
dsim → fgpu → xbgpu chain, read with aiokatcp: the receive sensors follow the data and revert
to error T_rx after it stops; the corrprod's rx.synchronised, xeng-clip-cnt and
tx.next-timestamp and the beams' beng-clip-cnt and tx.next-timestamp follow the data path; a
beam request moves steady-state-timestamp to T and sets the beam sensors in upstream's format
with katcp timestamp T; and a beam change issued before `?capture-start B T` is in every beam
heap from T on."""

import asyncio
import subprocess
import time

import numpy as np
import spead2
import spead2.recv

from conftest import free_tcp_port, free_udp_port, katcp_connect, read_pcap, write_pcap

ADC = 1712e6 / 256
C = 1024
JONES = 1 << 18
BATCH = 2 * C * (JONES // C)  # samples_between_spectra × spectra_per_heap
CHUNK = 2 * BATCH  # --heaps-per-fengine-per-chunk 2
ACC = 4 * BATCH  # heap_accumulation_threshold 4
T_RX = max(1.0, 10 * CHUNK / ADC)


async def sensor(client, name):
    """(value text, status, timestamp) of one sensor."""
    _, informs = await client.request("sensor-value", name)
    ts, _, _, status, value = informs[0].arguments
    return value.decode(), status.decode(), float(ts)


async def wait_for(client, name, pred, limit=15.0):
    end = time.monotonic() + limit
    while True:
        got = await sensor(client, name)
        if pred(*got) or time.monotonic() > end:
            return got
        await asyncio.sleep(0.1)


def beam_heaps(pcap, port, tmp_path):
    """(timestamp, int8 payload) of every beam data heap sent to `port`."""
    sub = tmp_path / f"beam{port}.pcap"
    write_pcap(sub, [(dst, p) for _, _, _, dst, p in read_pcap(pcap) if dst[1] == port])
    stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=16))
    stream.add_udp_pcap_file_reader(str(sub))
    out = []
    for heap in stream:
        items = {it.id: it for it in heap.get_items()}
        if 0x5000 in items and 0x1600 in items:
            out.append((items[0x1600].immediate_value, np.frombuffer(bytes(memoryview(items[0x5000])), np.int8)))
    return out


def test_xbgpu_sensors_and_beam_change_before_capture_start(gpucbf, tmp_path):
    kport = free_tcp_port()
    p0, p1, pf = free_udp_port(), free_udp_port(), free_udp_port()
    b0port, b1port = free_udp_port(), free_udp_port()
    xpcap = tmp_path / "x.pcap"
    sync = int(time.time()) - 1
    xb = subprocess.Popen(
        [gpucbf, "xbgpu", "--adc-sample-rate", str(ADC), "--sync-time", str(sync), "--array-size", "1",
         "--channels", str(C), "--channels-per-substream", str(C), "--samples-between-spectra", str(2 * C),
         "--jones-per-batch", str(JONES), "--heaps-per-fengine-per-chunk", "2",
         "--corrprod", "name=bc,dst=127.0.0.1:7160,heap_accumulation_threshold=4",
         "--beam", f"name=b0,dst=127.0.0.1:{b0port},pol=0", "--beam", f"name=b1,dst=127.0.0.1:{b1port},pol=1",
         "--katcp-port", str(kport), "--send-pcap", str(xpcap), "--backend", "cpu", f"127.0.0.1:{pf}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "xbgpu.log", "w"))
    procs = []

    def start_input():
        """fgpu and dsim, started once the before-data sensors have been read."""
        feng = subprocess.Popen(
            [gpucbf, "fgpu", "--adc-sample-rate", str(ADC), "--sync-time", str(sync), "--array-size", "1",
             "--katcp-port", "0", "--wideband", f"name=wb,channels={C},dst=127.0.0.1:{pf},jones_per_batch={JONES}",
             "--recv-chunk-samples", str(1 << 19), "--gain", "0.05", "--backend", "cpu",
             f"127.0.0.1:{p0},127.0.0.1:{p1}"],
            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "fgpu.log", "w"))
        dsim = subprocess.Popen(
            [gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--sync-time", str(sync), "--period", str(1 << 22),
             "--katcp-port", "0", "--heaps", str(int(8 * ADC / 4096)), "--signals", "wgn(0.05);",
             f"127.0.0.1:{p0}", f"127.0.0.1:{p1}"],
            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "dsim.log", "w"))
        procs.extend([dsim, feng])
        return dsim

    async def drive():
        client = await katcp_connect(kport, "xbgpu")
        try:
            # Before data: receive sensors in error, steady state 0, beam delays all zero.
            assert (await sensor(client, "rx.timestamp"))[:2] == ("-1", "error")
            assert (await sensor(client, "steady-state-timestamp"))[:2] == ("0", "nominal")
            assert (await sensor(client, "b1.delay"))[0] == "(0, 0.0, 0.0)"
            assert (await sensor(client, "bc.rx.synchronised"))[:2] == ("0", "error")
            # Only now does the input start, so the checks above cannot race the data.
            dsim = start_input()
            # Data flowing: nominal receive sensors with data-time timestamps.
            st = await wait_for(client, "rx.device-status", lambda v, s, t: v == "ok")
            assert st[:2] == ("ok", "nominal"), st
            v, s, t = await sensor(client, "rx.timestamp")
            assert s == "nominal" and int(v) > 0 and int(v) % CHUNK == 0, (v, s)
            assert abs(t - (sync + int(v) / ADC)) < 1e-3, (t, v)
            u, s, _ = await sensor(client, "rx.unixtime")
            assert s == "nominal" and abs(float(u) - (sync + int(v) / ADC)) < 1e-3
            assert (await sensor(client, "rx.missing-unixtime"))[1] == "nominal"
            # Accumulations: synchronised (one antenna, always present), next timestamps on
            # the accumulation grid, ts = UNIX start of the accumulation.
            v, s, _ = await wait_for(client, "bc.rx.synchronised", lambda v, s, t: v == "1")
            assert (v, s) == ("1", "nominal")
            v, s, t = await wait_for(client, "bc.tx.next-timestamp", lambda v, s, t: int(v) > 0)
            assert int(v) % ACC == 0 and s == "nominal", v
            assert abs(t - (sync + (int(v) - ACC) / ADC)) < 1e-3, (t, v)
            assert int((await sensor(client, "bc.xeng-clip-cnt"))[0]) >= 0
            for b in ("b0", "b1"):
                v, s, t = await wait_for(client, f"{b}.tx.next-timestamp", lambda v, s, t: int(v) > 0)
                assert int(v) % CHUNK == 0 and s == "nominal", v
                assert abs(t - (sync + (int(v) - CHUNK) / ADC)) < 1e-3, (t, v)
                v, s, _ = await sensor(client, f"{b}.beng-clip-cnt")
                assert int(v) >= 0 and s == "nominal"

            # A beam change: steady state moves to T (a chunk boundary, not before the data
            # already taken); the sensors say so in upstream's format, timestamped T.
            taken = int((await sensor(client, "b0.tx.next-timestamp"))[0])
            await client.request("beam-quant-gains", "b0", "0")
            t_gain = int((await sensor(client, "steady-state-timestamp"))[0])
            assert t_gain >= taken and t_gain % CHUNK == 0, (t_gain, taken)
            assert await sensor(client, "b0.quantiser-gain") == ("0.0", "nominal", float(t_gain))
            await client.request("beam-delays", "b1", "1e-09:0.5")
            t_delay = int((await sensor(client, "steady-state-timestamp"))[0])
            assert t_delay >= t_gain
            assert await sensor(client, "b1.delay") == (f"({t_delay}, 1e-09, 0.5)", "nominal", float(t_delay))
            await client.request("beam-weights", "b1", "1.5")
            assert (await sensor(client, "b1.weight"))[0] == "[1.5]"
            # A bad request changes nothing.
            steady = await sensor(client, "steady-state-timestamp")
            try:
                await client.request("beam-weights", "b1", "1", "2")
                raise AssertionError("two weights for one antenna were taken")
            except Exception as e:  # aiokatcp.FailReply
                assert "antennas" in str(e), e
            assert await sensor(client, "steady-state-timestamp") == steady
            assert (await sensor(client, "b1.weight"))[0] == "[1.5]"

            # Capture from the steady state of the gain change.
            await client.request("capture-start", "b0", str(t_gain))
            await client.request("capture-start", "b1", str(t_gain))
            await asyncio.sleep(1.5)
            await client.request("capture-stop", "b0")
            await client.request("capture-stop", "b1")

            # The input ends (dsim's heaps run out): T_rx later the receive sensors revert.
            dsim.wait(timeout=30)
            v, s, t = await wait_for(client, "rx.timestamp", lambda v, s, t: s == "error", 10 + T_RX)
            assert s == "error" and int(v) > 0, (v, s)
            assert abs(t - (sync + int(v) / ADC + T_RX)) < 1e-3, (t, v)
            assert (await sensor(client, "rx.unixtime"))[1] == "error"
            assert (await sensor(client, "rx.device-status"))[:2] == ("degraded", "warn")
            return t_gain
        finally:
            client.close()
            await client.wait_closed()

    try:
        t_gain = asyncio.run(drive())
    finally:
        for p in procs + [xb]:
            p.terminate()
        for p in procs + [xb]:
            p.wait(timeout=30)

    b0 = beam_heaps(xpcap, b0port, tmp_path)
    b1 = beam_heaps(xpcap, b1port, tmp_path)
    assert len(b0) >= 2 and len(b1) >= 2, (len(b0), len(b1))
    # Every beam heap from T on, and none before it; b0 (gain 0) is exactly zero in each.
    assert min(ts for ts, _ in b0) == t_gain, (min(ts for ts, _ in b0), t_gain)
    assert all(ts >= t_gain for ts, _ in b1)
    for ts, data in b0:
        assert not data.any(), f"b0 heap at {ts} has non-zero samples after ?beam-quant-gains 0"
    assert all(np.count_nonzero(data) > data.size // 2 for _, data in b1)
