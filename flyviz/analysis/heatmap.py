"""A causal trace's heatmap as a PNG or SVG file, drawn without a window.

Positions are rows (labelled with their tokens), groups are columns (labelled
with their names, written upwards), and the colour bar runs from the corrupted
run's value (bottom, dark) to the clean run's (top, bright) in the project's
``"sequential"`` colormap (:mod:`flyviz.render.colormaps`). Where cells fall
beyond either run's value (a group that restores more than all of the clean
run, or pushes the answer further away than the corruption did) the bar is
extended to them (:func:`bar_span`), its two runs' values kept as labelled marks
on it, so that no cell takes a reference's colour it does not have; a line
under the title says which way is brighter. NaN cells are grey.

Why Pillow and hand-written SVG rather than matplotlib or vispy: Pillow is
already installed with imageio (a core dependency) and draws text with a
font it ships (FreeType's Aileron, or its bitmap font where FreeType is
missing), without a display or OpenGL; an SVG is a few hundred lines of
rectangles and text, so it needs nothing at all. matplotlib is not a
dependency of anything in flyviz's environment, and vispy's offscreen
canvas needs an OpenGL context (EGL or a display) that a cluster node or a
CI runner may not have.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

import numpy as np

from flyviz.errors import InputError
from flyviz.fileio import missing_folder

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.analysis.causal import CausalTrace

FIGURE_SUFFIXES = (".png", ".svg")
#: Measures and how the figure names them.
_NAMES = {"p_answer": "p(answer)", "logit_diff": "logit difference",
          "p_normalised": "p(answer), normalised", "logit_diff_normalised":
          "logit difference, normalised"}
CELL_W, CELL_H = 14, 18
#: The grid is kept this wide at most: many groups (9,143 cell types) get narrower columns,
#: and below LABELLED_W pixels the group names are left out (the table has them).
MAX_GRID_W = 8000
LABELLED_W = 10
FONT_SIZE = 12
LINE_H = FONT_SIZE + 4
PAD = 10
BAR_W = 16
NAN_RGB = (200, 200, 200)


def check_figure(path: str | Path) -> Path:
    """Refuse a figure path that is not ``.png``/``.svg`` or cannot be written."""
    path = Path(path).expanduser()
    if path.suffix.lower() not in FIGURE_SUFFIXES:
        raise InputError(f"--figure {path}: give a file name ending in .png or .svg, e.g. "
                         "trace.png")
    if not path.parent.is_dir():
        raise InputError(f"--figure {path}: {missing_folder(path.parent)}")
    if path.is_dir():
        raise InputError(f"--figure {path}: it is a folder; give a file name")
    from flyviz.fileio import probe_writable

    # Before the run: a read-only folder must fail now, not after the table is written.
    probe_writable(path.parent, "--figure", path)
    return path


def bar_span(fractions: np.ndarray) -> tuple[float, float]:
    """The colour bar's ends as fractions of the way from the corrupted run's value (0) to
    the clean run's (1): ``(0, 1)``, extended to the finite ``fractions`` beyond them.
    The app's heatmap (:mod:`flyviz.app.language.patching_heatmap`) spans its bar the same
    way."""
    finite = np.asarray(fractions, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return 0.0, 1.0
    return min(0.0, float(finite.min())), max(1.0, float(finite.max()))


def _fractions(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """``values`` as fractions of the way from ``low`` (0) to ``high`` (1)."""
    v = np.asarray(values, dtype=np.float64)
    span = high - low
    if span == 0 or not math.isfinite(span):
        return np.where(np.isfinite(v), 0.0, np.nan)
    return (v - low) / span


def colour_index(fractions: np.ndarray, span: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    """The entry (0..255) of the sequential colormap for each of ``fractions`` (0 the
    corrupted run's value, 1 the clean run's) on a bar from ``span[0]`` to ``span[1]``
    (:func:`bar_span`); values beyond take the end's entry, NaN the bar's bottom. The written
    figure (:func:`colours`) and the app's heatmap look their colours up with it."""
    first, last = span
    shown = np.nan_to_num((np.asarray(fractions, dtype=np.float64) - first) / (last - first),
                          nan=0.0)
    return np.round(np.clip(shown, 0.0, 1.0) * 255).astype(np.intp)


