"""A causal trace's heatmap as a PNG or SVG file, drawn without a window.

Positions are rows (labelled with their tokens), groups are columns (labelled
with their names, written upwards), and the colour bar runs from the corrupted
run's value (bottom) to the clean run's (top) in the project's ``"sequential"``
colormap (:mod:`flyviz.render.colormaps`); values beyond either end take the
end's colour, NaN cells are grey.

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


def colours(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """``(..., 3)`` uint8 RGB of ``values`` on the sequential colormap from ``low`` (the
    corrupted end) to ``high`` (the clean end); NaN is grey."""
    from flyviz.render.colormaps import lut

    table = np.round(lut("sequential")[:, :3] * 255).astype(np.uint8)
    v = np.asarray(values, dtype=np.float64)
    span = high - low
    t = np.zeros(v.shape) if span == 0 or not math.isfinite(span) else (v - low) / span
    index = np.round(np.clip(np.nan_to_num(t, nan=0.0), 0.0, 1.0) * 255).astype(np.intp)
    out = table[index]
    out[~np.isfinite(v)] = NAN_RGB
    return out


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
    title: tuple[str, str]
    cell_w: int


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
    title = (f"{_NAMES.get(metric, metric)}: answer {answer!r} vs {versus!r}",
             f"the corrupted prompt with one group restored at {where}")
    top = PAD + 2 * LINE_H + PAD + head_h
    left = PAD + label_w
    bar_x = left + cols * cell_w + 2 * PAD
    ends = trace.span(metric)
    bar_text = max(_text_width(font, f"clean {ends[1]:.4g}"),
                   _text_width(font, f"corrupted {ends[0]:.4g}"))
    width = max(bar_x + BAR_W + 6 + bar_text + PAD,
                PAD + max(_text_width(font, line) for line in title) + PAD)
    height = top + rows * CELL_H + PAD
    return _Layout(left, top, width, height, bar_x, title, cell_w)


def heatmap_image(trace: "CausalTrace", metric: str = "p_answer") -> np.ndarray:
    """The heatmap as an ``(height, width, 3)`` uint8 RGB array (white background)."""
    from PIL import Image, ImageDraw

    font = _font(FONT_SIZE)
    lay = _layout(trace, metric, font)
    low, high = trace.span(metric)
    grid = colours(trace.grid(metric), low, high)
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
    ramp = colours(np.linspace(high, low, bar_h)[:, None], low, high)
    image.paste(Image.fromarray(np.repeat(ramp, BAR_W, axis=1), "RGB"), (lay.bar_x, lay.top))
    draw.rectangle((lay.bar_x, lay.top, lay.bar_x + BAR_W - 1, lay.top + bar_h - 1),
                   outline="black")
    draw.text((lay.bar_x + BAR_W + 6, lay.top), f"clean {high:.4g}", fill="black", font=font,
              anchor="lt")
    draw.text((lay.bar_x + BAR_W + 6, lay.top + bar_h), f"corrupted {low:.4g}", fill="black",
              font=font, anchor="lb")
    return np.asarray(image)


def heatmap_svg(trace: "CausalTrace", metric: str = "p_answer") -> str:
    """The heatmap as SVG text (the same layout as :func:`heatmap_image`)."""
    font = _font(FONT_SIZE)
    lay = _layout(trace, metric, font)
    low, high = trace.span(metric)
    grid = colours(trace.grid(metric), low, high)
    values = trace.grid(metric)
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
    ramp = colours(np.linspace(high, low, steps), low, high)
    for i, rgb in enumerate(ramp):
        y0 = lay.top + bar_h * i / steps
        out.append(f'<rect x="{lay.bar_x}" y="{y0:.2f}" width="{BAR_W}" '
                   f'height="{bar_h / steps + 0.5:.2f}" fill="#%02x%02x%02x"/>' % tuple(rgb))
    out.append(f'<rect x="{lay.bar_x}" y="{lay.top}" width="{BAR_W}" height="{bar_h}" '
               'fill="none" stroke="black"/>')
    tx = lay.bar_x + BAR_W + 6
    out.append(f'<text x="{tx}" y="{lay.top + FONT_SIZE}">clean {high:.4g}</text>')
    out.append(f'<text x="{tx}" y="{lay.top + bar_h}">corrupted {low:.4g}</text>')
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


__all__ = ["cell_width", "check_figure", "colours", "heatmap_image", "heatmap_svg",
           "write_heatmap"]
