"""The language model's 2-D panels beside the brain: next-token bars and traces (and the text).

Each panel shows one moment of a :class:`~flyviz.record.recording.Recording`
through ``show_frame(recording, index)``; the window calls it from its display-rate
timer only when the shown frame changed, never once per produced token.
The pyqtgraph items are created once and their data replaced (one reused
``ImageItem`` with fixed levels, one ``BarGraphItem``, ``PlotDataItem`` traces),
which is what keeps them cheap at display rate.
"""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSpinBox, QVBoxLayout, QWidget

from flyviz.app.base import theme
from flyviz.app.base.plots import PlotWidget
from flyviz.app.population.plot_axes import paint_on_demand, spaced_axes
from flyviz.app.language.compare_views import visible_token_text
from flyviz.app.language.text_panel import TextPanel, TextToken, text_tokens
from flyviz.record.recording import Recording
from flyviz.kinds.language import LIVE_TOP_K

__all__ = ["TextPanel", "TextToken", "TopKPanel", "TracePanel", "text_tokens"]

# -------------------------------------------------------------- top-k panel
class TopKPanel(QWidget):
    """Horizontal bars of the next-token candidates with their text on the bars; in a
    comparison, each candidate's text on a line of its own above its two bars."""

    k_changed = Signal(int)

    #: Most candidates a frame records (the worker asks for this many).
    MAX_K = LIVE_TOP_K
    #: Pixels between a comparison's label and its bars, and between a row and the next.
    PAIR_GAP_PX = 1.0

    def __init__(self, parent: QWidget | None = None, k: int = 8) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        header = QHBoxLayout()
        self.title = QLabel("Next token")
        self.title.setObjectName("hint")
        # Wrapped, not widened: a comparison's longer title ("... untouched (grey) →
        # intervened") widened the whole right column and moved the brain view.
        self.title.setWordWrap(True)
        header.addWidget(self.title, 1)
        header.addWidget(QLabel("k"))
        self.k_box = QSpinBox()
        self.k_box.setRange(1, self.MAX_K)
        self.k_box.setValue(k)
        self.k_box.setToolTip("How many candidates to show")
        header.addWidget(self.k_box)
        layout.addLayout(header)
        self.plot = PlotWidget(axisItems=spaced_axes(), enableMenu=False)   # none built
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.getAxis("left").setStyle(showValues=False)
        self.plot.getAxis("left").setTicks([])
        self.plot.getAxis("bottom").setLabel("probability")
        self.plot.setXRange(0, 1, padding=0)
        paint_on_demand(self.plot)
        layout.addWidget(self.plot, 1)
        self.bars = pg.BarGraphItem(x0=[], y=[], height=0.72, width=[],
                                    brush=pg.mkBrush(theme.ACCENT), pen=pg.mkPen(None))
        self.plot.addItem(self.bars)
        self.labels: list[pg.TextItem] = []
        for _ in range(self.MAX_K):
            item = pg.TextItem("", color=theme.TEXT, anchor=(0, 0.5))
            item.setZValue(10)
            self.plot.addItem(item)
            self.labels.append(item)
        # A label's margin around its text: the default on the bars of one run, none on a
        # comparison's line of its own above its bars (the margin would make each row taller).
        self._label_margin = float(self.labels[0].textItem.document().documentMargin())
        # A comparison's untouched probabilities, beside the intervened ones.
        self.untouched_bars = pg.BarGraphItem(x0=[], y=[], height=0.36, width=[],
                                              brush=pg.mkBrush("#8f98aa"), pen=pg.mkPen(None))
        self.plot.addItem(self.untouched_bars)
        self._last: tuple[int, int, int, float] | None = None
        self._recording: Recording | None = None
        self._index = -1
        self._paired = False                # the bars shown are a comparison's pairs
        self.k_box.valueChanged.connect(self._on_k_change)
        # A shorter panel (Why? opening the Graph panel below it) shows fewer bars.
        self.plot.getPlotItem().getViewBox().sigResized.connect(self._on_resized)

    @property
    def k(self) -> int:
        """Number of bars shown."""
        return int(self.k_box.value())

    def rows_that_fit(self, paired: bool | None = None) -> int:
        """How many candidates the plot shows legibly: each row at least as high as its
        label (the bars of ten candidates in a short dock overlapped and could not be read);
        a comparison's row (``paired``, by default whether pairs are shown) its label above
        two bars half a line of text high each.
        """
        box = self.plot.getPlotItem().getViewBox()
        paired = self._paired if paired is None else paired
        label = self._label_height_px(paired)
        row = label + self.fontMetrics().height() + 2 * self.PAIR_GAP_PX if paired else label + 2
        # The y range is padded by 2 % (setYRange's padding).
        return max(1, int(box.height() / (1.04 * row)))

    def _label_height_px(self, paired: bool) -> float:
        """A label's height on screen, its margin included (what it covers), with the margin
        it has in a comparison (``paired``) or in one run's bars."""
        document = self.labels[0].textItem.document()
        text = self.labels[0].textItem.boundingRect().height() - 2 * document.documentMargin()
        return float(text + (0.0 if paired else 2 * self._label_margin))

    def _set_label_margin(self, paired: bool) -> None:
        margin = 0.0 if paired else self._label_margin
        for label in self.labels:
            if label.textItem.document().documentMargin() != margin:
                label.textItem.document().setDocumentMargin(margin)
                label.updateTextPos()

    def _shown_count(self, k: int, available: int, paired: bool = False) -> tuple[int, str]:
        """The number of bars to draw of ``available`` candidates (at most ``k``), and what
        the title adds when fewer than that fit."""
        wanted = min(k, available)
        n = min(wanted, self.rows_that_fit(paired))
        return n, ("" if n >= wanted else f" (top {n} of {wanted}: enlarge to see all)")

    def _on_resized(self) -> None:
        # A comparison's rows are laid out in pixels: lay them out again at the new height.
        self._last = None
        if self._recording is not None:
            self.show_frame(self._recording, self._index)

    def _on_k_change(self, k: int) -> None:
        self._last = None
        if self._recording is not None and self._index >= 0:
            self.show_frame(self._recording, self._index)
        self.k_changed.emit(int(k))

    def show_frame(self, recording: Recording, index: int) -> None:
        """Bars of frame ``index``'s candidates (empty when ``index < 0``)."""
        self._recording, self._index = recording, index
        key = (id(recording), index, self.k, self.plot.getPlotItem().getViewBox().height())
        if key == self._last:
            return
        self._last = key
        k = self.k
        if recording.baseline is not None and self._show_pairs(recording, index, k):
            return
        self._paired = False
        self._set_label_margin(False)
        self.untouched_bars.setOpts(x0=[], y=[], width=[])
        if index < 0:
            ids, probs = np.zeros(0, int), np.zeros(0)
            texts: tuple[str, ...] = ()
            chosen = -1
            # An empty recording (Reset, a new run's start) has no candidates, and no pair.
            self.title.setText("Next token")
        else:
            frame = recording[index]
            k, fewer = self._shown_count(k, len(frame.top_k_ids))
            ids = np.asarray(frame.top_k_ids)[:k]
            probs = np.asarray(frame.top_k_probabilities, dtype=float)[:k]
            texts = tuple(frame.top_k_text[:k])
            chosen = frame.predicted_token_id
            self.title.setText(f"Next token after #{frame.position}"
                               + ("" if frame.is_generation else " (reading the prompt)")
                               + fewer + _chosen_elsewhere(frame, ids))
        n = len(probs)
        y = -np.arange(n, dtype=float)
        brushes = [pg.mkBrush(theme.ACCENT if int(i) == chosen else "#2f6f8f") for i in ids] \
            if n else []
        self.bars.setOpts(x0=np.zeros(n), y=y, width=probs, height=0.72, brushes=brushes)
        for j, label in enumerate(self.labels):
            if j < n:
                shown = visible_token_text(texts[j]).replace("\n", "⏎")
                label.setText(f"{shown!r}  {probs[j]:.1%}")
                label.setPos(0.01, y[j])
                label.setVisible(True)
            else:
                label.setVisible(False)
        self.plot.setYRange(-max(k, 1) + 0.5, 0.5, padding=0.02)
        self.plot.setXRange(0, 1, padding=0)
        self.plot.viewport().update()


    def _show_pairs(self, recording: Recording, index: int, k: int) -> bool:
        """Both runs' probabilities of the likeliest candidates, untouched (grey) above
        intervened (accent), each candidate's label on a line above its two bars; False when
        there is no pair at ``index``."""
        from flyviz.app.language.compare_views import PairedCandidates, paired_candidates

        pairs = paired_candidates(recording, index, k)
        if pairs is None:
            return False
        self._paired = True
        self._set_label_margin(True)
        k, fewer = self._shown_count(k, len(pairs.texts), paired=True)
        n = k
        pairs = PairedCandidates(pairs.texts[:n], pairs.untouched[:n], pairs.intervened[:n])
        y = -np.arange(n, dtype=float)
        # Row j spans y[j] ± 0.5: its label at the top, the two bars below it. The label's
        # height is in pixels, so the bars get what the row's pixels leave (the label drawn
        # across both bars hid them and was hard to read on them).
        box = self.plot.getPlotItem().getViewBox()
        per_px = 1.04 * max(n, 1) / max(float(box.height()), 1.0)   # data units per pixel
        label = self._label_height_px(True) * per_px
        gap = self.PAIR_GAP_PX * per_px
        bar = max((1.0 - label - 2 * gap) / 2, 0.05)
        top = y + 0.5 - label - gap                                    # the bars' top
        self.untouched_bars.setOpts(x0=np.zeros(n), y=top - bar / 2, width=pairs.untouched,
                                    height=bar)
        self.bars.setOpts(x0=np.zeros(n), y=top - 1.5 * bar, width=pairs.intervened,
                          height=bar, brushes=[pg.mkBrush(theme.ACCENT)] * n)
        for j, label_item in enumerate(self.labels):
            if j < n:
                shown = visible_token_text(pairs.texts[j]).replace("\n", "⏎")
                label_item.setText(f"{shown!r}  {pairs.untouched[j]:.1%} → "
                                   f"{pairs.intervened[j]:.1%}")
                label_item.setPos(0.01, y[j] + 0.5 - label / 2)
                label_item.setVisible(True)
            else:
                label_item.setVisible(False)
        self.title.setText(f"Next token after #{recording[index].position}: "
                           "untouched (grey) → intervened" + fewer)
        self.plot.setYRange(-max(k, 1) + 0.5, 0.5, padding=0.02)
        self.plot.setXRange(0, 1, padding=0)
        self.plot.viewport().update()
        return True


