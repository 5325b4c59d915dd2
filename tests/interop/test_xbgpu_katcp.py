"""?capture-start / ?capture-stop on a running XB-engine (dsim → fgpu → xbgpu over UDP),
driven by aiokatcp: dumps are sent only between the two requests; bad requests fail."""

import asyncio
import json
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



def test_capture_start_stop_gate_output(gpucbf, tmp_path):
    kport, mport = free_tcp_port(), free_tcp_port()
    p0, p1, pf = free_udp_port(), free_udp_port(), free_udp_port()
    xpcap = tmp_path / "x.pcap"
    sync = str(int(time.time()) - 1)
    xb = subprocess.Popen(
        [gpucbf, "xbgpu", "--adc-sample-rate", str(ADC), "--sync-time", sync, "--array-size", "1", "--channels", str(C),
         "--channels-per-substream", str(C), "--samples-between-spectra", str(2 * C), "--jones-per-batch", str(JONES),
         "--heaps-per-fengine-per-chunk", "2", "--corrprod", "name=bc,dst=127.0.0.1:7160,heap_accumulation_threshold=4",
         "--katcp-port", str(kport), "--prometheus-port", str(mport), "--send-pcap", str(xpcap), "--backend", "cpu", f"127.0.0.1:{pf}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    feng = subprocess.Popen(
        [gpucbf, "fgpu", "--adc-sample-rate", str(ADC), "--sync-time", sync, "--array-size", "1", "--katcp-port", "0",
         "--wideband", f"name=wb,channels={C},dst=127.0.0.1:{pf},jones_per_batch={JONES}",
         "--recv-chunk-samples", str(1 << 19), "--gain", "0.05", "--backend", "cpu", f"127.0.0.1:{p0},127.0.0.1:{p1}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dsim = subprocess.Popen(
        [gpucbf, "dsim", "--adc-sample-rate", str(ADC), "--sync-time", sync, "--period", str(1 << 22),
         "--heaps", str(int(6 * ADC / 4096)), "--signals", "wgn(0.05);", f"127.0.0.1:{p0}", f"127.0.0.1:{p1}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    async def drive():
        client = await katcp_connect(kport, "xbgpu")
        try:
            with pytest.raises(aiokatcp.FailReply):
                await client.request("capture-start", "nosuch")
            await asyncio.sleep(1.5)
            first = scrape(mport)
            # A heap from an F-engine beyond --array-size, one with a timestamp off the batch
            # grid and one datagram that is not SPEAD: counted live, by reason.
            heap = 1024 * (JONES // C) * 4
            feng = lambda ts, fid: spead_packet({0x1600: ts, 0x4101: fid, 0x4103: 0}, bytes(1024), heap_cnt=9, heap_size=heap)
            send_udp(pf, [feng(0, 5), feng(3, 0), b"not spead"])
            drops = {"xbgpu_input_bad_feng_id_heaps_total": 1, "xbgpu_input_bad_timestamp_heaps_total": 1,
                     "xbgpu_input_malformed_packets_total": 1}
            for _ in range(50):
                await asyncio.sleep(0.1)
                second = scrape(mport)
                if all(second[k] - first[k] >= v for k, v in drops.items()):
                    break
            for k, v in drops.items():
                assert second[k] - first[k] == v, (k, first[k], second[k])
            assert 0 <= second["xbgpu_input_ready_chunks"] <= 16
            t_start = time.time()
            await client.request("capture-start", "bc")
            await asyncio.sleep(1.5)
            third = scrape(mport)
            sent = third['xbgpu_output_x_heaps_total{stream="bc"}']
            await client.request("capture-stop", "bc")
            assert sent >= 1
            assert third['xbgpu_output_x_bytes_total{stream="bc"}'] > 0
            for k in ["xbgpu_input_heaps_total", "xbgpu_input_chunks_total", "xbgpu_input_bytes_total"]:
                assert third[k] > first[k], (k, first[k], third[k])
            assert third['xbgpu_output_x_visibilities_total{stream="bc"}'] == sent * C * 4
            assert 'xbgpu_output_x_unsent_accs_total{stream="bc"}' in third
            t_stop = time.time()
            return t_start, t_stop
        finally:
            client.close()
            await client.wait_closed()

    t_start, t_stop = asyncio.run(drive())
    dsim.wait(timeout=30)
    time.sleep(0.5)
    feng.send_signal(signal.SIGTERM)
    feng.communicate(timeout=30)
    time.sleep(0.3)
    xb.send_signal(signal.SIGTERM)
    out, err = xb.communicate(timeout=30)
    assert xb.returncode == 0, err
    x = json.loads(out)["corrprods"][0]
    assert x["heaps"] >= 2, x
    assert x["unsent_accs"] >= 2, "dumps before capture-start and after capture-stop are not sent"

    stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=16))
    stream.add_udp_pcap_file_reader(str(xpcap))
    stamps = []
    for heap in stream:
        items = {it.id: it.immediate_value if it.is_immediate else None for it in heap.get_items()}
        if 0x1800 in items:
            stamps.append(int(sync) + items[0x1600] / ADC)
    assert len(stamps) == x["heaps"]
    dump_s = 4 * JONES // C * 2 * C / ADC
    # Dumps are sent when they complete, a little after their start: allow processing latency.
    for t in stamps:
        assert t_start - 2 * dump_s - 1.0 < t < t_stop + 0.5, (t, t_start, t_stop)
