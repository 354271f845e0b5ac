"""A circuit's faithfulness curve as a figure: ``flyviz circuit --figure FILE``.

Faithfulness ``f`` against the circuit size ``k`` (log axis; ``k = 0``, where
``f = 0`` by definition, sits at the left on a short linear stretch): the
measured curve points joined, the bisection's refined points marked, the
tolerance band around 1 shaded, the circuits that overshoot the whole model
marked, the faithful circuit ringed (none where no circuit below the whole brain
is faithful, which the title says) and CPR and CMD in the title.
Drawn without a window (matplotlib's Agg or SVG canvas) and Qt-free, so the app
can reuse it; written whole or not at all.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from flyviz.errors import InputError
from flyviz.fileio import missing_folder

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.analysis.circuit import CircuitResult

#: File types the curve is written as (from the name's suffix).
SUFFIXES = (".png", ".svg")
#: What ``k`` counts, per :attr:`~flyviz.analysis.circuit.Units.kind`.
UNIT_NAMES = {"neurons": "neurons", "types": "cell types", "superclasses": "superclasses",
              "edges": "synapses"}
#: Colours of the measured curve, the bisection's points and the chosen circuit (RGB hex).
CURVE_COLOUR = "#1f77b4"
REFINED_COLOUR = "#ff7f0e"
CIRCUIT_COLOUR = "#d62728"
#: The measured circuits that overshoot the whole model (f above 1 + tolerance).
OVERSHOOT_COLOUR = "#9467bd"


def check_figure_path(path: str | Path) -> Path:
    """``path`` if a curve can be written there (suffix .png or .svg, folder exists), else
    one :class:`~flyviz.errors.InputError` line."""
    path = Path(path).expanduser()
    if path.suffix.lower() not in SUFFIXES:
        raise InputError(f"--figure {path.name}: the curve is written as "
                         f"{' or '.join(SUFFIXES)} (from the name's suffix)")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"cannot write {path}: {missing_folder(folder)}")
    if path.is_dir():
        raise InputError(f"cannot write {path}: it is a folder")
    from flyviz.fileio import probe_writable

    probe_writable(folder, "--figure", path)
    return path


def circuit_curve_figure(result: "CircuitResult", path: str | Path,
                         size: tuple[int, int] = (900, 560), dpi: int = 100) -> Path:
    """Draw ``result``'s faithfulness curve and write it to ``path`` (.png or .svg).

    Parameters
    ----------
    result
        What :func:`~flyviz.analysis.circuit.find_circuit` found.
    path
        The file; its suffix picks the format. Written to a temporary file beside
        it, then renamed, so a failed draw leaves no half-written file.
    size
        ``(width, height)`` in pixels at ``dpi``.
    dpi
        Dots per inch of the written file.

    Returns
    -------
    Path
        The file written.
    """
    from flyviz.extras import require

    path = check_figure_path(path)
    require("figures", "flyviz circuit --figure")
    from matplotlib.figure import Figure

    unit = UNIT_NAMES.get(result.units.kind, result.units.kind)
    tolerance = float(result.settings.tolerance)
    figure = Figure(figsize=(size[0] / dpi, size[1] / dpi), dpi=dpi, layout="constrained")
    axes = figure.add_subplot()
    # k = 0 is on the curve (f = 0); a symmetric-log axis keeps it, linear below k = 1.
    axes.set_xscale("symlog", linthresh=1.0, linscale=0.4)
    curve = sorted(result.curve, key=lambda p: p.size)
    axes.plot([p.size for p in curve], [p.faithfulness for p in curve], "-o",
              color=CURVE_COLOUR, linewidth=2, markersize=5, label="measured curve", zorder=3)
    if result.refinement:
        axes.plot([p.size for p in result.refinement],
                  [p.faithfulness for p in result.refinement], "D", color=REFINED_COLOUR,
                  markersize=6, linestyle="none", label="bisection steps", zorder=4)
    axes.axhspan(1.0 - tolerance, 1.0 + tolerance, color="0.88", zorder=0,
                 label=f"faithful: |1 - f| <= {tolerance:g}")
    axes.axhline(1.0, color="0.6", linestyle=":", linewidth=1, zorder=1)
    over = [p for p in result.points if p.faithfulness > 1.0 + tolerance]
    if over:
        top = max(over, key=lambda p: p.faithfulness)
        axes.plot([p.size for p in over], [p.faithfulness for p in over], "o",
                  color=OVERSHOOT_COLOUR, markersize=7, linestyle="none", zorder=4,
                  label=f"overshoots (up to {top.faithfulness:.0%} at {top.size:,})")
    if result.faithful:
        axes.plot([result.size], [result.faithfulness], "o", markersize=13,
                  markerfacecolor="none", markeredgecolor=CIRCUIT_COLOUR, markeredgewidth=2.2,
                  linestyle="none", zorder=5,
                  label=f"circuit: {result.size:,} {unit}, f = {result.faithfulness:.3f}")
    axes.set_xlim(0, result.units.count * 1.3)
    axes.set_xlabel(f"circuit size k ({unit}, log scale; of {result.units.count:,})")
    axes.set_ylabel("faithfulness f = (m(C) - m(∅)) / (m(M) - m(∅))")
    source = result.task.source or "the task"
    axes.set_title(f"{source}: {len(result.task.prompts):,} prompts, "
                   f"{result.settings.ablation} ablation, {result.settings.score} scores\n"
                   f"CPR {result.cpr:.4f}   CMD {result.cmd:.4f}"
                   + ("" if result.faithful else
                      "   no circuit below the whole brain is faithful"), fontsize=11)
    axes.grid(True, which="major", color="0.9", linewidth=0.8)
    axes.legend(loc="best", fontsize=9)
    partial = path.with_name(f".{path.name}.partial{path.suffix}")
    try:
        figure.savefig(partial, dpi=dpi, format=path.suffix[1:].lower())
        os.replace(partial, path)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        partial.unlink(missing_ok=True)
    return path


__all__ = ["CURVE_COLOUR", "SUFFIXES", "check_figure_path", "circuit_curve_figure"]
