"""A spiking recording's views say what it holds: firing rates in Hz per bin of ms.

``flyviz share`` and ``flyviz figure`` labelled a spiking run as a language model's (the
page's "Live state (activation h)" on a ±300 blue-orange bar, a "Next token" heading,
"token 10 / 10" and the bins' words run together; the raster's "10 tokens", "token" axis
and "activation x"; the brain figure's "activation h"), and ``flyviz replay`` ran it on a
language model and reported a token mismatch. The views now take the labels, units and
colours from the recording's kind (``ModelKind.state_layer``, ``page_axis``,
``page_counter``), and replay asks the kind whether it replays (``replay_refusal``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from test_spiking_kind import write_brain

from flyviz.cli import main
from flyviz.record.recording import Recording

pytest.importorskip("pyarrow")

# The engine's kernels compiled once for all the test workers (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("spiking_kernels")

BINS = 6


@pytest.fixture(scope="module")
def spiking(tmp_path_factory) -> tuple[Path, Path]:
    """``(brain folder, recording)``: 60 ms of the two-sided test brain in 10 ms bins."""
    root = tmp_path_factory.mktemp("spiking-views")
    brain = write_brain(root / "brain")
    rec = root / "sp.flyrec"
    assert main(["simulate", str(brain), "--excite", "superclass:sensory", "--duration",
                 f"{10 * BINS}ms", "--bin", "10", "--seed", "4", "--record", str(rec)]) == 0
    return brain, rec


def _header(page: Path) -> dict:
    found = re.search(r'<script type="application/json" id="flyviz-data">(.*?)</script>',
                      page.read_text(encoding="utf-8"), re.S)
    assert found
    return json.loads(found.group(1))


def test_a_shared_spiking_page_reads_in_hertz_per_bin(spiking, tmp_path, capsys):
    _brain, rec = spiking
    out = tmp_path / "sp.html"
    assert main(["share", str(rec), "--out", str(out)]) == 0
    header = _header(out)
    state = header["layers"][0]
    assert state["key"] == "state"
    assert state["title"] == "&Live state (firing rate, Hz)".replace("&", "")
    assert state["caption"] == "firing rate in the bin (Hz)"
    # Rates from 0 on sequential colours, not a diverging ±range of activations.
    assert not state["diverging"] and state["colormap"] == "sequential"
    assert all(low == 0.0 and high > 0.0 for low, high in state["ranges"])
    # Bins of 10 ms, no text line and no next-token bars; each bin's counter is the kind's.
    axis = header["axis"]
    assert (axis["name"], axis["names"], axis["unit"], axis["step"]) == ("bin", "bins", "ms", 10.0)
    assert axis["text"] is False and axis["bars"] == ""
    spikes = Recording.load(rec).metadata["spiking"]["bin_spikes"]
    assert [t["counter"] for t in header["tokens"]] == [
        f"bin {i} / {BINS - 1} · {10 * (i + 1)} ms · {spikes[i]:,} spikes" for i in range(BINS)]
    assert "token" not in json.dumps(header["axis"])
    # The title says what was run (it was the brain's name alone: "brain").
    meta = Recording.load(rec).metadata
    excited = meta["spiking"]["excited"]
    assert excited > 0
    assert header["title"] == f"{meta['model_name']}: {excited} excited at 150 Hz, 0.06 s"


def test_a_shared_spiking_page_names_neurons_by_their_root_ids(spiking, tmp_path, capsys):
    """The hover named a neuron by the model's index; it names the brain's root id, kept
    exact as int64 (7.2e17 is past a JavaScript number's exact integers)."""
    from test_share_page import _blob

    from flyviz.spiking import load_brain

    brain_folder, rec = spiking
    out = tmp_path / "ids.html"
    assert main(["share", str(rec), "--out", str(out)]) == 0
    header = _header(out)
    assert header["has_body_ids"] is True
    page = out.read_text(encoding="utf-8")
    shown = np.frombuffer(_blob(page, "ids"), np.uint32)
    body = np.frombuffer(_blob(page, "body_ids"), np.int64)
    root_ids = load_brain(brain_folder).root_ids
    assert body.size == shown.size > 0 and body.min() > 2 ** 53
    np.testing.assert_array_equal(body, root_ids[shown])


def test_share_range_run_keeps_one_colour_range_for_every_bin(spiking, tmp_path, capsys):
    """By default each bin's colours span its own range, as the app shows them; --range run
    keeps one over the run, as a movie does, so a colour is one rate on every bin."""
    _brain, rec = spiking
    own, one = tmp_path / "own.html", tmp_path / "one.html"
    assert main(["share", str(rec), "--out", str(own)]) == 0
    assert main(["share", str(rec), "--out", str(one), "--range", "run"]) == 0
    per_bin = [tuple(r) for r in _header(own)["layers"][0]["ranges"]]
    whole = [tuple(r) for r in _header(one)["layers"][0]["ranges"]]
    assert len(set(per_bin)) > 1 and len(set(whole)) == 1
    assert whole[0][1] >= max(high for _low, high in per_bin) * 0.5 > 0


@pytest.mark.slow
def test_a_shared_spiking_page_in_a_browser_shows_bins_and_no_token_panels(spiking, tmp_path):
    from test_share_page import _chromium_or_skip

    _chromium_or_skip()
    from _chromium import Browser

    _brain, rec = spiking
    out = tmp_path / "sp.html"
    assert main(["share", str(rec), "--out", str(out)]) == 0
    spikes = Recording.load(rec).metadata["spiking"]["bin_spikes"]
    with Browser((1000, 700)) as browser:
        browser.open(out)
        assert browser.evaluate("window.flyviz.error || ''") == ""
        label = browser.evaluate("document.getElementById('token-label').textContent")
        assert label == f"bin {BINS - 1} / {BINS - 1} · {10 * BINS} ms · {spikes[-1]:,} spikes"
        assert browser.evaluate("document.getElementById('bar-caption').textContent") == \
            "firing rate in the bin (Hz)"
        assert browser.evaluate("document.getElementById('bar-low').textContent") == "0"
        # Rates as a reader says them: "300", not "3.00e+2".
        high = browser.evaluate("document.getElementById('bar-high').textContent")
        assert re.fullmatch(r"[0-9][0-9,]*(\.[0-9]+)?", high), high
        # No "Next token" heading over nothing, no text line of the bins' words run together.
        assert browser.evaluate("document.getElementById('bars-title').hidden")
        assert browser.evaluate("document.getElementById('text').hidden")
        assert browser.evaluate("document.getElementById('token').getAttribute('aria-label')") \
            == "bin"


def test_share_trace_of_a_spiking_recording_is_one_line(spiking, tmp_path, capsys):
    """``--trace`` explains a language model's token: on a spiking run it was a traceback
    ('SpikingModel' object has no attribute 'checkpoint')."""
    from cli_checks import cli_run, one_error_line

    _brain, rec = spiking
    code, _, err = cli_run(capsys, "share", str(rec), "--out", str(tmp_path / "t.html"),
                           "--trace", "3")
    one_error_line(code, err, "--trace explains a language model's choice of a token",
                   "sp.flyrec is a spiking brain recording")
    assert not (tmp_path / "t.html").exists()


@pytest.mark.parametrize("command", ["share", "export"])
def test_a_colour_mode_for_a_spiking_recording_is_one_line(spiking, tmp_path, capsys, command):
    """A rate has no sign: ``--mode abs`` on a spiking recording was accepted and did nothing."""
    from cli_checks import cli_run, one_error_line

    _brain, rec = spiking
    out = tmp_path / ("m.html" if command == "share" else "m.gif")
    args = [command, str(rec)] if command == "share" else [command, "--recording", str(rec)]
    code, _, err = cli_run(capsys, *args, "--out", str(out), "--mode", "abs")
    one_error_line(code, err, "--mode abs colours a language model's |x|",
                   "sp.flyrec is a spiking brain recording, coloured by its rate (Hz)")
    assert not out.exists()
    # Without --mode it is made (a spiking export once stopped on its frozen options).
    code, _, err = cli_run(capsys, *args, "--out", str(out),
                           *(["--size", "160x96", "--frames-per-token", "1"]
                             if command == "export" else []))
    assert code == 0 and out.stat().st_size > 0, err


def _texts(figure) -> list[str]:
    from matplotlib.text import Text

    return [t.get_text() for t in figure.findobj(Text) if t.get_text()]


@pytest.mark.parametrize("kind", ["raster", "celltypes"])
def test_a_spiking_figure_reads_in_hertz_over_bins(spiking, kind):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from flyviz.figures import _DRAW, FigureOptions
    from flyviz.kinds.spiking import SpikingModel

    brain, rec = spiking
    recording = Recording.load(rec)
    model = SpikingModel.load(str(brain))
    figure = Figure(figsize=(16, 10), layout="constrained")
    _DRAW[kind](figure, recording, model, FigureOptions(kind=kind).checked())
    texts = _texts(figure)
    words = " ".join(texts)
    assert "firing rate in the bin (Hz)" in words, texts
    # The x axis: each bin's end, in ms.
    timed = [a for a in figure.axes if a.get_xlabel() == "bin end (ms)"]
    assert timed, texts
    assert [t.get_text() for t in timed[0].get_xticklabels()] == \
        [f"{10 * (i + 1)}" for i in range(BINS)]
    assert "token" not in words and "activation" not in words, texts
    if kind == "raster":
        assert f"× {BINS} bins" in words
    else:
        assert "per bin" in words


def test_a_spiking_brain_figure_has_a_colour_bar_in_hertz(spiking, tmp_path):
    pytest.importorskip("matplotlib")
    from gl_skip import offscreen_gl_or_skip
    from matplotlib.figure import Figure

    from flyviz.figures import _DRAW, FigureOptions
    from flyviz.kinds.spiking import SpikingModel

    brain, rec = spiking
    figure = Figure(figsize=(8, 5), layout="constrained")
    with offscreen_gl_or_skip():
        _DRAW["brain"](figure, Recording.load(rec), SpikingModel.load(str(brain)),
                       FigureOptions(kind="brain", size=(800, 500)).checked())
    texts = _texts(figure)
    assert "firing rate in the bin (Hz)" in texts, texts
    assert not any("activation" in t for t in texts), texts
    assert any(t.startswith(f"bin {BINS - 1} of 0\u2013{BINS - 1} · {10 * BINS} ms") for t in texts), texts


@pytest.mark.parametrize("model", [[], ["--model", "demo"]])
def test_replay_refuses_a_spiking_recording_naming_simulate_with_its_seed(spiking, capsys,
                                                                          model):
    brain, rec = spiking
    capsys.readouterr()
    assert main(["replay", str(rec), *model]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    line = err[0]
    assert line.startswith(f"flyviz: error: {rec.name}: a spiking brain's run is not replayed")
    assert f"flyviz simulate {brain} --duration {10 * BINS}ms --bin 10 --excite " \
           "superclass:sensory --seed 4" in line, line
    assert "MISMATCH" not in line and "--model" not in line


def test_a_spiking_state_is_coloured_as_rates_whatever_the_colour_mode(spiking):
    from flyviz.kinds import kind_of_recording
    from flyviz.viewer import ViewerState
    from flyviz.viewer.layers import STATE

    _brain, rec = spiking
    recording = Recording.load(rec)
    state = ViewerState()
    state.set_model(None, None, "sp", neurons=recording.neurons,
                    kind=kind_of_recording(recording))
    state.set_recording(recording)
    for mode in ("signed", "abs"):
        state.display.mode = mode
        layer = state.layer_of(STATE)
        assert (layer.caption, layer.colormap) == ("firing rate in the bin (Hz)", "sequential")
        assert state.value_range()[0] == 0.0
        np.testing.assert_array_equal(state.values(), recording.state(len(recording) - 1))
    assert state.colour_layers[STATE].title == "&Live state (firing rate, Hz)"
    # Back on a language model, the state is its activation again.
    state.set_model(None, None, "lm", neurons=recording.neurons)
    assert state.layer_of(STATE).caption == "|activation x|"
    assert state.colour_layers[STATE].title == "&Live state (activation x)"


@pytest.mark.slow
def test_a_shared_spiking_pages_hover_reads_whole_spikes(spiking, tmp_path):
    """A rate is a whole number of spikes over the bin (100 Hz a spike in a 10 ms bin), but
    the page keeps it in 8 bits: one spike in a bin whose top was 300 Hz read "≈ 99". The
    hover rounds to the spike's step, exactly where 8 bits are finer than one spike."""
    from test_share_page import _chromium_or_skip

    _brain, rec = spiking
    out = tmp_path / "sp.html"
    assert main(["share", str(rec), "--out", str(out)]) == 0
    header = _header(out)
    assert header["layers"][0]["steps"] == [100.0] * BINS       # 1 trial of 10 ms bins
    _chromium_or_skip()
    from _chromium import Browser

    recording = Recording.load(rec)
    with Browser((1000, 700)) as browser:
        browser.open(out)
        assert browser.evaluate("window.flyviz.error || ''") == ""
        uneven = 0
        for b in range(BINS):
            tips = browser.evaluate(f"(window.flyviz.setToken({b}), Array.from({{length: "
                                    "window.flyviz.header.shown}, (_, i) => "
                                    "window.flyviz.tipText(i)))")
            rates = recording.state(b)
            for tip in tips:
                neuron = int(re.search(r"\(#(\d+)\)", tip).group(1))
                found = re.search(r" (=|≈) ([0-9,.]+)$", tip)
                assert found and found.group(1) == "=", tip
                assert float(found.group(2).replace(",", "")) == rates[neuron], (tip, b)
                uneven += bool(rates[neuron] % (rates.max() / 127.0) > 1e-6)
        assert uneven, "no rate the 8 bits held only approximately"


def test_share_delta_of_a_spiking_recording_says_how_spiking_runs_compare(spiking, tmp_path,
                                                                          capsys):
    """``--layer delta`` on a spiking run suggested ``flyviz compare SPEC --prompt …``, the
    language model's command; it says how spiking runs are compared."""
    from cli_checks import cli_run, one_error_line

    _brain, rec = spiking
    code, _, err = cli_run(capsys, "share", str(rec), "--out", str(tmp_path / "d.html"),
                           "--layer", "delta")
    one_error_line(code, err, "--layer delta needs a comparison; sp.flyrec is a single run",
                   "flyviz simulate BRAIN --silence QUERY --record FILE",
                   "flyviz simulate BRAIN --silence QUERY --compare SPIKES")
    assert "flyviz compare" not in err and "--prompt" not in err
    assert not (tmp_path / "d.html").exists()


def test_figure_dx_of_a_spiking_recording_says_how_spiking_runs_compare(spiking, tmp_path,
                                                                        capsys):
    """``figure --quantity dx`` on a single spiking run named the language model's
    ``flyviz compare SPEC --prompt …``; it says how spiking runs are compared."""
    from cli_checks import cli_run, one_error_line

    brain, rec = spiking
    out = tmp_path / "dx.png"
    code, _, err = cli_run(capsys, "figure", str(rec), "--kind", "celltypes", "--quantity",
                           "dx", "--model", str(brain), "--out", str(out))
    one_error_line(code, err, "--quantity dx needs a comparison recording",
                   "flyviz simulate BRAIN --silence QUERY --record FILE")
    assert "flyviz compare" not in err and "--prompt" not in err
    assert not out.exists()
