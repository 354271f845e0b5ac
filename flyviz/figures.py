"""``flyviz figure``: a run's population views and its brain as figures for a paper.

Four kinds, each from a recording (and its comparison, when it holds one), with
axes, labels and a colour bar, drawn without a window (matplotlib's Agg, SVG or
PDF canvas; the brain through flyviz's own offscreen renderer):

``raster``
    Every neuron x every token as one image: rows in anatomical (superclass
    bands, cell types within) or similarity order, pooled to the figure's
    pixel height keeping each cell's largest |x|; a comparison draws the
    untouched run, the intervened run and Δx side by side.
``celltypes``
    Each cell type's (or superclass's) mean activation, mean |x| or mean Δx
    per token, rows in similarity order, the superclass as a side strip.
``trajectory``
    The states on their first three principal axes as a 3-D path, the
    explained variance in the axis labels; a comparison adds the intervened
    run on the untouched run's axes.
``brain``
    The 3-D view of one token, as the app and movies draw it, with its colour bar; a
    comparison draws the untouched run, the intervened run and Δx side by side.

Colours are flyviz's own colormaps at their display brightness on black, as
the app's raster and the brain view show them.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.errors import InputError
from flyviz.fileio import missing_folder

#: What ``flyviz figure --kind`` draws.
KINDS = ("raster", "celltypes", "trajectory", "brain")
#: File types a figure is written as (from the output's suffix).
SUFFIXES = (".png", ".svg", ".pdf")
#: Row orders of a raster.
SORTS = ("anatomy", "similarity")
#: What a cell-type figure averages.
QUANTITIES = ("mean", "abs", "dx")


@dataclass(frozen=True)
class FigureOptions:
    """What to draw and how big.

    Attributes
    ----------
    kind
        One of :data:`KINDS`.
    size
        ``(width, height)`` in pixels (at ``dpi``).
    sort
        A raster's row order (:data:`SORTS`).
    by
        A cell-type figure's groups: ``"cell_type"`` or ``"superclass"``.
    quantity
        ``"mean"``, ``"abs"`` or ``"dx"`` (a comparison's mean Δx; the default
        for a comparison).
    token
        The brain figure's token (default: the last).
    dpi
        Dots per inch of the written file.
    outline
        The brain figure draws the brain's outline (computed from the somas) behind the neurons.
    """

    kind: str = "raster"
    size: tuple[int, int] = (1600, 1000)
    sort: str = "anatomy"
    by: str = "cell_type"
    quantity: str | None = None
    token: int | None = None
    dpi: int = 100
    outline: bool = False

    def checked(self) -> "FigureOptions":
        """These options, or a one-line :class:`InputError` naming what is wrong."""
        if self.kind not in KINDS:
            raise InputError(f"unknown figure kind {self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.sort not in SORTS:
            raise InputError(f"unknown sort {self.sort!r}; choose one of {', '.join(SORTS)}")
        if self.by not in ("cell_type", "superclass"):
            raise InputError(f"unknown grouping {self.by!r}; choose cell_type or superclass")
        if self.quantity is not None and self.quantity not in QUANTITIES:
            raise InputError(f"unknown quantity {self.quantity!r}; choose one of "
                             f"{', '.join(QUANTITIES)}")
        width, height = self.size
        if not (320 <= width <= 8000 and 240 <= height <= 8000):
            raise InputError(f"a figure must be between 320x240 and 8000x8000 pixels, got "
                             f"{width}x{height}")
        if not 30 <= self.dpi <= 1200:
            raise InputError(f"--dpi must be between 30 and 1200, got {self.dpi}")
        return self


def check_output(path: str | Path) -> Path:
    """The figure's path if it can be written (suffix known, folder writable), else one line."""
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise InputError(f"{path.name}: a figure is written as {', '.join(SUFFIXES)} "
                         "(from the name's suffix)")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"cannot write {path}: {missing_folder(folder)}")
    if path.is_dir():
        raise InputError(f"cannot write {path}: it is a folder")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".flyviz-figure-"):
            pass
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


# ----------------------------------------------------------------------------- data
@dataclass
class _Run:
    label: str
    states: np.ndarray          # (T, N) float32
    colormap: str               # flyviz colormap name
    caption: str = "activation x"   # its colour bar's