def colours(values: np.ndarray, low: float, high: float,
            span: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    """``(..., 3)`` uint8 RGB of ``values`` on the sequential colormap from ``low`` (the
    corrupted end) to ``high`` (the clean end); NaN is grey. ``span``: the colour bar's
    ends as fractions of the way from ``low`` to ``high`` (:func:`bar_span`; default the
    two runs' values), values beyond them taking the end's colour."""
    from flyviz.render.colormaps import lut

    table = np.round(lut("sequential")[:, :3] * 255).astype(np.uint8)
    v = np.asarray(values, dtype=np.float64)
    out = table[colour_index(_fractions(v, low, high), span)]
    out[~np.isfinite(v)] = NAN_RGB
    return out


@dataclass(frozen=True)
class _Bar:
    """The colour bar of a measure: the two runs' values, the bar's ends (fractions of the
    way from corrupted to clean, :func:`bar_span`) and its labels with their heights."""

    low: float                  # the corrupted run's value
    high: float                 # the clean run's value
    span: tuple[float, float]

    @classmethod
    def of(cls, trace: "CausalTrace", metric: str) -> "_Bar":
        low, high = trace.span(metric)
        return cls(low, high, bar_span(_fractions(trace.grid(metric), low, high)))

    def value(self, fraction: float) -> float:
        return self.low + fraction * (self.high - self.low)

    def y(self, fraction: float, top: int, height: int) -> float:
        """Where ``fraction`` is on a bar ``height`` pixels tall from ``top`` (the top end
        is the bar's clean side)."""
        first, last = self.span
        return top + (last - fraction) / (last - first) * height

    def labels(self, top: int, height: int) -> list[tuple[float, float, str]]:
        """``(y of the mark, y of the label, text)``: the two runs' values, and the bar's
        ends where it is extended beyond them; labels kept a line apart."""
        first, last = self.span
        marks = []
        if last > 1:
            marks.append((self.y(last, top, height),
                          f"{self.value(last):.4g} (a cell beyond clean)"))
        marks.append((self.y(1.0, top, height), f"clean {self.high:.4g}"))
        marks.append((self.y(0.0, top, height), f"corrupted {self.low:.4g}"))
        if first < 0:
            marks.append((self.y(first, top, height),
                          f"{self.value(first):.4g} (a cell beyond corrupted)"))
        out: list[tuple[float, float, str]] = []
        for y, text in marks:
            # Top to bottom, each at least a line below the one before (a leader joins a
            # label pushed down to its mark), and all within the bar's height.
            label = max(y, out[-1][1] + LINE_H) if out else y
            out.append((y, label, text))
        overflow = out[-1][1] - (top + height)
        if overflow > 0:
            out = [(y, label - overflow, text) for y, label, text in out]
        return out

    def direction(self, name: str) -> str:
        """Which way is brighter, in words (the clean run's value may be the lower one),
        and whether the bar is extended."""
        line = f"brighter: nearer the clean run's {name}"
        if self.high < self.low:
            line += f" (here the lower {name}: brighter is lower)"
        if self.span != (0.0, 1.0):
            line += "; the bar reaches past the runs' values to the cells beyond them"
        return line


def _font(size: int) -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size)
    except (TypeError, OSError, ImportError):  # old Pillow or no FreeType: the bitmap font
        return ImageFont.load_default()


def _text_width(font: Any, text: str) -> int:
    box = font.getbbox(text)
    return int(box[2] - box[0])


@dataclass(frozen=True)
class _Layout:
    """Where everything of a heatmap goes, in pixels (shared by the PNG and the SVG)."""

    left: int       # x of the grid
    top: int        # y of the grid
    width: int
    height: int
    bar_x: int
    title: tuple[str, ...]
    cell_w: int
    bar: _Bar       # the colour bar's runs, span and labels


