"""katcp as aiokatcp servers behave (#23 item 2), checked with aiokatcp 2.3 against a running
fgpu (fed live by dsim) and xbgpu: a SensorWatcher subscribed to every sensor (bulk
?sensor-sampling, as katsdpcontroller does) mirrors them all and follows their updates; each
sampling strategy, /regex/ patterns, ?log-level, ?client-list, #client-connected and the
protocol flags; bad requests fail and leave the state as it was."""

import asyncio
import subprocess
import time

import aiokatcp
import pytest

from conftest import free_tcp_port, free_udp_port, katcp_connect

ADC = 1712e6 / 256
C = 1024
JONES = 1 << 18


@pytest.fixture(scope="module")
def engines(gpucbf, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("katcp")
    fk, xk = free_tcp_port(), free_tcp_port()
    p0, p1, pf = free_udp_port(), free_udp_port(), free_udp_port()
    sync = str(int(time.time()) - 1)
    xb = subprocess.Popen(
        [gpucbf, "xbgpu", "--adc-sample-rate", str(ADC), "--sync-time", sync, "--array-size", "1", "--channels", str(C),
         "--channels-per-substream", str(C), "--samples-between-spectra", str(2 * C), "--jones-per-batch", str(JONES),
         "--heaps-per-fengine-per-chunk", "2", "--corrprod", "name=bc,dst=127.0.0.1:7160,heap_accumulation_threshold=4",
         "--beam", "name=b0,dst=127.0.0.1:7161,pol=0", "--katcp-port", str(xk), "--send-pcap", str(tmp / "x.pcap"),
         "--backend", "cpu", f"127.0.0.1:{pf}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp / "xbgpu.log", "w"))
    feng = subprocess.Popen(
        [gpucbf, "fgpu", "--adc-sample-rate", str(ADC), "--sync-time", sync, "--array-size", "1",
         "--katcp-port", str(fk), "--wideband", f"name=wb,channels={C},dst=127.0.0.1:{pf},jones_per_batch={JONES}",
         "--recv-chunk-samples", str(1 << 19), "--backend", "cpu", f"127.0.0.1:{p0},127.0.0.1:{p1}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp / "fgpu.log", "w"))
    dsim = subprocess.Popen(
        [gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--sync-time", sync, "--period", str(1 << 22),
         "--katcp-port", "0", "--heaps", str(int(40 * ADC / 4096)), "--signals", "wgn(0.05);",
         f"127.0.0.1:{p0}", f"127.0.0.1:{p1}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp / "dsim.log", "w"))
    yield fk, xk
    for p in (dsim, feng, xb):
        p.terminate()
    for p in (dsim, feng, xb):
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def text(v):
    """A mirrored sensor's value as text (string sensors hold bytes)."""
    return v.decode() if isinstance(v, bytes) else str(v)


async def connect(port):
    return await asyncio.wait_for(katcp_connect(port), 30)


class CountingWatcher(aiokatcp.SensorWatcher):
    """Counts the updates that decoded into each mirrored sensor."""

    def __init__(self, client):
        super().__init__(client)
        self.updates = {}

    def set_sensor_value(self, s, value, status, timestamp):
        self.updates[s.name] = self.updates.get(s.name, 0) + 1
        super().set_sensor_value(s, value, status, timestamp)


async def watch(port, then):
    client = await connect(port)
    try:
        assert client.protocol_flags == frozenset("MIB")
        watcher = CountingWatcher(client)
        client.add_sensor_watcher(watcher)
        await asyncio.wait_for(watcher.synced.wait(), 20)
        _, informs = await client.request("sensor-list")
        names = {i.arguments[0].decode() for i in informs}
        assert set(watcher.sensors.keys()) == names
        # Every sensor's first reading arrived (bulk subscription) and decoded as its type.
        for _ in range(50):
            if set(watcher.updates) == names:
                break
            await asyncio.sleep(0.1)
        assert set(watcher.updates) == names, names - set(watcher.updates)
        _, values = await client.request("sensor-value")
        for v in values:
            name, status = v.arguments[2].decode(), v.arguments[3].decode()
            assert watcher.sensors[name].status.name.lower() == status or watcher.updates[name] > 1, name
        await then(client, watcher)
    finally:
        client.close()
        await client.wait_closed()


def test_sensor_watcher_follows_fgpu(engines):
    fk, _ = engines

    async def then(client, watcher):
        # auto = every assignment: the digitiser power is set per chunk while data flows.
        name = "input0.dig-rms-dbfs"
        before = watcher.updates[name]
        for _ in range(100):
            if watcher.updates[name] >= before + 2:
                break
            await asyncio.sleep(0.1)
        assert watcher.updates[name] >= before + 2
        await client.request("gain", "wb", "0", "0.5")
        for _ in range(50):
            if text(watcher.sensors["wb.input0.eq"].value) == "[0.5+0j]":
                break
            await asyncio.sleep(0.1)
        assert text(watcher.sensors["wb.input0.eq"].value) == "[0.5+0j]"

    asyncio.run(then_wrap(fk, then))


def test_sensor_watcher_follows_xbgpu(engines):
    _, xk = engines

    async def then(client, watcher):
        await client.request("beam-quant-gains", "b0", "0.25")
        for _ in range(50):
            if text(watcher.sensors["b0.quantiser-gain"].value) == "0.25":
                break
            await asyncio.sleep(0.1)
        assert text(watcher.sensors["b0.quantiser-gain"].value) == "0.25"

    asyncio.run(then_wrap(xk, then))


async def then_wrap(port, then):
    await watch(port, then)


def test_strategies_replies_and_failures(engines):
    fk, _ = engines

    async def run():
        client = await connect(fk)
        seen = []
        client.add_inform_callback(
            "sensor-status", lambda ts, n, name, status, value: seen.append((name.decode(), status.decode(), value.decode())))

        async def req(*args):
            reply, informs = await client.request(*args)
            return [a.decode() for a in reply], informs

        def count(name):
            return sum(1 for s in seen if s[0] == name)

        try:
            eq = "wb.input0.eq"
            assert (await req("sensor-sampling", eq))[0] == [eq, "none"]
            # event: the first reading at once, then changes only.
            assert (await req("sensor-sampling", eq, "event"))[0] == [eq, "event"]
            await asyncio.sleep(0.2)
            assert count(eq) == 1
            await req("gain", "wb", "0", "2")
            await req("gain", "wb", "0", "2")  # the same value again: no inform
            await asyncio.sleep(0.3)
            assert count(eq) == 2 and seen[-1][2] == "[2+0j]", seen
            # auto: every assignment, changed or not.
            await req("sensor-sampling", eq, "auto")
            await req("gain", "wb", "0", "2")
            await req("gain", "wb", "0", "2")
            await asyncio.sleep(0.3)
            assert count(eq) == 5, seen
            assert (await req("sensor-sampling", eq))[0] == [eq, "auto"]
            # period: on the clock only (0.2 s for ~1 s: about 5).
            clip = "input1.dig-clip-cnt"
            assert (await req("sensor-sampling", clip, "period", "0.2"))[0] == [clip, "period", "0.2"]
            await asyncio.sleep(1.1)
            await req("sensor-sampling", clip, "none")
            n = count(clip)
            assert 4 <= n <= 9, n
            await asyncio.sleep(0.5)
            assert count(clip) == n
            # event-rate: a burst of changes reaches the client as its last value.
            assert (await req("sensor-sampling", eq, "event-rate", "0.5", "10"))[0] == [eq, "event-rate", "0.5", "10.0"]
            for g in ("3", "4", "5"):
                await req("gain", "wb", "0", g)
            await asyncio.sleep(1.0)
            assert seen[-1][0] == eq and seen[-1][2] == "[5+0j]", seen[-3:]
            # differential (numbers only) and differential-rate.
            sst = "steady-state-timestamp"
            assert (await req("sensor-sampling", sst, "differential", "1000"))[0] == [sst, "differential", "1000.0"]
            assert (await req("sensor-sampling", sst, "differential-rate", "1", "0", "5"))[0] == [
                sst, "differential-rate", "1.0", "0.0", "5.0"]
            # Bulk form, as katsdpcontroller subscribes.
            names = f"{sst},{clip},{eq}"
            assert (await req("sensor-sampling", names, "event"))[0] == [names, "event"]
            # Bad requests fail and change nothing.
            for bad in [(eq, "differential", "1"), (f"{sst},nosuch", "auto"), (f"{sst},{sst}", "auto"),
                        (sst, "period", "0"), (sst, "period", "x"), (sst, "event-rate", "2", "1"), (sst, "sometimes"),
                        ("nosuch",), (f"{sst},{clip}",), (sst, "event", "1")]:
                with pytest.raises(aiokatcp.FailReply):
                    await client.request("sensor-sampling", *bad)
            for n in (sst, clip, eq):
                assert (await req("sensor-sampling", n))[0] == [n, "event"]
            # /regex/ patterns.
            reply, informs = await req("sensor-list", "/^input0\\./")
            got = sorted(i.arguments[0].decode() for i in informs)
            assert got == ["input0.dig-clip-cnt", "input0.dig-rms-dbfs", "input0.rx.missing-unixtime",
                           "input0.rx.timestamp", "input0.rx.unixtime"], got
            assert reply == ["5"]
            reply, informs = await req("sensor-value", "/eq$/")
            assert len(informs) == 2 and all(i.arguments[2].decode().endswith(".eq") for i in informs)
            assert len((await req("sensor-value", "/^nothing-matches$/"))[1]) == 0
            for bad in ("/[/", "nosuch"):
                with pytest.raises(aiokatcp.FailReply):
                    await client.request("sensor-list", bad)
                with pytest.raises(aiokatcp.FailReply):
                    await client.request("sensor-value", bad)
            # ?log-level sets the level; a bad level changes nothing.
            assert (await req("log-level", "debug"))[0] == ["debug"]
            with pytest.raises(aiokatcp.FailReply):
                await client.request("log-level", "loud")
            assert (await req("log-level"))[0] == ["debug"]
            await req("log-level", "info")
            # A second client: the first is told, and both are listed.
            told = []
            client.add_inform_callback("client-connected", lambda addr: told.append(addr))
            other = await connect(fk)
            try:
                _, informs = await client.request("client-list")
                assert len(informs) == 2
                await asyncio.sleep(0.3)
                assert len(told) == 1
            finally:
                other.close()
                await other.wait_closed()
            _, informs = await client.request("version-list")
            v = {i.arguments[0]: i.arguments[1:] for i in informs}
            assert v[b"katcp-protocol"] == [b"5.1-MIB"]
            assert v[b"katcp-device"][0] == b"katgpucbf-fgpu-1.0" and len(v[b"katcp-device"]) == 2
        finally:
            client.close()
            await client.wait_closed()

    asyncio.run(run())