@dataclass(frozen=True)
class _Frames:
    """What the recording's kind says its frames and its state are (:mod:`flyviz.kinds`):
    the time axis, the state's colormap and colour bar caption, and those of its magnitude
    (``abs_colormap``, ``abs_caption``: a language model's |x|; a spiking brain's rate, which
    has no sign, is its own magnitude)."""

    axis: Any                   # flyviz.kinds.TimeAxis
    texts: bool                 # the frames carry text (a language model's tokens)
    colormap: str
    caption: str
    abs_colormap: str = "abs"
    abs_caption: str = "|activation x|"

    @classmethod
    def of(cls, recording: Any, model: Any = None) -> "_Frames":
        kind = _kind(recording, model)
        layer = kind.state_layer("signed", None)
        magnitude = kind.state_layer("abs", None)
        return cls(kind.recording_axis(recording), kind.reads_text, layer.colormap,
                   layer.caption, magnitude.colormap, magnitude.caption)

    def ticks(self, recording: Any, count: int) -> tuple[list[str], str]:
        """The x axis's label of each of the first ``count`` frames, and the axis's title: a
        language model's tokens, else each frame's end on the axis (``"30"``, ms)."""
        if self.texts:
            return [repr(t)[1:-1][:12] for t in list(recording.token_texts)[:count]], \
                self.axis.name
        if self.axis.counted:
            return [str(i) for i in range(count)], self.axis.name
        return [f"{self.axis.time(i):g}" for i in range(count)], \
            f"{self.axis.name} end ({self.axis.unit})"


def _kind(recording: Any, model: Any = None) -> Any:
    """The kind of model that made ``recording``: the one its metadata names, else
    ``model``'s (:func:`flyviz.kinds.kind_of`), else the Fly LLM's."""
    from flyviz.kinds import kind_of, kind_of_recording

    named = isinstance(getattr(recording, "metadata", {}).get("kind"), str)
    return kind_of_recording(recording) if named or model is None else kind_of(model)


def _runs(recording: Any, frames: _Frames) -> list[_Run]:
    states = np.asarray(recording.states(), dtype=np.float32)
    if states.shape[0] == 0:
        raise InputError(f"the recording holds no {frames.axis.names}")
    baseline = getattr(recording, "baseline", None)
    if baseline is None:
        return [_Run("run", states, frames.colormap, frames.caption)]
    untouched = np.asarray(baseline.states(), dtype=np.float32)
    tokens = min(len(untouched), len(states))
    return [_Run("untouched", untouched[:tokens], frames.colormap, frames.caption),
            _Run("intervened", states[:tokens], frames.colormap, frames.caption),
            _Run("Δx (intervened − untouched)", states[:tokens] - untouched[:tokens],
                 "difference", "Δx")]


def _limit(values: np.ndarray) -> float:
    """A colour range that a few outliers do not set: the 99.5th percentile of |value|."""
    finite = np.abs(values[np.isfinite(values)])
    if finite.size == 0:
        return 1.0
    return float(max(np.percentile(finite, 99.5), 1e-6))


def _colour(values: np.ndarray, colormap: str, limit: float) -> np.ndarray:
    """Values to RGB at their display brightness on black (as the app shows them)."""
    from flyviz.render.colormaps import display_curve, is_diverging, lut, magnitude

    table = lut(colormap)
    low, high = (-limit, limit) if is_diverging(colormap) else (0.0, limit)
    v = np.abs(values) if colormap == "abs" else values
    index = np.clip(((v - low) / (high - low) * 255).round(), 0, 255).astype(np.int64)
    glow = display_curve(magnitude(values, colormap, low, high))
    return np.clip(table[index, :3] * glow[..., None], 0.0, 1.0)


def _colourbar(figure: Any, axes: Any, colormap: str, limit: float, label: str) -> None:
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import ListedColormap, Normalize

    from flyviz.render.colormaps import is_diverging

    low, high = (-limit, limit) if is_diverging(colormap) else (0.0, limit)
    ramp = _colour(np.linspace(low, high, 256), colormap, limit)
    mappable = ScalarMappable(norm=Normalize(low, high), cmap=ListedColormap(ramp))
    bar = figure.colorbar(mappable, ax=axes, fraction=0.04, pad=0.02)
    bar.set_label(label)


def _token_axis(axes: Any, frames: _Frames, recording: Any, count: int) -> None:
    """The x axis of ``count`` frames, as the recording's kind names them."""
    labels, title = frames.ticks(recording, count)
    step = max(1, int(np.ceil(count / 40)))
    ticks = np.arange(0, count, step)
    axes.set_xticks(ticks)
    axes.set_xticklabels([labels[t] for t in ticks], rotation=90, fontsize=7)
    axes.set_xlabel(title)


