"""Shared helpers for the interop tests: the gpucbf binary, pcap parsing and writing."""

import os
import socket
import struct
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def gpucbf() -> str:
    path = os.environ.get("GPUCBF_BIN", str(ROOT / "target" / "release" / "gpucbf"))
    if not Path(path).exists():
        pytest.fail(f"gpucbf binary not found at {path}: build it first (tools/test.sh does)")
    return path


def run(cmd, **kw):
    """Runs a command, failing the test with its stderr if it fails."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    if p.returncode != 0:
        raise AssertionError(f"{cmd} exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def katcp_connect(port, what="engine"):
    """Connects an aiokatcp client, waiting up to 10 s for the server to come up."""
    import asyncio

    import aiokatcp

    for _ in range(100):
        try:
            return await aiokatcp.Client.connect("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"{what} katcp server did not come up")


def scrape(port, host="127.0.0.1"):
    """Prometheus text exposition → {series: value}."""
    import urllib.request

    text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def spead_packet(immediates, payload=b"", heap_cnt=1, heap_size=None, offset=0):
    """One SPEAD-64-48 packet, built by hand: the standard items, the given immediate items
    {id: value}, an addressed item 0x3300/0x4300 is not needed by the receivers' checks."""
    size = len(payload) if heap_size is None else heap_size
    items = [(0x01, heap_cnt), (0x02, size), (0x03, offset), (0x04, len(payload))] + list(immediates.items())
    head = struct.pack(">BBBBHH", 0x53, 4, 2, 6, 0, len(items))
    ptrs = b"".join(struct.pack(">Q", (1 << 63) | (i << 48) | (v & ((1 << 48) - 1))) for i, v in items)
    return head + ptrs + payload


def send_udp(port, datagrams):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for d in datagrams:
            s.sendto(d, ("127.0.0.1", port))


def ones_complement_sum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def read_pcap(path):
    """Yields (ip_header_ok, udp_checksum_ok, src, dst, payload) for each Ethernet/IPv4/UDP frame,
    parsing the file independently of gpucbf."""
    data = Path(path).read_bytes()
    magic = struct.unpack("<I", data[:4])[0]
    if magic in (0xA1B2C3D4, 0xA1B23C4D):
        e = "<"
    elif magic in (0xD4C3B2A1, 0x4D3CB2A1):
        e = ">"
    else:
        raise AssertionError(f"not a classic pcap file: magic {magic:#x}")
    linktype = struct.unpack(e + "I", data[20:24])[0]
    assert linktype == 1, f"link type {linktype} is not Ethernet"
    off = 24
    while off < len(data):
        _ts, _tus, incl, orig = struct.unpack(e + "IIII", data[off : off + 16])
        frame = data[off + 16 : off + 16 + incl]
        off += 16 + incl
        assert incl == orig
        assert struct.unpack("!H", frame[12:14])[0] == 0x0800, "not IPv4"
        ip = frame[14:]
        ihl = (ip[0] & 0xF) * 4
        total = struct.unpack("!H", ip[2:4])[0]
        ip_ok = ones_complement_sum(ip[:ihl]) == 0xFFFF
        assert ip[9] == 17, "not UDP"
        src_ip, dst_ip = ip[12:16], ip[16:20]
        udp = ip[ihl:total]
        sport, dport, ulen, csum = struct.unpack("!HHHH", udp[:8])
        pseudo = src_ip + dst_ip + struct.pack("!BBH", 0, 17, ulen)
        udp_ok = csum == 0 or ones_complement_sum(pseudo + udp[:ulen]) == 0xFFFF
        yield ip_ok, udp_ok, (socket.inet_ntoa(src_ip), sport), (socket.inet_ntoa(dst_ip), dport), udp[8:ulen]


def write_pcap(path, datagrams, src=("127.0.0.1", 50000)):
    """Writes UDP datagrams [(dst, payload)] as an Ethernet/IPv4/UDP pcap with valid checksums."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i, ((dst_ip, dport), payload) in enumerate(datagrams):
        s_ip, d_ip = socket.inet_aton(src[0]), socket.inet_aton(dst_ip)
        ulen = 8 + len(payload)
        pseudo = s_ip + d_ip + struct.pack("!BBH", 0, 17, ulen)
        udp = struct.pack("!HHHH", src[1], dport, ulen, 0) + payload
        c = 0xFFFF - ones_complement_sum(pseudo + udp)
        udp = udp[:6] + struct.pack("!H", c or 0xFFFF) + udp[8:]
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + ulen, i & 0xFFFF, 0, 64, 17, 0, s_ip, d_ip)
        ip = ip[:10] + struct.pack("!H", 0xFFFF - ones_complement_sum(ip)) + ip[12:]
        eth = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00"
        frame = eth + ip + udp
        out.append(struct.pack("<IIII", i // 1000000, i % 1000000, len(frame), len(frame)) + frame)
    Path(path).write_bytes(b"".join(out))
