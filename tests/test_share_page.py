"""A shared web page of a run (``flyviz share``, ``flyviz.share``), checked in a real browser.

The page is one HTML file that opens with no network. Headless Chromium
(SwiftShader's software WebGL2, every host name resolved to nothing) loads
one page of the demo brain once, and that load serves every browser check:
the page draws lit points where flyviz's own still of the same state has them,
``#token=K`` shows token K's picture and text, the slider and play advance it,
hover names the neuron under the pointer, and the page made no request but for
itself. ``FLYVIZ_SCREENSHOTS`` names a folder to keep the page's screenshot in
as ``share.png`` (``FLYVIZ_SCREENSHOTS=docs/images`` makes the README's).

Without Chromium the browser checks skip with the reason, except in CI
(``CI=true``), where they fail: CI installs it.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from flyviz.errors import ExportError, InputError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _chromium import Browser, chromium_path  # noqa: E402

pytestmark = pytest.mark.slow

SIZE = (640, 400)
TOKEN = 5
PROMPT = "Once upon a time there was a little girl"


def _chromium_or_skip() -> None:
    if chromium_path() is None:
        reason = "chromium is not installed (apt-get install chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}; CI must install it (.ci/run)")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def shared(demo, tmp_path_factory):
    """A comparison of the demo brain with a trace, as the app's state, and its page."""
    import flyviz
    from flyviz.viewer import ViewerState
    from flyviz.viewer.layers import DELTA, delta_layer

    untouched = flyviz.run(demo, PROMPT, max_new_tokens=4)
    recording = flyviz.run(demo, PROMPT, max_new_tokens=4,
                           interventions=["silence sign:inhibitory"])
    recording.baseline = untouched
    attribution = flyviz.trace(demo, recording, position=8, window=4)
    state = ViewerState()
    state.set_model(demo)
    state.set_recording(recording, index=TOKEN)
    state.offer_layer(DELTA, delta_layer)
    state.display.point_size = 4.0
    state.selected = int(np.flatnonzero(state.anatomy.valid)[100])
    out = flyviz.share(state, tmp_path_factory.mktemp("share") / "run.html",
                       attribution=attribution)
    return state, attribution, out


# ---------------------------------------------------------------- the file
def _blob(page: str, name: str) -> bytes:
    found = re.search(rf'<script type="application/octet-stream" data-name="{name}">([^<]*)<',
                      page)
    assert found, name
    return zlib.decompress(base64.b64decode(found.group(1)))


def _header(page: str) -> dict:
    found = re.search(r'<script type="application/json" id="flyviz-data">(.*?)</script>', page,
                      re.S)
    assert found
    return json.loads(found.group(1))


def test_the_page_is_one_file_with_its_data_inside_and_nothing_to_fetch(shared):
    state, attribution, out = shared
    page = out.read_text(encoding="utf-8")
    # Nothing refers outside the file: no src/href, no URL a browser would follow.
    assert not re.search(r"""\b(src|href)\s*=""", page)
    assert "http://" not in page and "https://" not in page.replace(
        "http-equiv", "")
    assert "connect-src 'none'" in page            # the page may not fetch, by its own policy
    header = _header(page)
    # A page made with a trace opens on its flows (what it was made to show).
    assert [layer["key"] for layer in header["layers"]] == ["flow", "state", "delta"]
    # The comparison's layer is named alike in its menu and on its bar (the bar said Δh).
    delta = header["layers"][2]
    assert delta["title"].startswith("Δx: ") and delta["caption"].startswith("Δx, "), delta
    assert header["layer"] == "flow"
    assert header["index"] == TOKEN and len(header["tokens"]) == len(state.recording)
    assert header["tokens"][TOKEN]["text"] == state.recording.token_texts[TOKEN]
    # The values are 8-bit per frame with a per-frame scale: token 5's state comes back
    # within half a step of its scale, for the neurons with a soma.
    shown = np.flatnonzero(state.anatomy.valid)
    assert header["shown"] == shown.size
    codes = np.frombuffer(_blob(page, "layer-1"), np.uint8).reshape(len(state.recording), -1)
    scale = header["layers"][1]["scales"][TOKEN]
    back = (codes[TOKEN].astype(np.float32) - 128.0) * scale
    assert np.abs(back - state.recording.state(TOKEN)[shown]).max() <= 0.5 * scale + 1e-6
    assert header["layers"][1]["ranges"][TOKEN] == pytest.approx(state.value_range(TOKEN))
    # Positions at float16, about the brain's centre; the flows one frame per lag.
    positions = np.frombuffer(_blob(page, "positions"), np.float16).reshape(-1, 3)
    truth = state.anatomy.positions_um()[shown] - np.asarray(header["centre"])
    assert np.abs(positions.astype(np.float64) - truth).max() < 0.5
    assert header["layers"][0]["frames"] == len(attribution.positions)
    assert header["trace"]["position"] == 8