def _labels(model: Any, what: str, neurons: int) -> list[str] | None:
    anatomy = getattr(model, "anatomy", None) if model is not None else None
    values = getattr(anatomy, what, None) if anatomy is not None else None
    if values is None or len(values) != neurons:
        return None
    return [str(v) for v in values]


# ----------------------------------------------------------------------------- kinds
def _raster(figure: Any, recording: Any, model: Any, options: FigureOptions) -> None:
    from flyviz.analysis.population import RasterPooler, anatomy_order, similarity_order

    frames = _Frames.of(recording, model)
    runs = _runs(recording, frames)
    neurons = runs[0].states.shape[1]
    superclass = _labels(model, "superclass", neurons)
    if options.sort == "anatomy":
        if superclass is None:
            raise InputError("an anatomical raster needs the neurons' labels: give the model "
                             "with --model, or use --sort similarity")
        order = anatomy_order(superclass, _labels(model, "cell_type", neurons))
    else:
        if runs[0].states.shape[0] < 2:
            # similarity_order's own words count tokens; a spiking run's frames are bins
            raise InputError(f"a similarity order needs at least two {frames.axis.names} of "
                             f"states; the recording holds one: use --sort anatomy")
        order = similarity_order(runs[0].states)
    rows = max(50, int(options.size[1] * 0.8))
    pooler = RasterPooler(order, rows)
    grid = figure.subplots(1, len(runs), sharey=True, squeeze=False)[0]
    images = [pooler.pool(run.states) for run in runs]
    # The untouched and intervened panels are read side by side: one colour range for both
    # (each its own made the same colour two values); Δx keeps its own.
    shared = max((_limit(image) for run, image in zip(runs, images)
                  if run.colormap != "difference"), default=1.0)
    for axes, run, image in zip(grid, runs, images):
        limit = _limit(image) if run.colormap == "difference" else shared
        axes.imshow(_colour(image, run.colormap, limit), aspect="auto", interpolation="nearest",
                    extent=(-0.5, image.shape[1] - 0.5, pooler.rows - 0.5, -0.5))
        axes.set_title(run.label, fontsize=10)
        _token_axis(axes, frames, recording, image.shape[1])
        _colourbar(figure, axes, run.colormap, limit, run.caption)
    first = grid[0]
    if order.bands and options.sort == "anatomy":
        edges = pooler.edges
        centres, names = [], []
        for band in order.bands:
            top = int(np.searchsorted(edges, band.start, side="right") - 1)
            bottom = int(np.searchsorted(edges, band.stop, side="left"))
            centres.append((top + bottom) / 2 - 0.5)
            names.append(band.label)
            for axes in grid:
                axes.axhline(bottom - 0.5, color="white", linewidth=0.3, alpha=0.5)
        first.set_yticks(centres)
        first.set_yticklabels(names, fontsize=7)
        first.set_ylabel("neurons by superclass, then cell type")
    else:
        first.set_ylabel(f"{neurons:,} neurons in similarity order")
        first.set_yticks([])
    from flyviz.render.colormaps import is_diverging

    kept = "largest |x| kept" if is_diverging(frames.colormap) else "largest value kept"
    figure.suptitle(f"{neurons:,} neurons × {len(recording):,} {frames.axis.names} "
                    f"({neurons / pooler.rows:.0f} neurons a pixel row, {kept})",
                    fontsize=11)


