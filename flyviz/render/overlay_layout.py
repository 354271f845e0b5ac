"""Where the words of a movie frame go: header, colourbar, bars and text, drawn with vispy.

:class:`OverlayLayout` lays an :class:`~flyviz.render.overlay.OverlayContent`
out in canvas pixels (wrapping text with the font's own glyph advances) and
draws it with vispy visuals in the same OpenGL pass as the brain: flat
rectangles (:class:`RectanglesVisual`) and text. The brain is drawn in
:attr:`OverlayLayout.cloud_rect`, clear of the panels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from vispy import gloo, scene
from vispy.visuals import Visual
from vispy.visuals.transforms import STTransform

from flyviz.render.vispy_compat import glyph_advance, text_font
from flyviz.render.colormaps import colorbar_image, is_diverging
from flyviz.render.overlay import OverlayContent, display_token

_FONT = "OpenSans"  # shipped with vispy, so every machine draws the same glyphs
_COLOR_PROMPT = (0.60, 0.64, 0.72, 1.0)
_COLOR_TEXT = (0.95, 0.96, 0.98, 1.0)
_COLOR_NEWEST = (1.0, 0.80, 0.32, 1.0)
_COLOR_DIM = (0.55, 0.58, 0.66, 1.0)
_COLOR_PANEL = (0.045, 0.05, 0.08, 0.82)
_COLOR_TRACK = (1.0, 1.0, 1.0, 0.07)
_COLOR_FIRST_BAR = (1.0, 0.72, 0.26, 0.95)
_COLOR_BAR = (0.42, 0.58, 0.85, 0.85)
_COLOR_HIGHLIGHT = (1.0, 0.70, 0.20, 0.22)
# Bars of values that add to / take from an explained logit: the flow colormap's two ends.
_COLOR_ADDS = (0.94, 0.25, 0.36, 0.9)
_COLOR_TAKES = (0.38, 0.33, 0.98, 0.9)


class _TextMetrics:
    """Glyph advances of a vispy font, to wrap and place text before drawing it."""

    def __init__(self, text_visual: Any) -> None:
        self._font = text_font(text_visual)
        self._em: dict[str, float] = {}

    def em(self, ch: str) -> float:
        adv = self._em.get(ch)
        if adv is None:
            adv = glyph_advance(self._font, ch)
            self._em[ch] = adv
        return adv

    def width(self, text: str, px: float) -> float:
        return px * sum(self.em(ch) for ch in text)


def _clean(text: str) -> str:
    text = text.replace("\r", "").replace("\t", "  ")
    return "".join(ch for ch in text if ch == "\n" or ch.isprintable())


class RectanglesVisual(Visual):
    """Flat-coloured rectangles in canvas pixels, replaced wholesale every update.

    vispy's ``Mesh`` relinks its shader program whenever its data is set,
    which costs tens of milliseconds per frame in software GL; this visual's
    program never changes, only its two vertex buffers.
    """

    _VERT = """
    attribute vec2 a_position;
    attribute vec4 a_color;
    varying vec4 v_color;
    void main() {
        gl_Position = $transform(vec4(a_position, 0.0, 1.0));
        v_color = a_color;
    }
    """
    _FRAG = """
    varying vec4 v_color;
    void main() { gl_FragColor = v_color; }
    """

    def __init__(self) -> None:
        Visual.__init__(self, vcode=self._VERT, fcode=self._FRAG)
        self._positions = gloo.VertexBuffer(np.zeros((6, 2), np.float32))
        self._colors = gloo.VertexBuffer(np.zeros((6, 4), np.float32))
        self.shared_program["a_position"] = self._positions
        self.shared_program["a_color"] = self._colors
        self._draw_mode = "triangles"
        self.set_gl_state("translucent", depth_test=False, cull_face=False)
        self.freeze()

    def set_rectangles(self, rects: np.ndarray, colors: np.ndarray) -> None:
        """``rects`` ``(n, 4)`` as ``x0, y0, x1, y1``; ``colors`` ``(n, 4)`` RGBA in [0, 1]."""
        r = np.asarray(rects, dtype=np.float32).reshape(-1, 4)
        if r.shape[0] == 0:
            r = np.zeros((1, 4), np.float32)
            colors = np.zeros((1, 4), np.float32)
        x0, y0, x1, y1 = r.T
        corners = np.stack([np.stack(p, axis=1) for p in
                            ((x0, y0), (x1, y0), (x1, y1), (x0, y0), (x1, y1), (x0, y1))], axis=1)
        self._positions.set_data(np.ascontiguousarray(corners.reshape(-1, 2)))
        self._colors.set_data(np.repeat(np.asarray(colors, dtype=np.float32), 6, axis=0))
        self.update()

    def _prepare_transforms(self, view) -> None:
        view.view_program.vert["transform"] = view.get_transform()

    def _compute_bounds(self, axis: int, view) -> None:
        return None


Rectangles = scene.visuals.create_visual_node(RectanglesVisual)


class OverlayLayout:
    """Header, colourbar, bars and running text of a movie frame, in canvas pixels.

    Parameters
    ----------
    canvas
        The ``SceneCanvas`` to draw on (visuals are added to its scene).
    size
        ``(width, height)`` of the frame.
    colormap, value_range, caption
        The colourbar: its colormap, the values at its ends and its caption.
    model_name
        The header.
    """

    def __init__(self, canvas: Any, size: tuple[int, int], colormap: str,
                 value_range: tuple[float, float], caption: str, model_name: str) -> None:
        w, h = size
        # One layout unit: a pixel at 1280x720, scaled with the frame (not below
        # the size at which text stays legible).
        u = max(min(h / 720.0, w / 1280.0), 0.45)
        self.size, self.u = size, u
        self.margin = 22.0 * u
        self.panel_w = max(150.0 * u, 0.25 * w)
        self.band_h = max(90.0 * u, 0.19 * h)
        self.cloud_rect = (0.0, 0.0, w - self.panel_w, h - self.band_h)
        self.px_title, self.px_body, self.px_small = 24.0 * u, 20.0 * u, 14.0 * u
        dpi = float(canvas.dpi or 96.0)

        def text(px: float, bold: bool = False) -> Any:
            t = scene.visuals.Text("", parent=canvas.scene, face=_FONT, bold=bold,
                                   font_size=px * 72.0 / dpi, anchor_x="left",
                                   anchor_y="baseline", color=_COLOR_TEXT)
            t.order = 20
            return t

        self.panels = Rectangles(parent=canvas.scene)
        self.panels.order = 10
        self.title, self.body, self.small = text(self.px_title, bold=True), text(self.px_body), text(self.px_small)
        self.metrics_body = _TextMetrics(self.body)
        self.metrics_small = _TextMetrics(self.small)

        # Colourbar: horizontal, at the foot of the right panel, labels underneath;
        # kept off the brain so it never hides neurons.
        pad = 14.0 * u
        bar_w = int(round(self.panel_w - 2 * pad))
        bar_h = max(4, int(round(10 * u)))
        self.bar_x = w - self.panel_w + pad
        below = self.margin + 1.4 * self.px_small  # room for the labels under the bar
        self.bar_y = h - self.band_h - below - bar_h
        self.bar_h, self.bar_w = bar_h, bar_w
        self.colorbar = scene.visuals.Image(colorbar_image(colormap, bar_h, bar_w, vertical=False),
                                            parent=canvas.scene, interpolation="nearest")
        self.colorbar.transform = STTransform(translate=(self.bar_x, self.bar_y))
        self.colorbar.set_gl_state("translucent", depth_test=False)
        self.colorbar.order = 15
        self.colormap, self.value_range, self.caption = colormap, value_range, caption
        self.model_name = model_name
        self._last: OverlayContent | None = None

    # ----------------------------------------------------------------- text
    def _wrap(self, content: OverlayContent, max_w: float, max_lines: int):
        """Greedy word wrap of the running text; the last ``max_lines`` lines."""
        styled: list[tuple[str, int]] = []
        for text, style in ((content.prompt, 0), (content.generated, 1),
                            (content.newest, 2 if content.newest_in_prompt else 3),
                            (content.after, 0)):
            styled.extend((ch, style) for ch in _clean(text))
        while styled and styled[0][0] == " ":  # a run's first token often starts with a space
            styled.pop(0)
        lines: list[list[tuple[str, int]]] = []
        line: list[tuple[str, int]] = []
        width = 0.0
        em = self.metrics_body.em
        scale = self.px_body
        for ch, style in styled:
            if ch == "\n":
                lines.append(line)
                line, width = [], 0.0
                continue
            w = em(ch) * scale
            if width + w > max_w and line:
                spaces = [i for i, (c, _) in enumerate(line) if c == " "]
                if spaces and spaces[-1] > 0:
                    cut = spaces[-1]
                    lines.append(line[:cut])
                    line = line[cut + 1:]
                else:
                    lines.append(line)
                    line = []
                width = sum(em(c) * scale for c, _ in line)
            line.append((ch, style))
            width += w
        lines.append(line)
        if content.after:
            # Text goes on past the newest token: keep the lines that show it.
            marked = [i for i, ln in enumerate(lines) if any(st in (2, 3) for _, st in ln)]
            if marked:
                end = min(len(lines), max(marked[-1] + 1, max_lines))
                return lines[max(0, end - max_lines):end]
        return lines[-max_lines:]

    def update(self, content: OverlayContent | None) -> None:
        if content is not None and content == self._last:
            return
        self._last = content
        w, h = self.size
        u, m = self.u, self.margin
        quads: list[tuple[float, float, float, float]] = []
        colors: list[tuple[float, ...]] = []
        body_s: list[str] = []
        body_p: list[tuple[float, float]] = []
        body_c: list[tuple[float, ...]] = []
        small_s: list[str] = []
        small_p: list[tuple[float, float]] = []
        small_c: list[tuple[float, ...]] = []

        def quad(x0, y0, x1, y1, color):
            quads.append((x0, y0, x1, y1))
            colors.append(color)

        def small(s, x, y, color=_COLOR_DIM):
            small_s.append(s)
            small_p.append((x, y))
            small_c.append(color)

        # Header: model name and counter.
        self.title.text = [self.model_name or "flyviz"]
        self.title.pos = [(m, m + self.px_title)]
        if content is not None:
            small(content.counter, m, m + self.px_title + 1.6 * self.px_small)

        # Colourbar labels.
        small(self.caption, self.bar_x, self.bar_y - 0.6 * self.px_small)
        ly = self.bar_y + self.bar_h + 1.2 * self.px_small
        for label, where in colorbar_labels(self.colormap, self.value_range):
            width = self.metrics_small.width(label, self.px_small)
            small(label, self.bar_x + where * (self.bar_w - width), ly)

        # Right panel: the bars (a language model's next-token candidates).
        px0 = w - self.panel_w
        quad(px0, 0, w, h - self.band_h, _COLOR_PANEL)
        if content is not None and content.bars:
            pad = 14 * u
            small(content.bars_title, px0 + pad, m + self.px_small)
            row_h = 1.75 * self.px_body
            room = self.bar_y - 2.5 * self.px_small - (m + 2.2 * self.px_small + pad)
            rows = int(max(1, room // row_h))
            label_w = 0.36 * (self.panel_w - 2 * pad)
            pct_w = max(self.metrics_small.width(text, self.px_small)
                        for text in ("100%",) + content.bar_labels) + 6 * u
            bar_x0 = px0 + pad + label_w
            bar_max = max(4.0, w - pad - pct_w - bar_x0)
            for r, (label_text, prob) in enumerate(content.bars[:min(rows, 10)]):
                y = m + 2.2 * self.px_small + pad + r * row_h
                label = display_token(label_text)
                while len(label) > 1 and self.metrics_body.width(label, self.px_body) > label_w - 6 * u:
                    label = label[:-2] + "\u2026"
                body_s.append(label)
                body_p.append((px0 + pad, y + 0.75 * self.px_body))
                body_c.append(_COLOR_NEWEST if r == 0 else _COLOR_TEXT)
                top, bottom = y + 0.1 * self.px_body, y + 0.95 * self.px_body
                quad(bar_x0, top, bar_x0 + bar_max, bottom, _COLOR_TRACK)
                colour = _COLOR_FIRST_BAR if r == 0 else _COLOR_BAR
                if r < len(content.bar_signs):
                    colour = _COLOR_ADDS if content.bar_signs[r] > 0 else _COLOR_TAKES
                quad(bar_x0, top, bar_x0 + max(1.0, bar_max * float(np.clip(prob, 0, 1))), bottom,
                     colour)
                value = content.bar_labels[r] if r < len(content.bar_labels) else \
                    (f"{100 * prob:.0f}%" if prob >= 0.01 else "<1%")
                small(value, bar_x0 + bar_max + 5 * u, bottom - 0.1 * self.px_body, _COLOR_DIM)

        # Bottom band: the text so far, newest token highlighted.
        band_y = h - self.band_h
        quad(0, band_y, w, h, _COLOR_PANEL)
        if content is not None:
            line_h = 1.4 * self.px_body
            max_lines = max(1, int((self.band_h - 1.4 * m) // line_h))
            lines = self._wrap(content, w - 2 * m, max_lines)
            y0 = band_y + 0.7 * m + self.px_body
            style_color = {0: _COLOR_PROMPT, 1: _COLOR_TEXT, 2: _COLOR_NEWEST, 3: _COLOR_NEWEST}
            for li, line in enumerate(lines):
                x = m
                y = y0 + li * line_h
                run: list[str] = []
                run_style = -1
                run_x = x
                for ch, style in line + [("", -1)]:
                    if style != run_style and run:
                        text = "".join(run)
                        body_s.append(text)
                        body_p.append((run_x, y))
                        body_c.append(style_color[run_style])
                        width = self.metrics_body.width(text, self.px_body)
                        if run_style in (2, 3):
                            quad(run_x - 2 * u, y - 0.95 * self.px_body, run_x + width + 2 * u,
                                 y + 0.32 * self.px_body, _COLOR_HIGHLIGHT)
                        run_x += width
                        run = []
                    if style == -1:
                        break
                    if not run:
                        run_style = style
                    run.append(ch)

        self.panels.set_rectangles(np.array(quads, dtype=np.float32), np.array(colors, dtype=np.float32))
        self._set_text(self.body, body_s, body_p, body_c)
        self._set_text(self.small, small_s, small_p, small_c)

    @staticmethod
    def _set_text(visual: Any, strings: list[str], pos: list, colors: list) -> None:
        # vispy's Text cannot draw an empty list: keep one invisible string instead.
        if not strings:
            strings, pos, colors = [" "], [(0.0, 0.0)], [(0, 0, 0, 0)]
        visual.text = strings
        visual.pos = np.asarray(pos, dtype=np.float32)
        visual.color = np.asarray(colors, dtype=np.float32)


def colorbar_labels(colormap: str, value_range: tuple[float, float],
                    digits: int = 2) -> tuple[tuple[str, float], ...]:
    """``(text, position along the bar)`` of the low, middle and high ticks of a colourbar.

    Diverging colormaps show signs (``-0.8``, ``0``, ``+0.8``).
    """
    lo, hi = (float(v) for v in value_range)
    signed = is_diverging(colormap)

    def fmt(v: float) -> str:
        if abs(v) < 1e-12 * max(abs(lo), abs(hi), 1e-30):
            v = 0.0
        if abs(v) >= 10 ** digits:
            # Whole numbers, not "3e+02": a rate scale to 300 Hz reads 0, 150, 300.
            return f"{v:+.0f}" if signed else f"{v:.0f}"
        return f"{v:+.{digits}g}" if signed and v != 0.0 else f"{v:.{digits}g}"

    return ((fmt(lo), 0.0), (fmt((lo + hi) / 2.0), 0.5), (fmt(hi), 1.0))


