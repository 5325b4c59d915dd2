"""The README's main job: `gpucbf array` runs dsim, F-engines and an XB-engine as separate
processes over UDP loopback and writes visibilities, plots, a dirty image and a summary."""

import json

import numpy as np

from conftest import run


def test_array_end_to_end(gpucbf, tmp_path):
    out = tmp_path / "array"
    run([gpucbf, "array", "--antennas", "4", "--channels", "1024", "--duration", "4", "--output", str(out),
         "--backend", "cpu", "--base-port", "17400"])
    s = json.loads((out / "summary.json").read_text())
    assert s["dumps_produced"] >= 2
    assert s["receiver"]["dropped_packets"] == 0
    for e in [s["engines"]["dsim"], s["engines"]["xbgpu"], *s["engines"]["fgpu"]]:
        assert e["exit_status"] == 0, e
    v = np.load(out / "visibilities.npy")
    assert v.shape == (s["dumps_produced"], 1024, 10, 4) and v.dtype == np.complex64
    # The tone (a quarter of the band) stands out in antenna 0's autocorrelation.
    assert s["products"]["tone_channel_power_ratio"] > 3
    # The brightest source sits at the phase centre.
    peak = s["products"]["peak"]
    assert abs(peak["l"]) < 0.02 and abs(peak["m"]) < 0.02
    for f in ["spectrum.png", "image.png", "image.fits"]:
        assert (out / f).stat().st_size > 1000
    assert (out / "image.fits").read_bytes()[:6] == b"SIMPLE"