def _celltypes(figure: Any, recording: Any, model: Any, options: FigureOptions) -> None:
    from flyviz.analysis.population import group_time_courses

    frames = _Frames.of(recording, model)
    runs = _runs(recording, frames)
    quantity = options.quantity or ("dx" if len(runs) > 1 else "mean")
    if quantity == "dx":
        if len(runs) == 1:
            # How a comparison is made is the recording's kind's (a spiking run has no
            # 'flyviz compare').
            hint = _kind(recording, model).comparison_hint
            raise InputError("--quantity dx needs a comparison recording"
                             + (f" ({hint})" if hint else ""))
        run = runs[-1]
    else:
        run = runs[-1] if len(runs) == 1 else runs[1]
    neurons = run.states.shape[1]
    labels = _labels(model, options.by, neurons)
    if labels is None:
        raise InputError(f"a {options.by.replace('_', ' ')} figure needs the neurons' labels: "
                         "give the model with --model")
    courses = group_time_courses(run.states, labels, _labels(model, "superclass", neurons),
                                 quantity="abs" if quantity == "abs" else "mean")
    colormap = "difference" if quantity == "dx" else (frames.abs_colormap if quantity == "abs"
                                                      else frames.colormap)
    limit = _limit(courses.values)
    grid = figure.add_gridspec(1, 2, width_ratios=(1, 40), wspace=0.01)
    strip, axes = figure.add_subplot(grid[0]), figure.add_subplot(grid[1])
    axes.imshow(_colour(courses.values, colormap, limit), aspect="auto",
                interpolation="nearest")
    parents = sorted(set(courses.parents))
    from matplotlib import colormaps as mpl_colormaps

    palette = mpl_colormaps["tab20"]
    strip.imshow(np.array([[palette(parents.index(p) % 20)[:3]] for p in courses.parents]),
                 aspect="auto", interpolation="nearest")
    strip.set_xticks([])
    rows = len(courses.names)
    step = max(1, int(np.ceil(rows / max(10, options.size[1] // 14))))
    strip.set_yticks(np.arange(0, rows, step))
    strip.set_yticklabels([f"{courses.names[r]} ({courses.parents[r]})"
                           for r in range(0, rows, step)], fontsize=6)
    axes.set_yticks([])
    _token_axis(axes, frames, recording, courses.values.shape[1])
    # The kind's words and unit: a spiking run's "mean firing rate in the bin (Hz)", where
    # "mean |x|" named a language model's state.
    what = {"mean": f"mean {frames.caption}", "abs": f"mean {frames.abs_caption}",
            "dx": "mean Δx"}[quantity]
    _colourbar(figure, axes, colormap, limit, what)
    axes.set_title(f"{what} of {rows:,} {options.by.replace('_', ' ')}s per {frames.axis.name} "
                   "(rows by similarity; side strip: superclass)", fontsize=10)


def _trajectory(figure: Any, recording: Any, model: Any, options: FigureOptions) -> None:
    from flyviz.analysis.population import principal_trajectory

    frames = _Frames.of(recording, model)
    runs = _runs(recording, frames)
    base = runs[0]
    names = frames.axis.names
    if base.states.shape[0] < 3:
        raise InputError(f"a trajectory needs at least three {names}")
    trajectory = principal_trajectory(base.states, components=3)
    axes = figure.add_subplot(projection="3d")
    paths = [(base.label, trajectory.coordinates)]
    if len(runs) > 1:
        paths.append((runs[1].label, trajectory.project(runs[1].states)))
    for (label, xyz), colour in zip(paths, ("#f0a050", "#50a0f0")):
        axes.plot(xyz[:, 0], xyz[:, 1], xyz[:, 2], color=colour, linewidth=1.2, label=label)
        axes.scatter(xyz[:, 0], xyz[:, 1], xyz[:, 2], c=np.arange(len(xyz)), cmap="viridis",
                     s=8, depthshade=False)
        axes.scatter(*xyz[0], color=colour, marker="o", s=40, edgecolor="black")
        axes.scatter(*xyz[-1], color=colour, marker="X", s=60, edgecolor="black")
    explained = trajectory.explained
    for setter, k in ((axes.set_xlabel, 0), (axes.set_ylabel, 1), (axes.set_zlabel, 2)):
        if k < len(explained):
            setter(f"PC{k + 1} ({100 * explained[k]:.1f} %)")
    axes.legend(loc="upper left", fontsize=8)
    axes.set_title(f"state trajectory over {base.states.shape[0]:,} {names} "
                   f"(o first, x last; {100 * explained.sum():.1f} % of the variance shown)",
                   fontsize=10)


def brain_image(state: Any, size: tuple[int, int]) -> np.ndarray:
    """The picture of the brain a brain figure of ``size`` embeds: the viewer ``state``
    rendered offscreen (:func:`~flyviz.render.offscreen.render_state_image`), a little
    smaller than the figure (room for the title and the colourbar)."""
    from flyviz.render.offscreen import render_state_image

    width, height = size
    return render_state_image(state, (max(320, int(width * 0.85)), max(240, height - 80)))


def _brain(figure: Any, recording: Any, model: Any, options: FigureOptions) -> None:
    from flyviz.viewer.state import ViewerState

    if model is None or getattr(model, "anatomy", None) is None:
        raise InputError("a brain figure needs the model that placed the neurons: give it "
                         "with --model")
    baseline = getattr(recording, "baseline", None)
    tokens = len(recording) if baseline is None else min(len(recording), len(baseline))
    token = tokens - 1 if options.token is None else options.token
    if not 0 <= token < tokens:
        raise InputError(f"--token {token} is outside the recording's 0..{tokens - 1}")
    kind = _kind(recording, model)

    def shown(run: Any) -> Any:
        state = ViewerState()
        # The kind says what the state is (its colour bar: activation x, rates in Hz).
        state.set_model(model, model.anatomy, getattr(model, "name", None), kind=kind)
        state.set_recording(run, index=token)
        state.mesh.outline_shown = options.outline
        return state

    # The caption is the model kind's: a language model's "token 12 of 0–39: ' cat'".
    caption = kind.frame_caption(recording, token)
    if baseline is None:
        state = shown(recording)
        axes = figure.add_subplot()
        axes.imshow(brain_image(state, options.size))
        axes.set_axis_off()
        low, high = state.value_range(token)
        _colourbar(figure, axes, state.layer.colormap, max(abs(low), abs(high)),
                   state.layer.caption)
        axes.set_title(caption, fontsize=11)
        return
    _brain_comparison(figure, recording, baseline, token, shown, caption, options)


def _brain_comparison(figure: Any, recording: Any, baseline: Any, token: int, shown: Any,
                      caption: str, options: FigureOptions) -> None:
    """A comparison's brain figure: the untouched run, the intervened run and Δx side by
    side, as the raster draws them."""
    import dataclasses

    from flyviz.render.offscreen import render_state_image
    from flyviz.render.style import ColourScale
    from flyviz.viewer.layers import DELTA

    untouched, intervened, delta = shown(baseline), shown(recording), shown(recording)
    delta.colour_by = DELTA
    # The untouched and intervened panels are read side by side: one colour range for both
    # (each its own made the same colour two values); Δx keeps its own.
    shared = max(max(abs(v) for v in state.value_range(token))
                 for state in (untouched, intervened))
    for state in (untouched, intervened):
        layer = dataclasses.replace(state.state_layer(),
                                    scale=ColourScale.fixed(max(shared, 1e-6)))
        state.add_colour_layer("figure", "one range for both runs", lambda layer=layer: layer)
        state.colour_by = "figure"
    # A free-running comparison may have read another token in the untouched run.
    own = untouched.kind.frame_caption(baseline, token)
    first = "untouched" if own == caption else f"untouched ({own})"
    width, height = options.size
    # A panel a third of the width, about as wide as the brain is (no black bands above).
    panel = (max(320, int(width / 3 * 0.85)), max(240, min(height - 120, int(width / 3 * 0.65))))
    grid = figure.subplots(1, 3, squeeze=False)[0]
    for axes, label, state in zip(grid, (first, "intervened", "Δx (intervened − untouched)"),
                                  (untouched, intervened, delta)):
        axes.imshow(render_state_image(state, panel))
        axes.set_axis_off()
        axes.set_title(label, fontsize=10)
        low, high = state.value_range(token)
        _colourbar(figure, axes, state.layer.colormap, max(abs(low), abs(high), 1e-6),
                   state.layer.caption)
    figure.suptitle(caption, fontsize=11)


_DRAW = {"raster": _raster, "celltypes": _celltypes, "trajectory": _trajectory,
         "brain": _brain}


def write_figure(recording: Any, out: str | Path, options: FigureOptions | None = None,
                 model: Any = None) -> Path:
    """Draw one figure of ``recording`` and write it to ``out`` (.png, .svg or .pdf).

    Parameters
    ----------
    recording
        A :class:`~flyviz.record.recording.Recording` (a comparison's draws its
        untouched run too).
    out
        The file; its suffix picks the format. Written whole or not at all.
    options
        What to draw (default: an anatomical raster of 1600x1000 pixels).
    model
        A :class:`~flyviz.record.runner.Model` or checkpoint with the neurons'
        labels and positions (anatomical orders, cell types, the brain).
    """
    from flyviz.extras import require

    options = (options or FigureOptions()).checked()
    out = check_output(out)
    require("figures", "flyviz figure")
    from matplotlib.figure import Figure

    width, height = options.size
    figure = Figure(figsize=(width / options.dpi, height / options.dpi), dpi=options.dpi,
                    layout="constrained")
    _DRAW[options.kind](figure, recording, model, options)
    partial = out.with_name(f".{out.name}.partial{out.suffix}")
    try:
        figure.savefig(partial, dpi=options.dpi, format=out.suffix[1:].lower())
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return out