def test_share_refuses_what_it_cannot_show(shared, tmp_path):
    import flyviz
    from flyviz.viewer import ViewerState

    state, _attribution, _out = shared
    with pytest.raises(InputError, match="no colour layer 'flow'"):
        flyviz.share(state, tmp_path / "x.html", layers=["flow"])
    with pytest.raises(ExportError, match="no model"):
        flyviz.share(ViewerState(), tmp_path / "y.html")
    assert not list(tmp_path.iterdir())               # nothing half-written


def test_a_damaged_or_foreign_recording_is_one_line_and_exit_2(tmp_path):
    damaged = tmp_path / "damaged.flyrec"
    damaged.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    foreign = tmp_path / "notes.flyrec"
    foreign.write_text("a page of notes, not a recording\n" * 20)
    for bad in (damaged, foreign):
        out = tmp_path / f"{bad.stem}.html"
        done = subprocess.run([sys.executable, "-m", "flyviz", "share", str(bad), "--out",
                               str(out)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("flyviz: error: ")
        assert bad.name in lines[0] and "Traceback" not in done.stderr
        assert not out.exists()


def test_a_page_into_a_folder_that_takes_no_file_is_refused_before_the_recording_loads(
        capsys, monkeypatch, tmp_path):
    """``--out /proc/run.html``: root passes ``os.access`` there, so the recording and its
    model were loaded and the page built before the write failed. The folder is tried
    first."""
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc here")
    from flyviz.cli import main
    from flyviz.record.recording import Recording

    def must_not_load(*_args, **_kwargs):
        raise AssertionError("the recording was loaded before --out was checked")

    monkeypatch.setattr(Recording, "load", must_not_load)
    recording = tmp_path / "run.flyrec"
    recording.write_bytes(b"never read")
    assert main(["share", str(recording), "--out", "/proc/run.html"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "flyviz: error: cannot write --out /proc/run.html: the folder /proc takes no new files")


# ---------------------------------------------------------------- in the browser
def _image(png: bytes) -> np.ndarray:
    import imageio.v3 as iio

    return np.asarray(iio.imread(io.BytesIO(png)))[..., :3]


def _lit(image: np.ndarray) -> np.ndarray:
    return image.max(axis=-1) > 40


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max(1, (a | b).sum()))


def test_the_page_in_a_browser(shared):
    """One page load: its picture is the still's, #token=K, the slider, play and hover."""
    _chromium_or_skip()
    from flyviz.render.offscreen import FrameRenderer
    from flyviz.render.picking import project_points

    state, _attribution, out = shared
    with FrameRenderer.for_state(state, SIZE) as renderer:
        still = renderer.render_token(state)
        other = renderer.render_token(state, 1)
        cloud = renderer.cloud
        shown = np.flatnonzero(cloud.shown)
        xy, _, ok = project_points(cloud.positions[shown], cloud.get_transform("visual",
                                                                             "canvas"))
    with Browser((1000, 700)) as browser:
        browser.open(out, f"token=2&layer=state&size={SIZE[0]}x{SIZE[1]}")
        assert browser.evaluate("window.flyviz.error || ''") == ""
        # #token=K and a hash change show token K's picture and text.
        browser.evaluate(f"location.hash = 'token={TOKEN}&layer=state&size={SIZE[0]}x{SIZE[1]}'")
        browser.wait(f"window.flyviz.page.token === {TOKEN}")
        page = _image(browser.png("window.flyviz.snapshot()"))
        assert page.shape == still.shape
        assert _lit(still).sum() > 2000
        assert _iou(_lit(page), _lit(still)) >= 0.9, browser.evaluate("window.flyviz.info()")
        assert _iou(_lit(page), _lit(still)) > _iou(_lit(page), _lit(other))
        marked = browser.evaluate("document.querySelector('#text span.current').textContent")
        assert marked == state.recording.token_texts[TOKEN]
        assert browser.evaluate("document.getElementById('token').value") == str(TOKEN)
        # Tokens read as the app shows them, Python's repr (JSON showed '"' as "\"").
        for text in (" She", '"', "'s", "a\nb", "\\", "it's \"x\"", "\x01", "</s>"):
            assert browser.evaluate(f"window.flyviz.tokenText({json.dumps(text)})") == \
                repr(text), text
        listed = browser.evaluate("document.querySelector('#topk li .t').textContent")
        assert listed == repr(str(state.recording[TOKEN].top_k_text[0]))
        # Hover names the neuron under the pointer: one with no other within 8 pixels.
        box = browser.evaluate("(() => { const r = document.getElementById('brain')"
                               ".getBoundingClientRect(); return [r.left, r.top]; })()")
        inside = ok & (xy[:, 0] > 20) & (xy[:, 0] < SIZE[0] - 20) & (xy[:, 1] > 20) \
            & (xy[:, 1] < SIZE[1] - 20)
        # ... one whose value changes from token to token (for the tooltip to follow it).
        states = np.stack([state.recording.state(k)[shown] for k in range(len(
            state.recording))])
        inside &= np.ptp(states, axis=0) > 0.25 * np.abs(states).max()
        pick = _isolated(xy[:, :2], inside)
        neuron = int(shown[pick])
        browser.mouse("mouseMoved", box[0] + float(xy[pick, 0]), box[1] + float(xy[pick, 1]))
        browser.wait("!document.getElementById('tip').hidden")
        tip = browser.evaluate("document.getElementById('tip').textContent")
        anatomy = state.anatomy
        # By the connectome's id where the model has one (it gave the model's index alone).
        body = anatomy.body_id
        if body is not None:
            assert f"neuron {int(body[neuron])} (#{neuron}) · " in tip, tip
            assert browser.evaluate("document.getElementById('tip').dataset.bodyId") == \
                str(int(body[neuron]))
        else:
            assert f"neuron {neuron} · " in tip, tip
        assert anatomy.cell_type[neuron] in tip and anatomy.superclass[neuron] in tip
        # ... and its value, named as the colour bar names it, about as the page holds it
        # (it read "state 0.123" by the layer's key).
        found = re.search(r"· activation x ≈ (-?[0-9.]+(?:e-?[0-9]+)?)$", tip)
        assert found, tip
        held = float(state.recording.state(TOKEN)[neuron])
        top = max(abs(v) for v in state.value_range(TOKEN, state.layer_of("state")))
        assert abs(float(found.group(1)) - held) <= 0.02 * top + 0.05 * abs(held), (tip, held)
        # The tooltip follows the shown token and layer with the pointer still: it kept
        # token 5's value after a step (hover ran only when the pointer moved).
        far = int(np.argmax(np.abs(states[:, pick] - held)))
        browser.evaluate(f"window.flyviz.setToken({far})")
        tip = browser.evaluate("document.getElementById('tip').textContent")
        found = re.search(r"· activation x ≈ (-?[0-9.]+(?:e-?[0-9]+)?)$", tip)
        assert found, tip
        top = max(abs(v) for v in state.value_range(far, state.layer_of("state")))
        assert abs(float(found.group(1)) - states[far, pick]) <= 0.02 * top + 0.05 * abs(
            states[far, pick]) < abs(float(found.group(1)) - held), (tip, held, states[far])
        browser.evaluate(f"location.hash = 'token={far}&layer=delta&size={SIZE[0]}x{SIZE[1]}'")
        browser.wait("document.body.dataset.layer === 'delta'")
        tip = browser.evaluate("document.getElementById('tip').textContent")
        assert " · Δx, " in tip and not browser.evaluate("document.getElementById('tip').hidden")
        browser.evaluate(f"location.hash = 'token={TOKEN}&layer=state&size={SIZE[0]}x{SIZE[1]}'")
        browser.wait(f"window.flyviz.page.token === {TOKEN} && document.body.dataset.layer "
                     "=== 'state'")
        keep = os.environ.get("FLYVIZ_SCREENSHOTS")
        if keep:
            browser.evaluate(f"location.hash = 'token={TOKEN}&size=720x450'")
            browser.wait("window.flyviz.page.size[0] === 720")
            browser.mouse("mouseMoved", box[0] + float(xy[pick, 0]) * 720 / SIZE[0],
                          box[1] + float(xy[pick, 1]) * 450 / SIZE[1])
            Path(keep).mkdir(parents=True, exist_ok=True)
            (Path(keep) / "share.png").write_bytes(browser.screenshot())
        # The slider shows the token it is moved to, and the address follows.
        browser.evaluate("(() => { const s = document.getElementById('token'); s.value = '3';"
                         " s.dispatchEvent(new Event('input')); })()")
        assert browser.evaluate("window.flyviz.page.token") == 3
        assert "token=3" in browser.evaluate("location.hash")
        assert browser.evaluate("document.querySelector('#text span.current')"
                                ".textContent") == state.recording.token_texts[3]
        # Play advances to the last token at the run's rate, then stops.
        browser.evaluate("document.getElementById('play').click()")
        last = len(state.recording) - 1
        browser.wait(f"window.flyviz.page.token === {last} && !window.flyviz.page.playing",
                     timeout_s=20)
        # The flow layer has its lag slider; the layer and lag are in the address.
        browser.evaluate("location.hash = 'token=3&layer=flow&lag=2'")
        browser.wait("document.body.dataset.layer === 'flow'")
        assert not browser.evaluate("document.getElementById('lag-row').hidden")
        assert "lag=2" in browser.evaluate("location.hash")
        # Every request the page made was for itself: nothing from the network.
        assert browser.requests and all(url.split("#")[0] == out.resolve().as_uri()
                                        for url in browser.requests)


def _isolated(xy: np.ndarray, inside: np.ndarray) -> int:
    """A neuron inside the picture with no other within 8 pixels on screen."""
    from scipy.spatial import cKDTree

    tree = cKDTree(xy)
    for i in np.flatnonzero(inside):
        if len(tree.query_ball_point(xy[i], 8.0)) == 1:
            return int(i)
    pytest.fail("no neuron stands alone on screen to hover")


LONG_PROMPT = ("Once upon a time there was a little girl named Lily who liked to play in the "
               "garden with her dog, and one day she found a small box under the old tree")


def test_the_page_heads_a_long_prompt_at_a_word_and_counts_tokens_from_zero(demo, tmp_path):
    """A title longer than the side panel is shortened at a word with the whole title in
    its tooltip (it was cut at 60 characters, mid-word), and the counter reads "token K / L"
    with K from 0, as #token=K, --token K and the window count, and L the run's last index
    (the last token reads "token L / L", not "/ N", which promised one more)."""
    _chromium_or_skip()
    import flyviz
    from flyviz.viewer import ViewerState

    recording = flyviz.run(demo, LONG_PROMPT, max_new_tokens=1)
    state = ViewerState()
    state.set_model(demo)
    state.set_recording(recording, index=len(recording) - 1)
    out = flyviz.share(state, tmp_path / "long.html")
    whole = f"{state.model_name}: {LONG_PROMPT}"
    assert _header(out.read_text(encoding="utf-8"))["title"] == whole
    with Browser((1000, 700)) as browser:
        browser.open(out)
        assert browser.evaluate("window.flyviz.error || ''") == ""
        heading = browser.evaluate("document.getElementById('title').textContent")
        assert browser.evaluate("document.getElementById('title').title") == whole
        assert heading.endswith("…") and len(heading) < len(whole)
        kept = heading[:-1].rstrip()
        assert whole.startswith(kept) and whole[len(kept)] == " ", heading  # ends at a word
        # The heading fits the panel: nothing of it is drawn outside its box.
        assert browser.evaluate("(() => { const h = document.getElementById('title');"
                                " return h.scrollWidth <= h.clientWidth; })()")
        n = len(recording)
        assert browser.evaluate("document.getElementById('token-label').textContent") == \
            f"token {n - 1} / {n - 1}"
        browser.evaluate("location.hash = 'token=0'")
        browser.wait("window.flyviz.page.token === 0")
        assert browser.evaluate("document.getElementById('token-label').textContent") == \
            f"token 0 / {n - 1}"
        assert browser.evaluate("document.title").endswith(f"token 0 / {n - 1}")


#: For each entry of the Colour by menu: its text's width in the menu's font, the width the
#: menu needs to draw it whole (the menu sized to its content) and the width it is drawn at.
MENU_WIDTHS = """(() => {
  const select = document.getElementById('layer');
  const pen = document.createElement('canvas').getContext('2d');
  pen.font = getComputedStyle(select).font;
  const probe = select.cloneNode(true);
  probe.style.cssText = 'position: absolute; width: max-content; visibility: hidden';
  document.body.appendChild(probe);
  const needed = probe.getBoundingClientRect().width;
  probe.remove();
  const style = getComputedStyle(select);
  const inner = select.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  return {texts: [...select.options].map((o) => [o.textContent, pen.measureText(o.textContent).width]),
          needed, drawn: select.getBoundingClientRect().width, inner};
})()"""


def test_the_colour_by_menu_draws_its_entries_whole(shared, tmp_path):
    """At a 1280x800 window the Colour by menu is as wide as its widest entry needs, so the
    chosen entry is drawn whole. It stood beside its label in the 260-pixel side panel, 165
    pixels wide, and drew "Live state (activation x)" cut ("Live state (activatio"), the
    comparison's "Δx: intervened − untouched" more so. A page whose menu holds flyviz's longest
    layer title widens its side panel to it (the menu under its label is not wide enough)."""
    _chromium_or_skip()
    from flyviz.viewer.layers import LAYERS

    _state, _attribution, out = shared
    longest = max((kind.title.replace("&", "") for kind in LAYERS.values()), key=len)
    page = out.read_text(encoding="utf-8")
    assert '"title":"Δx: intervened − untouched"' in page
    long_page = tmp_path / "long-layer.html"
    long_page.write_text(page.replace('"title":"Δx: intervened − untouched"',
                                      '"title":' + json.dumps(longest, ensure_ascii=False)),
                         encoding="utf-8")
    with Browser((1280, 800)) as browser:
        for path in (out, long_page):
            browser.open(path)
            assert browser.evaluate("window.flyviz.error || ''") == ""
            menu = browser.evaluate(MENU_WIDTHS)
            texts = dict(menu["texts"])
            assert len(texts) == 3, texts
            # The menu is drawn at least as wide as it needs to draw its widest entry whole,
            # and every entry's text fits inside its padding (with room for the arrow).
            assert menu["drawn"] >= menu["needed"] - 0.5, menu
            assert max(texts.values()) + 16 <= menu["inner"], menu
            # The side panel stays in the window, beside a brain at least half its width.
            side = browser.evaluate("document.getElementById('side').getBoundingClientRect()"
                                    ".toJSON()")
            assert side["right"] <= 1280 + 0.5 and side["left"] >= 640, side
        assert longest in texts


def test_the_pages_prompt_is_the_movies_prompt(demo, tmp_path):
    """The page drew the prompt's last word ("time" of "Once upon a time") as generated text,
    from the phase of the step that reads it (the first generating one); the movie shows it
    as prompt. Both now ask the kind's one rule (flyviz.kinds.language.read_text)."""
    import flyviz
    from flyviz.kinds import LANGUAGE
    from flyviz.viewer import ViewerState

    recording = flyviz.run(demo, "Once upon a time", max_new_tokens=3)
    state = ViewerState()
    state.set_model(demo)
    state.set_recording(recording)
    steps = _header(flyviz.share(state, tmp_path / "p.html").read_text(encoding="utf-8"))["tokens"]
    first = next(i for i in range(len(recording)) if recording[i].generation_index == 0)
    assert steps[first]["text"] == " time" and steps[first]["phase"] == "prompt"
    assert [s["phase"] for s in steps[first + 1:]] == ["generation"] * (len(steps) - first - 1)
    # The page's prompt words are the movie's prompt, its other words generated; BOS, which
    # the page showed as "<s>", is no word of the text, as in the movie.
    movie = list(LANGUAGE.overlays(recording))[-1]
    assert steps[0]["text"] == "" and recording[0].input_text == "<s>"
    assert "".join(s["text"] for s in steps if s["phase"] == "prompt") == movie.prompt \
        == "Once upon a time"


def test_a_page_made_with_a_trace_opens_on_its_flow_at_that_step(demo, tmp_path):
    """``flyviz share --trace 7`` opened on the state layer at the last token; it opens on
    what it was made to show: the flow layer at step 7 (``#layer=flow&token=7``)."""
    from flyviz.cli import main

    rec, out = tmp_path / "run.flyrec", tmp_path / "why.html"
    assert main(["generate", "demo", "--prompt", PROMPT, "--max-new-tokens", "4", "--record",
                 str(rec)]) == 0
    assert main(["share", str(rec), "--out", str(out), "--trace", "7", "--window", "4"]) == 0
    header = _header(out.read_text(encoding="utf-8"))
    assert header["layer"] == "flow" and header["layers"][0]["key"] == "flow"
    assert header["index"] == 7 and header["trace"]["position"] == 7
    # --token still chooses where it opens.
    assert main(["share", str(rec), "--out", str(tmp_path / "at3.html"), "--trace", "7",
                 "--window", "4", "--token", "3"]) == 0
    assert _header((tmp_path / "at3.html").read_text(encoding="utf-8"))["index"] == 3
    # --trace adds the flows to the layers named (with --layer state they were dropped, and
    # the page said its words were shaded by flows it did not have).
    named = tmp_path / "state-first.html"
    assert main(["share", str(rec), "--out", str(named), "--trace", "7", "--window", "4",
                 "--layer", "state"]) == 0
    header = _header(named.read_text(encoding="utf-8"))
    assert [layer["key"] for layer in header["layers"]] == ["state", "flow"]
    assert header["layer"] == "state"
    _chromium_or_skip()
    with Browser((1000, 700)) as browser:
        # The sentence on the flows' shading is there while the flows are shown, only.
        browser.open(named)
        assert browser.evaluate("window.flyviz.error || ''") == ""
        assert browser.evaluate("document.body.dataset.layer") == "state"
        assert browser.evaluate("document.getElementById('trace-info').hidden")
        browser.evaluate("location.hash = 'token=7&layer=flow'")
        browser.wait("document.body.dataset.layer === 'flow'")
        assert not browser.evaluate("document.getElementById('trace-info').hidden")
        assert "shaded by the flow" in browser.evaluate(
            "document.getElementById('trace-info').textContent")
        browser.open(out)
        assert browser.evaluate("window.flyviz.error || ''") == ""
        assert browser.evaluate("window.flyviz.page.token") == 7
        assert browser.evaluate("document.body.dataset.layer") == "flow"
        params = browser.evaluate("location.hash")
        assert "layer=flow" in params and "token=7" in params, params
        assert browser.evaluate("document.getElementById('lag-label').textContent") == "step 7"
        assert browser.evaluate("document.getElementById('layer').selectedOptions[0]"
                                ".textContent") == "Flow (Why?)"


def test_a_comment_mark_in_the_pages_text_leaves_it_whole(demo, tmp_path):
    """A ``<!--`` in a title, a prompt or a token gave a page stuck on "opening…": the data
    was written with ``<\\!--``, which is no JSON escape, so the page's data did not parse.
    ``<``, ``>`` and ``&`` are now written as JSON's ``\\u003c``, ``\\u003e``, ``\\u0026``."""
    import flyviz
    from flyviz.export.share import render_page
    from flyviz.viewer import ViewerState

    marks = "Notes <!-- draft </script><script>x & y"
    page = render_page({"title": marks, "tokens": [{"text": marks}]}, {})
    data = re.search(r'id="flyviz-data">(.*?)</script>', page, re.S)
    assert data and not re.search(r"[<>&]", data.group(1))
    assert _header(page) == {"title": marks, "tokens": [{"text": marks}]}
    recording = flyviz.run(demo, "a <!-- b", max_new_tokens=1)
    state = ViewerState()
    state.set_model(demo)
    state.set_recording(recording)
    out = flyviz.share(state, tmp_path / "marks.html", title=marks)
    assert _header(out.read_text(encoding="utf-8"))["title"] == marks
    # A page whose data does not parse says so on the page, not "opening…" for ever.
    broken = tmp_path / "broken.html"
    broken.write_text(re.sub(r'(id="flyviz-data">)\{', r"\1{,", out.read_text(encoding="utf-8"),
                             count=1), encoding="utf-8")
    _chromium_or_skip()
    with Browser((1000, 700)) as browser:
        browser.open(out)
        assert browser.evaluate("window.flyviz.error || ''") == ""
        assert browser.evaluate("document.getElementById('title').title") == marks
        assert browser.evaluate("document.getElementById('status').textContent") == ""
        assert "a <!-- b" in browser.evaluate("document.getElementById('text').textContent")
        browser.open(broken)
        status = browser.evaluate("document.getElementById('status').textContent")
        assert status.startswith("this page could not open: its data cannot be read"), status
        assert browser.evaluate("window.flyviz.error").startswith("its data cannot be read")


def test_a_key_on_a_slider_moves_that_slider_once(shared):
    """With the token slider focused one arrow press moved two tokens (the page's key
    handler stepped, then the slider's own); with the lag slider focused, → moved the token
    and the lag. A focused slider's arrows are its own; elsewhere they step the token."""
    _chromium_or_skip()
    _state, _attribution, out = shared
    with Browser((1000, 700)) as browser:
        browser.open(out, "token=3&layer=flow&lag=1")
        assert browser.evaluate("window.flyviz.error || ''") == ""
        page = "window.flyviz.page"
        browser.evaluate("document.getElementById('token').focus()")
        browser.key("ArrowRight")
        browser.wait(f"{page}.token === 4")
        browser.key("ArrowLeft")
        browser.key("ArrowLeft")
        browser.wait(f"{page}.token === 2")
        assert browser.evaluate(f"[{page}.token, {page}.lag]") == [2, 1]
        browser.evaluate("document.getElementById('lag').focus()")
        browser.key("ArrowRight")
        browser.wait(f"{page}.lag === 2")
        assert browser.evaluate(f"[{page}.token, {page}.lag]") == [2, 2]
        assert "token=2" in browser.evaluate("location.hash")
        browser.evaluate("document.activeElement.blur()")
        browser.key("ArrowRight")
        browser.wait(f"{page}.token === 3")
        assert browser.evaluate(f"[{page}.token, {page}.lag]") == [3, 2]


#: Sampled (temperature 1.2, seed 5): the demo's step 7 chooses " eyes", outside its top 10.
SAMPLED = {"temperature": 1.2, "seed": 5, "max_new_tokens": 2}
#: Sampled (temperature 1.0, seed 1): the demo's run ends at </s> after 3 tokens.
ENDING = {"temperature": 1.0, "seed": 1, "max_new_tokens": 24}


def test_the_text_ends_with_the_runs_last_choice_and_each_choice_is_named(demo, tmp_path):
    """The text line was made of the tokens each step reads, so the token the last step
    chose was left out ("…She liked" where generate printed "…She liked to"); it now ends
    the line as that step's prediction ("[end]" for </s>, as the app shows it). A sampled
    token outside the top k had no bar and was named nowhere: the chosen token and its
    probability are named under the bars."""
    import flyviz
    from flyviz.viewer import ViewerState

    def page_of(name: str, recording) -> Path:
        state = ViewerState()
        state.set_model(demo)
        state.set_recording(recording)
        return flyviz.share(state, tmp_path / name)

    prompt = "Tom and his dog"
    greedy = flyviz.run(demo, PROMPT, max_new_tokens=4)
    sampled = flyviz.run(demo, prompt, **SAMPLED)
    ending = flyviz.run(demo, prompt, **ENDING)
    pages = {name: page_of(f"{name}.html", rec) for name, rec in
             (("greedy", greedy), ("sampled", sampled), ("ending", ending))}
    last = len(greedy) - 1
    steps = _header(pages["greedy"].read_text(encoding="utf-8"))["tokens"]
    chosen = greedy[last].predicted_text
    assert steps[-1]["then"] == {"text": chosen, "end": False}
    # The line with its last choice is what generate printed: the prompt and the text.
    printed = PROMPT + greedy.text_so_far(last)
    assert "".join(s["text"] for s in steps) + chosen == printed
    assert all("then" not in s for s in steps[:-1])
    ends = _header(pages["ending"].read_text(encoding="utf-8"))["tokens"]
    assert ending[len(ending) - 1].predicted_text == "</s>"
    assert ends[-1]["then"] == {"text": " [end]", "end": True}
    picked = _header(pages["sampled"].read_text(encoding="utf-8"))["tokens"]
    outside = [i for i, s in enumerate(picked) if s["generating"] and
               s["next"] not in [t for t, _p in s["top"]]]
    assert outside, "the sampled run chose no token outside its top k"
    _chromium_or_skip()
    with Browser((1000, 700)) as browser:
        browser.open(pages["greedy"])
        assert browser.evaluate("window.flyviz.error || ''") == ""
        assert browser.evaluate("document.getElementById('text').textContent") == printed
        span = "document.querySelector('#text span:last-child')"
        assert browser.evaluate(f"{span}.className") == "generation prediction"
        assert not browser.evaluate(f"{span}.classList.contains('later')")
        assert browser.evaluate("document.getElementById('chosen').textContent") == \
            f"chosen: {chosen!r} {steps[-1]['p']:.1%}"
        browser.evaluate("window.flyviz.setToken(0)")
        assert browser.evaluate(f"{span}.classList.contains('later')")
        # A prompt step chooses nothing: no line.
        assert browser.evaluate("document.getElementById('chosen').hidden")
        browser.open(pages["ending"])
        assert browser.evaluate(f"{span}.textContent") == " [end]"
        assert browser.evaluate(f"{span}.classList.contains('end')")
        browser.open(pages["sampled"], f"token={outside[0]}")
        step = picked[outside[0]]
        assert browser.evaluate("document.getElementById('chosen').textContent") == \
            f"chosen: {step['next']!r} {step['p']:.1%} (not among the top {len(step['top'])})"
        assert not browser.evaluate("document.querySelector('#topk li.chosen')")


def test_window_without_trace_and_the_help_on_a_missing_model(demo, tmp_path, capsys):
    """``--window K`` without ``--trace`` was accepted and did nothing; it is one line and
    exit 2, as ``--layer flow`` without ``--trace`` is. The help said a recording without its
    model is placed on a generic layout, but one naming a model that is not found is
    refused: the help says which are refused and which are placed."""
    from cli_checks import cli_run, one_error_line

    import flyviz
    from flyviz.commands.share import EPILOG

    rec = tmp_path / "run.flyrec"
    flyviz.run(demo, PROMPT, max_new_tokens=1).save(rec)
    out = tmp_path / "w.html"
    code, _, err = cli_run(capsys, "share", str(rec), "--out", str(out), "--window", "3")
    one_error_line(code, err, "--window 3 needs --trace P")
    assert not out.exists()
    words = " ".join(EPILOG.split())
    assert "whose model is not found is refused (give it with --model)" in words
    assert "without it they are placed on a generic layout" not in words