def cell_width(groups: int) -> int:
    """Pixels per column for ``groups`` columns (:data:`CELL_W`, narrower for many)."""
    return max(1, min(CELL_W, MAX_GRID_W // max(1, groups)))


def _layout(trace: "CausalTrace", metric: str, font: Any) -> _Layout:
    rows, cols = len(trace.positions), len(trace.groups)
    cell_w = cell_width(cols)
    label_w = max(_text_width(font, t) for t in trace.token_labels()) + PAD
    head_h = (max(_text_width(font, g) for g in trace.groups) if cell_w >= LABELLED_W else 0) + PAD
    answer, versus = trace.info.get("answer", ""), trace.info.get("versus", "")
    window = int(trace.info.get("settings", {}).get("window", 1))
    where = "one position" if window == 1 else f"{window} positions"
    bar = _Bar.of(trace, metric)
    title = (f"{_NAMES.get(metric, metric)}: answer {answer!r} vs {versus!r}",
             f"the corrupted prompt with one group restored at {where}",
             bar.direction(_NAMES.get(metric, metric)))
    top = PAD + len(title) * LINE_H + PAD + head_h
    left = PAD + label_w
    bar_x = left + cols * cell_w + 2 * PAD
    bar_text = max(_text_width(font, text) for _, _, text in bar.labels(0, rows * CELL_H))
    width = max(bar_x + BAR_W + 6 + bar_text + PAD,
                PAD + max(_text_width(font, line) for line in title) + PAD)
    height = top + rows * CELL_H + PAD + LINE_H // 2    # a bottom label's descenders
    return _Layout(left, top, width, height, bar_x, title, cell_w, bar)


def heatmap_image(trace: "CausalTrace", metric: str = "p_answer") -> np.ndarray:
    """The heatmap as an ``(height, width, 3)`` uint8 RGB array (white background)."""
    from PIL import Image, ImageDraw

    font = _font(FONT_SIZE)
    lay = _layout(trace, metric, font)
    bar = lay.bar
    low, high = bar.low, bar.high
    grid = colours(trace.grid(metric), low, high, bar.span)
    image = Image.new("RGB", (lay.width, lay.height), "white")
    # The cells: one block per value, scaled up without smoothing.
    cell_w = lay.cell_w
    cells = Image.fromarray(grid, "RGB").resize((grid.shape[1] * cell_w, grid.shape[0] * CELL_H),
                                                Image.Resampling.NEAREST)
    image.paste(cells, (lay.left, lay.top))
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lay.title):
        draw.text((PAD, PAD + i * LINE_H), line, fill="black", font=font)
    for r, label in enumerate(trace.token_labels()):
        y = lay.top + r * CELL_H + CELL_H // 2
        draw.text((lay.left - PAD // 2, y), label, fill="black", font=font, anchor="rm")
    for c, name in enumerate(trace.groups if cell_w >= LABELLED_W else []):
        # Column labels upwards: drawn on their own strip, rotated.
        strip = Image.new("L", (_text_width(font, name) + 4, cell_w), 0)
        ImageDraw.Draw(strip).text((0, cell_w // 2), name, fill=255, font=font, anchor="lm")
        strip = strip.rotate(90, expand=True)
        x = lay.left + c * cell_w
        y = lay.top - PAD // 2 - strip.size[1]
        image.paste((0, 0, 0), (x, y, x + strip.size[0], y + strip.size[1]), strip)
    bar_h = len(trace.positions) * CELL_H
    ramp = colours(_ramp(bar, bar_h)[:, None], low, high, bar.span)
    image.paste(Image.fromarray(np.repeat(ramp, BAR_W, axis=1), "RGB"), (lay.bar_x, lay.top))
    draw.rectangle((lay.bar_x, lay.top, lay.bar_x + BAR_W - 1, lay.top + bar_h - 1),
                   outline="black")
    right = lay.bar_x + BAR_W
    for mark, at, text in bar.labels(lay.top, bar_h):
        mark_y = min(round(mark), lay.top + bar_h - 1)
        draw.line((lay.bar_x - 3, mark_y, right + 2, mark_y), fill="black")
        draw.line((right + 2, mark_y, right + 5, round(at)), fill="black")
        draw.text((right + 6, round(at)), text, fill="black", font=font, anchor="lm")
    return np.asarray(image)


def _ramp(bar: _Bar, steps: int) -> np.ndarray:
    """``steps`` values down the bar, from its top (clean) end to its bottom one."""
    first, last = bar.span
    return np.array([bar.value(f) for f in np.linspace(last, first, steps)])


def heatmap_svg(trace: "CausalTrace", metric: str = "p_answer") -> str:
    """The heatmap as SVG text (the same layout as :func:`heatmap_image`)."""
    font = _font(FONT_SIZE)
    lay = _layout(trace, metric, font)
    bar = lay.bar
    low, high = bar.low, bar.high
    values = trace.grid(metric)
    grid = colours(values, low, high, bar.span)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{lay.width}" height="{lay.height}" '
           f'font-family="sans-serif" font-size="{FONT_SIZE}">',
           f'<rect width="{lay.width}" height="{lay.height}" fill="white"/>',
           *(f'<text x="{PAD}" y="{PAD + FONT_SIZE + i * LINE_H}">{escape(line)}</text>'
             for i, line in enumerate(lay.title))]
    for r, label in enumerate(trace.token_labels()):
        y = lay.top + r * CELL_H + CELL_H // 2
        out.append(f'<text x="{lay.left - PAD // 2}" y="{y}" text-anchor="end" '
                   f'dominant-baseline="middle">{escape(label)}</text>')
    cell_w = lay.cell_w
    for c, name in enumerate(trace.groups if cell_w >= LABELLED_W else []):
        x = lay.left + c * cell_w + cell_w // 2
        y = lay.top - PAD // 2
        out.append(f'<text transform="translate({x},{y}) rotate(-90)" '
                   f'dominant-baseline="middle">{escape(name)}</text>')
    for r in range(grid.shape[0]):
        for c in range(grid.shape[1]):
            rgb = "#%02x%02x%02x" % tuple(int(v) for v in grid[r, c])
            value = values[r, c]
            out.append(f'<rect x="{lay.left + c * cell_w}" y="{lay.top + r * CELL_H}" '
                       f'width="{cell_w}" height="{CELL_H}" fill="{rgb}"><title>'
                       f'{escape(trace.groups[c])} at {escape(trace.token_labels()[r])}: '
                       f'{value:.6g}</title></rect>')
    bar_h = len(trace.positions) * CELL_H
    steps = 64
    ramp = colours(_ramp(bar, steps), low, high, bar.span)
    for i, rgb in enumerate(ramp):
        y0 = lay.top + bar_h * i / steps
        out.append(f'<rect x="{lay.bar_x}" y="{y0:.2f}" width="{BAR_W}" '
                   f'height="{bar_h / steps + 0.5:.2f}" fill="#%02x%02x%02x"/>' % tuple(rgb))
    out.append(f'<rect x="{lay.bar_x}" y="{lay.top}" width="{BAR_W}" height="{bar_h}" '
               'fill="none" stroke="black"/>')
    right = lay.bar_x + BAR_W
    for mark, at, text in bar.labels(lay.top, bar_h):
        out.append(f'<path d="M{lay.bar_x - 3},{mark:.1f} H{right + 2} L{right + 5},'
                   f'{at:.1f}" fill="none" stroke="black"/>')
        out.append(f'<text x="{right + 6}" y="{at:.1f}" dominant-baseline="middle">'
                   f'{escape(text)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_heatmap(trace: "CausalTrace", path: str | Path, metric: str = "p_answer") -> Path:
    """Write the heatmap to ``path`` (``.png`` or ``.svg``); return the path."""
    import os

    path = check_figure(path)
    tmp = path.with_name(path.name + ".writing")
    try:
        if path.suffix.lower() == ".svg":
            tmp.write_text(heatmap_svg(trace, metric), encoding="utf-8")
        else:
            from PIL import Image

            Image.fromarray(heatmap_image(trace, metric), "RGB").save(tmp, format="PNG")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


__all__ = ["bar_span", "cell_width", "check_figure", "colour_index", "colours", "heatmap_image", "heatmap_svg",
           "write_heatmap"]
