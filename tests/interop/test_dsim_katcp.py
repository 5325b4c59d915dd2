"""dsim's katcp interface driven by aiokatcp (a real katcp client): sensors, ?time,
?signals (the new signal reaches the wire from the returned timestamp), bad requests, ?halt."""

import asyncio
import subprocess
import threading
import time

import aiokatcp
import numpy as np
import pytest
import spead2
import spead2.recv

from conftest import free_tcp_port, free_udp_port, katcp_connect
from test_dsim_spead2 import unpack10

ADC = 100e6
PERIOD = 1 << 22


def collect_items(ports):
    """A spead2 stream on the UDP `ports` and a thread appending each heap's items
    ({id: value or bytes}) to the returned list."""
    stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=8))
    for p in ports:
        stream.add_udp_reader(p, bind_hostname="127.0.0.1", buffer_size=16 << 20)
    heaps = []

    def collect():
        for heap in stream:
            items = {it.id: it.immediate_value if it.is_immediate else bytes(np.frombuffer(it, np.uint8)) for it in heap.get_items()}
            heaps.append(items)

    th = threading.Thread(target=collect, daemon=True)
    th.start()
    return stream, heaps, th



def test_signals_time_sensors_halt(gpucbf):
    kport, uport = free_tcp_port(), free_udp_port()
    stream, heaps, th = collect_items([uport])
    proc = subprocess.Popen(
        [gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--period", str(PERIOD), "--katcp-port", str(kport),
         "--katcp-host", "127.0.0.1", "--dither-seed", "5", "--rate-factor", "0.05",
         "--signals", "cw(0.2, 10e6);", f"127.0.0.1:{uport}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    async def drive():
        client = await katcp_connect(kport, "dsim")
        try:
            reply, informs = await client.request("sensor-value", "signals-orig")
            assert informs[0].arguments[4] == b"cw(0.2, 10e6);"
            # The canonical form, numbers as Python's repr.
            reply, informs = await client.request("sensor-value", "signals")
            assert informs[0].arguments[2] == b"signals" and informs[0].arguments[4] == b"cw(0.2, 10000000.0);"
            reply, _ = await client.request("sensor-value", "dither-seed")
            _, informs = await client.request("sensor-list")
            names = {i.arguments[0].decode() for i in informs}
            assert {"signals", "period", "dither-seed", "adc-sample-rate", "sample-bits", "sync-time", "steady-state-timestamp"} <= names
            reply, _ = await client.request("time")
            assert abs(float(reply[0]) - time.time()) < 5
            with pytest.raises(aiokatcp.FailReply):
                await client.request("signals", "cw(0.1;")
            with pytest.raises(aiokatcp.FailReply):
                await client.request("signals", "cw(0.1, 1e6); cw(0.1, 1e6);")  # two specs, one stream
            with pytest.raises(aiokatcp.FailReply):
                await client.request("signals", "cw(0.1, 1e6);", "12345")  # does not divide max-period
            reply, informs = await client.request("sensor-value", "period")
            assert informs[0].arguments[4] == str(PERIOD).encode()
            # A period dividing max-period is taken; wgn gets its entropy in the sensor. The
            # cosine snaps to the same frequency with either period.
            await client.request("signals", "cw(0.2, 10e6) + wgn(0.0);", str(PERIOD // 2))
            reply, informs = await client.request("sensor-value", "period")
            assert informs[0].arguments[4] == str(PERIOD // 2).encode()
            reply, informs = await client.request("sensor-value", "signals")
            text = informs[0].arguments[4].decode()
            assert text.startswith("cw(0.2, 10000000.0) + wgn(0.0, ") and text.endswith(");"), text
            assert int(text[len("cw(0.2, 10000000.0) + wgn(0.0, "):-2]) >= 0, text
            # A second client is told the server is going away on ?halt.
            r2, w2 = await asyncio.open_connection("127.0.0.1", kport)
            with pytest.raises(aiokatcp.InvalidReply):
                await client.request("no-such-request")
            reply, _ = await client.request("signals", "nodither(cw(0.5, 20e6));")
            ts = int(reply[0])
            assert ts % 4096 == 0
            reply, informs = await client.request("sensor-value", "steady-state-timestamp")
            assert int(informs[0].arguments[4]) == ts
            reply, informs = await client.request("sensor-value", "period")
            assert informs[0].arguments[4] == str(PERIOD).encode()
            await asyncio.sleep(0.5)
            await client.request("halt")
            lines = []
            while not any(l.startswith(b"#disconnect") for l in lines):
                line = await asyncio.wait_for(r2.readline(), 10)
                assert line, lines
                lines.append(line)
            assert lines[-1].rstrip() == rb"#disconnect server\_shutting\_down", lines
            w2.close()
        finally:
            client.close()
            await client.wait_closed()
        return ts

    ts = asyncio.run(drive())
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    time.sleep(0.2)
    stream.stop()
    th.join(timeout=5)
    data = [h for h in heaps if 0x3300 in h]
    before = [h for h in data if h[0x1600] < ts]
    after = [h for h in data if h[0x1600] >= ts]
    assert before and after, (len(before), len(after))
    f_old = round(10e6 * PERIOD / ADC) * ADC / PERIOD
    f_new = round(20e6 * PERIOD / ADC) * ADC / PERIOD
    for h, f, a in [(before[-1], f_old, 0.2), (after[0], f_new, 0.5)]:
        x = unpack10(h[0x3300]).astype(float)
        t = h[0x1600] + np.arange(4096)
        amp = abs(np.dot(x, np.exp(-2j * np.pi * f / ADC * t))) * 2 / x.size
        assert abs(amp - a * 511) < 2, (h[0x1600], amp)
    # Without dither the new signal is exactly the rounded cosine.
    h = after[0]
    t = h[0x1600] + np.arange(4096)
    expect = np.round(0.5 * 511 * np.cos(2 * np.pi * f_new / ADC * t))
    assert np.array_equal(unpack10(h[0x3300]), expect)


def test_two_send_threads_switch_signals_together(gpucbf):
    """dsim with two send threads (--affinity, one stream each): ?signals returns one
    timestamp, and both streams carry the old signal before it and the new one from it."""
    import os
    core = sorted(os.sched_getaffinity(0))[0]
    kport, ports = free_tcp_port(), [free_udp_port(), free_udp_port()]
    stream, heaps, th = collect_items(ports)
    proc = subprocess.Popen(
        [gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--period", str(PERIOD), "--katcp-port", str(kport),
         "--katcp-host", "127.0.0.1", "--dither-seed", "5", "--rate-factor", "0.05",
         "--affinity", f"{core},{core}", "--signals", "cw(0.2, 10e6);",
         *(f"127.0.0.1:{p}" for p in ports)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    async def drive():
        client = await katcp_connect(kport, "dsim")
        try:
            await asyncio.sleep(0.3)
            reply, _ = await client.request("signals", "nodither(cw(0.5, 20e6));")
            ts = int(reply[0])
            await asyncio.sleep(0.5)
            await client.request("halt")
        finally:
            client.close()
            await client.wait_closed()
        return ts

    ts = asyncio.run(drive())
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    time.sleep(0.2)
    stream.stop()
    th.join(timeout=5)
    f_old = round(10e6 * PERIOD / ADC) * ADC / PERIOD
    f_new = round(20e6 * PERIOD / ADC) * ADC / PERIOD
    for did in (0, 1):
        data = sorted((h for h in heaps if 0x3300 in h and h[0x3101] == did), key=lambda h: h[0x1600])
        before = [h for h in data if h[0x1600] < ts]
        after = [h for h in data if h[0x1600] >= ts]
        assert before and after, (did, len(before), len(after))
        for h, f, a in [(before[-1], f_old, 0.2), (after[0], f_new, 0.5)]:
            x = unpack10(h[0x3300]).astype(float)
            t = h[0x1600] + np.arange(4096)
            amp = abs(np.dot(x, np.exp(-2j * np.pi * f / ADC * t))) * 2 / x.size
            assert abs(amp - a * 511) < 2, (did, h[0x1600], amp)


def test_max_period_ring(gpucbf):
    """--max-period sizes the ring: the sensors show --period and --max-period; ?signals with
    no period takes the whole ring, with one dividing it that one, else fails and changes
    nothing; a --max-period that is not a multiple of --period is a usage error."""
    bad = subprocess.run(
        [gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--period", "8192", "--max-period", "20480",
         "--heaps", "1", "--pcap", "/dev/null", "127.0.0.1:7148"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    assert bad.returncode != 0 and "--max-period 20480" in bad.stderr, bad.stderr
    kport, uport = free_tcp_port(), free_udp_port()
    proc = subprocess.Popen(
        [gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--period", str(PERIOD // 4), "--max-period", str(PERIOD),
         "--katcp-port", str(kport), "--katcp-host", "127.0.0.1", "--dither-seed", "5", "--rate-factor", "0.05",
         f"127.0.0.1:{uport}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    async def drive():
        client = await katcp_connect(kport, "dsim")

        async def value(name):
            _, informs = await client.request("sensor-value", name)
            return int(informs[0].arguments[4])

        try:
            assert (await value("period"), await value("max-period")) == (PERIOD // 4, PERIOD)
            await client.request("signals", "cw(0.1, 1e6);")
            assert await value("period") == PERIOD
            await client.request("signals", "cw(0.1, 1e6);", str(PERIOD // 8))
            assert await value("period") == PERIOD // 8
            with pytest.raises(aiokatcp.FailReply):
                await client.request("signals", "cw(0.1, 1e6);", str(2 * PERIOD))
            assert await value("period") == PERIOD // 8
            await client.request("halt")
        finally:
            client.close()
            await client.wait_closed()

    asyncio.run(drive())
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