def _chosen_elsewhere(frame, shown_ids: np.ndarray) -> str:
    """What the title adds when a generating frame's chosen token has no bar: a sampled
    token outside the candidates shown was otherwise named nowhere (the shared page says
    the same under its bars)."""
    if not frame.is_generation or int(frame.predicted_token_id) in set(map(int, shown_ids)):
        return ""
    shown = visible_token_text(frame.predicted_text).replace("\n", "⏎")
    return (f"; chosen {shown!r} {frame.probability:.1%} "
            f"(not among the top {len(shown_ids)})")


def _legend_html(entries: tuple[tuple[str, str], ...]) -> str:
    """One line naming each curve after a swatch of its colour."""
    return "&nbsp;&nbsp;&nbsp;".join(
        f"<span style='color:{colour}'>━━</span>&nbsp;<span style='color:{theme.TEXT}'>"
        f"{html.escape(name)}</span>" for name, colour in entries)


class TracePanel(QWidget):
    """Top-1 probability and mean |x| per token, with the shown token marked."""

    #: Emitted when the user clicks a token on the traces.
    token_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.plot = PlotWidget(axisItems=spaced_axes(), enableMenu=False)   # none built
        self.plot.setMouseEnabled(True, False)
        self.plot.hideButtons()
        self.plot.getAxis("bottom").setLabel("token")
        self.plot.setMinimumHeight(80)
        # The legend is the plot's title row, above the data: a legend inside the plot
        # hid the curves where they run along the top (a confident model's probability).
        self.plot.setTitle(_legend_html((("top-1 probability", theme.VIOLET),
                                         ("mean |x|", theme.WARM))), size="9pt")
        self.legend = self.plot.getPlotItem().titleLabel
        self.plot.setYRange(0, 1, padding=0.03)
        self.probability = self.plot.plot([], [], pen=pg.mkPen(theme.VIOLET, width=2))
        self.mean_abs = self.plot.plot([], [], pen=pg.mkPen(theme.WARM, width=2))
        #: A comparison's per-token KL(p_untouched ‖ p_intervened), in nats.
        self.kl = self.plot.plot([], [], pen=pg.mkPen("#ff7a9a", width=2))
        self.token_line = pg.InfiniteLine(angle=90, movable=False,
                                      pen=pg.mkPen(theme.ACCENT, width=1, style=Qt.PenStyle.DashLine))
        self.plot.addItem(self.token_line)
        paint_on_demand(self.plot)
        layout.addWidget(self.plot, 1)
        self._length = -1
        self._recording: Recording | None = None
        self.plot.scene().sigMouseClicked.connect(self._on_click)

    def show_frame(self, recording: Recording, index: int) -> None:
        """Curves over the whole recording; the cursor at ``index``."""
        n = len(recording)
        if recording is not self._recording or n != self._length:
            self._recording, self._length = recording, n
            x = np.arange(n, dtype=float)
            self.probability.setData(x, recording.top1_probabilities)
            self.mean_abs.setData(x, recording.mean_abs_states)
            self._show_kl(recording, x)
            self.plot.setXRange(0, max(n - 1, 1), padding=0.02)
        self.token_line.setVisible(index >= 0)
        self.token_line.setPos(max(index, 0))
        self.plot.viewport().update()

    def _show_kl(self, recording: Recording, x: np.ndarray) -> None:
        from flyviz.record.compare import comparison_trace

        trace = comparison_trace(recording)
        entries = [("top-1 probability", theme.VIOLET), ("mean |x|", theme.WARM)]
        if trace is None:
            self.kl.setData([], [])
            self.plot.setYRange(0, 1, padding=0.03)
        else:
            kl = trace.kl
            self.kl.setData(x, np.nan_to_num(kl, nan=0.0))
            top = float(np.nanmax(kl)) if np.isfinite(kl).any() else 0.0
            self.plot.setYRange(0, max(1.0, top), padding=0.03)
            entries.append(("KL untouched ‖ intervened (nats)", "#ff7a9a"))
        self.plot.setTitle(_legend_html(tuple(entries)), size="9pt")

    def _on_click(self, event) -> None:
        if self._length <= 0:
            return
        point = self.plot.getPlotItem().vb.mapSceneToView(event.scenePos())
        self.token_clicked.emit(int(round(min(max(point.x(), 0), self._length - 1))))
