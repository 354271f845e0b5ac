"""The documentation's screenshot tour (docs/tour.md) still shows the app as it is: the
pictures rendered now by tests/make_tour.py match the committed ones in docs/images/tour.

A match is tolerant (fonts' antialiasing, the frame rate in the status bar, a rounding of
the brain's points), but a dock that disappears, a panel left empty or a layout that moves
changes far more than it allows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QImage

import make_tour

pytestmark = [pytest.mark.gui, pytest.mark.slow]

#: The committed pictures.
TOUR = Path(__file__).resolve().parent.parent / "docs" / "images" / "tour"
#: Block side, in pixels, of the coarse comparison.
BLOCK = 16
#: A block differs when its mean colour moved by more than this (of 255).
BLOCK_TOLERANCE = 24
#: At most this fraction of a picture's blocks may differ.
MOST_CHANGED = 0.03


def pixels(path: Path) -> np.ndarray:
    """The picture's RGB pixels, (height, width, 3) uint8."""
    image = QImage(str(path)).convertToFormat(QImage.Format.Format_RGB888)
    assert not image.isNull(), path
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(
        image.height(), image.bytesPerLine())
    return rows[:, :image.width() * 3].reshape(image.height(), image.width(), 3).copy()


def block_means(picture: np.ndarray) -> np.ndarray:
    """The mean colour of each BLOCK × BLOCK block (the picture cropped to whole blocks)."""
    h, w = (s // BLOCK * BLOCK for s in picture.shape[:2])
    cut = picture[:h, :w].astype(np.float64)
    return cut.reshape(h // BLOCK, BLOCK, w // BLOCK, BLOCK, 3).mean(axis=(1, 3))


def changed_fraction(a: np.ndarray, b: np.ndarray) -> float:
    """The fraction of blocks whose mean colour differs clearly between two pictures."""
    return float((np.abs(block_means(a) - block_means(b)).max(axis=-1) > BLOCK_TOLERANCE).mean())


def test_the_comparison_catches_a_dock_that_disappears():
    """The rule itself: the default window with its right column painted over differs."""
    picture = pixels(TOUR / "window-default.png")
    gone = picture.copy()
    gone[50:520, 935:] = picture[60, 600]           # the Text and Next token docks, as brain
    assert changed_fraction(picture, picture) == 0.0
    assert changed_fraction(picture, gone) > MOST_CHANGED


def test_the_committed_tour_matches_the_app(tmp_path):
    written = make_tour.make_tour(tmp_path)
    names = {path.name for path in written}
    assert {"window-default.png", "window-analysis.png", "window-presentation.png",
            "movie-frame.png"} <= names
    committed = {path.name for path in TOUR.glob("*.png")}
    assert names <= committed, f"pictures missing from {TOUR}: {sorted(names - committed)}"
    problems = []
    for path in written:
        now, then = pixels(path), pixels(TOUR / path.name)
        if now.shape != then.shape:
            problems.append(f"{path.name}: {now.shape[1]}x{now.shape[0]} now, "
                            f"{then.shape[1]}x{then.shape[0]} committed")
            continue
        # Not blank: the picture has content (a brain, docks), not one flat colour.
        assert block_means(now).std() > 5, f"{path.name} is nearly one colour"
        changed = changed_fraction(now, then)
        if changed > MOST_CHANGED:
            problems.append(f"{path.name}: {changed:.1%} of its {BLOCK}-pixel blocks differ "
                            "(run: python tests/make_tour.py --out docs/images/tour)")
    assert not problems, "\n".join(problems)
    _the_analysis_graph_is_drawn(tmp_path / "window-analysis.png")


def _the_analysis_graph_is_drawn(path: Path) -> None:
    """The analysis picture's Graph panel shows the traced graph: nodes in both flow colours
    (it was an empty plot: nothing had been traced before the picture)."""
    from flyviz.app.base.theme import NEGATIVE, POSITIVE

    x, y, w, h = make_tour.REGIONS[path.name]["graph"]
    plot = pixels(path)[y:y + h, x:x + w].astype(int)
    assert plot.size, "the Graph panel is not in the analysis picture"
    for colour, name in ((POSITIVE, "red"), (NEGATIVE, "blue")):
        near = (np.abs(plot - np.array(colour)).max(axis=-1) <= 40).sum()
        assert near > 50, f"the analysis picture's Graph panel shows no {name} node ({near} px)"
