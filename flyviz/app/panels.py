"""The 2-D panels beside the brain: text, next-token bars, state raster and traces.

Each panel shows one moment of a :class:`~flyviz.record.recording.Recording`
through ``show_frame(recording, index)``; the window calls it from its display-rate
timer only when the shown frame changed, never once per produced token.
The pyqtgraph items are created once and their data replaced (one reused
``ImageItem`` with fixed levels, one ``BarGraphItem``, ``PlotDataItem`` traces),
which is what keeps them cheap at display rate.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QPoint, Qt, Signal
from PySide6.QtGui import QFont, QMouseEvent
from PySide6.QtWidgets import (QGraphicsView, QHBoxLayout, QLabel, QSpinBox, QTextBrowser,
                               QToolTip, QVBoxLayout, QWidget)

from flyviz.app import theme
from flyviz.record.frame import PHASE_GENERATION
from flyviz.record.recording import Recording

_SPECIAL_TOKENS = {"<s>", "<pad>"}

#: Most tokens the text panel lays out at once (the newest ones).
MAX_TEXT_TOKENS = 1500
_EOS_TEXT = "</s>"


def _visible_token_text(text: str) -> str:
    """Token text with invisible characters made visible (newlines kept)."""
    return text.replace("\t", "→").replace("\r", "")


# ------------------------------------------------------------ plot repaints
_INPUT_EVENTS = frozenset({QEvent.Type.MouseButtonPress, QEvent.Type.MouseButtonRelease,
                           QEvent.Type.MouseButtonDblClick, QEvent.Type.Wheel})


class _RepaintOnInput(QObject):
    """Event filter repainting a plot's viewport when the mouse may have changed it."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        kind = event.type()
        if kind in _INPUT_EVENTS or (kind == QEvent.Type.MouseMove
                                     and event.buttons() != Qt.MouseButton.NoButton):
            watched.update()
        return False


def paint_on_demand(plot: pg.PlotWidget) -> None:
    """Repaint ``plot`` only when asked (``plot.viewport().update()``) or used with the mouse.

    Parameters
    ----------
    plot
        A plot whose owner calls ``plot.viewport().update()`` after changing what it shows.

    Notes
    -----
    After handling its changed items, a ``QGraphicsScene`` at once flushes the whole
    window's pending repaints. In a window holding an OpenGL view every flush composes
    the full window (about 20 ms with software OpenGL at 1730x980), so each plot that
    changes in a display tick cost one more composition. A view that leaves its
    viewport alone on scene changes adds only a dirty region, and the window is
    composed once per tick with everything that changed.
    """
    plot.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.NoViewportUpdate)
    viewport = plot.viewport()
    viewport_filter = _RepaintOnInput(plot)
    viewport.installEventFilter(viewport_filter)
    plot._repaint_on_input = viewport_filter   # keep the filter alive with the plot


# ---------------------------------------------------------------- text panel
@dataclass(frozen=True)
class TextToken:
    """One token of the running text.

    Parameters
    ----------
    text
        Display text of the token.
    generated
        True for model output, False for the prompt.
    appears_at
        Index of the first frame at which it is part of the text.
    scored_by
        Index of the frame whose prediction it answers (``-1`` for the first
        prompt token, which nothing predicted).
    """

    text: str
    generated: bool
    appears_at: int
    scored_by: int


def text_tokens(recording: Recording, start: int = 0) -> list[TextToken]:
    """Tokens of the running text contributed by frames ``start:`` of ``recording``.

    A prompt token enters the text when a frame consumes it; a generated token
    enters when the frame that predicted it is produced (the next frame's
    input is that same token and adds nothing).
    """
    tokens: list[TextToken] = []
    seen_generation = start > 0 and any(recording[i].phase == PHASE_GENERATION
                                        for i in range(max(0, start - 1), start))
    for i in range(start, len(recording)):
        frame = recording[i]
        if not seen_generation or frame.phase != PHASE_GENERATION:
            if not (i == 0 and frame.input_text in _SPECIAL_TOKENS):
                tokens.append(TextToken(frame.input_text, False, i, i - 1))
        if frame.phase == PHASE_GENERATION:
            seen_generation = True
            tokens.append(TextToken(frame.predicted_text, True, i, i))
    return tokens


class TextPanel(QTextBrowser):
    """Prompt and continuation up to the shown frame, newest token highlighted.

    Hovering a token shows the probability the model gave it and the model's
    top candidates at that point.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("textPanel")
        self.setReadOnly(True)
        self.setOpenLinks(False)
        self.viewport().setMouseTracking(True)   # hover tooltips without a button held
        font = QFont()
        font.setPointSize(13)
        self.setFont(font)
        self.document().setDocumentMargin(12)
        self._recording: Recording | None = None
        self._tokens: list[TextToken] = []
        self._scanned = 0
        self._shown_index = -2
        self._placeholder = "Type a prompt above and press Enter."
        self._decode: Callable[[list[int]], str] | None = None
        self.show_text_placeholder()

    def set_decoder(self, decode: Callable[[list[int]], str] | None) -> None:
        """How token ids become text (the model tokenizer's ``decode``)."""
        self._decode = decode
        self._recording = None

    def show_text_placeholder(self, message: str | None = None) -> None:
        """Show a hint instead of text (no recording yet)."""
        if message is not None:
            self._placeholder = message
        self.setHtml(f"<p style='color:{theme.MUTED}'>{html.escape(self._placeholder)}</p>")

    def tokens(self) -> list[TextToken]:
        """Every token of the current recording known so far."""
        return self._tokens

    def show_frame(self, recording: Recording, index: int) -> None:
        """Show the text as it stood at frame ``index``."""
        if recording is not self._recording:
            self._recording = recording
            self._tokens = []
            self._scanned = 0
            self._shown_index = -2
        if len(recording) > self._scanned:
            self._tokens.extend(text_tokens(recording, self._scanned))
            self._scanned = len(recording)
        if index == self._shown_index:
            return
        self._shown_index = index
        if index < 0:
            self.show_text_placeholder()
            return
        count = sum(1 for t in self._tokens if t.appears_at <= index)
        # Very long runs show their tail: rebuilding thousands of spans at display
        # rate would cost more than the text is worth on screen.
        first = max(0, count - MAX_TEXT_TOKENS)
        parts = [f"<div style='white-space: pre-wrap; line-height: 140%; color:{theme.TEXT}'>"]
        if first:
            parts.append(f"<span style='color:{theme.MUTED}'>… </span>")
        last = count - 1
        for k in range(first, count):
            token = self._tokens[k]
            text = token.text
            if token.generated and text == _EOS_TEXT:
                body = "&nbsp;[end]"
                style = f"color:{theme.MUTED}; font-size: small"
            else:
                body = html.escape(_visible_token_text(text)).replace("\n", "<br>")
                style = f"color:{theme.TEXT if token.generated else theme.PROMPT_TEXT}"
            if k == last:
                style += f"; background-color:{theme.ACCENT}; color:{theme.BACKGROUND}"
            parts.append(f"<a href='tok:{k}' style='text-decoration:none; {style}'>{body}</a>")
        parts.append("</div>")
        self.setHtml("".join(parts))
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def token_tooltip(self, k: int) -> str:
        """Tooltip text of token ``k``: its probability and the top candidates."""
        if self._recording is None or not 0 <= k < len(self._tokens):
            return ""
        token = self._tokens[k]
        label = "generated" if token.generated else "prompt"
        lines = [f"<b>{html.escape(repr(token.text))}</b> &nbsp;({label})"]
        if token.scored_by < 0:
            lines.append("first token: nothing predicted it")
            return "<br>".join(lines)
        frame = self._recording[token.scored_by]
        ids = [int(i) for i in frame.top_k_ids]
        target = frame.predicted_token_id if token.generated else (
            self._recording[token.appears_at].input_token_id)
        if token.generated:
            lines.append(f"probability {frame.probability:.1%}")
        elif target in ids:
            lines.append(f"the model gave it {float(frame.top_k_probabilities[ids.index(target)]):.1%}")
        else:
            lines.append(f"not among the model's top {len(ids)}")
        for tid, text, p in list(zip(ids, frame.top_k_text, frame.top_k_probabilities))[:5]:
            mark = "▸ " if tid == target else "&nbsp;&nbsp;"
            lines.append(f"{mark}{html.escape(repr(text))} &nbsp;{float(p):.1%}")
        return "<br>".join(lines)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt API
        anchor = self.anchorAt(event.position().toPoint())
        if anchor.startswith("tok:"):
            tip = self.token_tooltip(int(anchor[4:]))
            QToolTip.showText(event.globalPosition().toPoint() + QPoint(12, 12), tip, self)
        else:
            QToolTip.hideText()
        super().mouseMoveEvent(event)


# -------------------------------------------------------------- top-k panel
class TopKPanel(QWidget):
    """Horizontal bars of the next-token candidates with their text on the bars."""

    k_changed = Signal(int)

    #: Most candidates a frame records (the worker asks for this many).
    MAX_K = 20

    def __init__(self, parent: QWidget | None = None, k: int = 8) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        header = QHBoxLayout()
        self.title = QLabel("Next token")
        self.title.setObjectName("hint")
        header.addWidget(self.title)
        header.addStretch(1)
        header.addWidget(QLabel("k"))
        self.k_box = QSpinBox()
        self.k_box.setRange(1, self.MAX_K)
        self.k_box.setValue(k)
        self.k_box.setToolTip("How many candidates to show")
        header.addWidget(self.k_box)
        layout.addLayout(header)
        self.plot = pg.PlotWidget()
        self.plot.setMenuEnabled(False)
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
        self._last: tuple[int, int, int] | None = None
        self._recording: Recording | None = None
        self.k_box.valueChanged.connect(self._on_k_change)

    @property
    def k(self) -> int:
        """Number of bars shown."""
        return int(self.k_box.value())

    def _on_k_change(self, k: int) -> None:
        self._last = None
        if self._recording is not None and self._index >= 0:
            self.show_frame(self._recording, self._index)
        self.k_changed.emit(int(k))

    def show_frame(self, recording: Recording, index: int) -> None:
        """Bars of frame ``index``'s candidates (empty when ``index < 0``)."""
        self._recording, self._index = recording, index
        key = (id(recording), index, self.k)
        if key == self._last:
            return
        self._last = key
        k = self.k
        if index < 0:
            ids, probs, texts = np.zeros(0, int), np.zeros(0), ()
        else:
            frame = recording[index]
            ids = np.asarray(frame.top_k_ids)[:k]
            probs = np.asarray(frame.top_k_probabilities, dtype=float)[:k]
            texts = frame.top_k_text[:k]
            chosen = frame.predicted_token_id
            self.title.setText(f"Next token after #{frame.position}"
                               + ("" if frame.is_generation else " (reading the prompt)"))
        n = len(probs)
        y = -np.arange(n, dtype=float)
        brushes = [pg.mkBrush(theme.ACCENT if int(i) == chosen else "#2f6f8f") for i in ids] \
            if n else []
        self.bars.setOpts(x0=np.zeros(n), y=y, width=probs, height=0.72, brushes=brushes)
        for j, label in enumerate(self.labels):
            if j < n:
                shown = _visible_token_text(texts[j]).replace("\n", "⏎")
                label.setText(f"{shown!r}  {probs[j]:.1%}")
                label.setPos(0.01, y[j])
                label.setVisible(True)
            else:
                label.setVisible(False)
        self.plot.setYRange(-max(k, 1) + 0.5, 0.5, padding=0.02)
        self.plot.setXRange(0, 1, padding=0)
        self.plot.viewport().update()


# --------------------------------------------------------------- raster panel
class RasterPanel(QWidget):
    """A few hundred neurons' states over the last tokens up to the shown frame."""

    def __init__(self, parent: QWidget | None = None, rows: int = 256, window: int = 96) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.caption = QLabel("State raster: rates, not spikes")
        self.caption.setObjectName("hint")
        layout.addWidget(self.caption)
        self.plot = pg.PlotWidget()
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.setMinimumHeight(80)
        self.plot.getAxis("left").setLabel("neuron")
        self.plot.getAxis("bottom").setLabel("token")
        paint_on_demand(self.plot)
        layout.addWidget(self.plot, 1)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        self.rows = rows
        self.window = window
        self.neurons = np.zeros(0, dtype=np.int64)
        self._mode = "signed"
        self._limit = 1.0
        self._lut_mode = ""
        self._scale_source: Callable[[], tuple[str, float]] | None = None
        self._last: tuple[int, int] | None = None
        self._buffer = np.zeros((max(1, rows), window), dtype=np.float32)
        self.set_mode("signed", 1.0)

    def set_neurons(self, neurons: np.ndarray) -> None:
        """Choose which neurons are rows (an evenly spaced subset of the shown ones)."""
        neurons = np.asarray(neurons, dtype=np.int64)
        if neurons.size > self.rows:
            pick = np.linspace(0, neurons.size - 1, self.rows).round().astype(np.int64)
            neurons = neurons[pick]
        self.neurons = neurons
        self._buffer = np.zeros((max(1, neurons.size), self.window), dtype=np.float32)
        self.caption.setText(f"State raster: {neurons.size} neurons × last {self.window} tokens"
                             " (rates, not spikes)")
        self._last = None

    def set_mode(self, mode: str, limit: float) -> None:
        """Colour like the cloud: ``"signed"`` or ``"abs"`` with fixed levels."""
        from flyviz.render.colormaps import lut

        limit = max(float(limit), 1e-6)
        if (mode, limit) == (self._mode, self._limit) and self._lut_mode == mode:
            return
        self._mode, self._limit, self._lut_mode = mode, limit, mode
        table = lut(mode)
        rgb = np.clip(table[:, :3] * table[:, 3:4], 0, 1)
        self.image.setLookupTable((rgb * 255).astype(np.uint8))
        levels = (-self._limit, self._limit) if mode == "signed" else (0.0, self._limit)
        self.image.setLevels(levels)
        self.plot.viewport().update()
        self._last = None

    def follow_scale(self, source: Callable[[], tuple[str, float]] | None) -> None:
        """Take the colour mode and limit from ``source()`` at each refresh (the brain's)."""
        self._scale_source = source

    def show_frame(self, recording: Recording, index: int) -> None:
        """Columns are tokens ``index - window + 1 .. index``, newest on the right."""
        if self._scale_source is not None:
            self.set_mode(*self._scale_source())
        key = (id(recording), index)
        if key == self._last:
            return
        self._last = key
        buf = self._buffer
        buf.fill(0.0)
        count = 0
        if index >= 0 and self.neurons.size:
            start = max(0, index - self.window + 1)
            states = recording.states(self.neurons, start, index + 1)   # (tokens, rows)
            values = np.abs(states) if self._mode == "abs" else states
            count = values.shape[0]
            # Fill from the left until the window is full, then scroll: newest on the right.
            buf[:, :count] = values.T
        left = -0.5 if index + 1 <= self.window else index + 0.5 - self.window
        self.image.setImage(buf, autoLevels=False)
        self.image.setRect(left, 0, self.window, buf.shape[0])
        self.plot.setXRange(left, left + self.window, padding=0)
        self.plot.setYRange(0, buf.shape[0], padding=0)
        self.plot.viewport().update()


# --------------------------------------------------------------- trace panel
def _legend_html(entries: tuple[tuple[str, str], ...]) -> str:
    """One line naming each curve after a swatch of its colour."""
    return "&nbsp;&nbsp;&nbsp;".join(
        f"<span style='color:{colour}'>━━</span>&nbsp;<span style='color:{theme.TEXT}'>"
        f"{html.escape(name)}</span>" for name, colour in entries)


class TracePanel(QWidget):
    """Top-1 probability and mean |h| per token, with the shown token marked."""

    #: Emitted when the user clicks a token on the traces.
    token_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.plot = pg.PlotWidget()
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(True, False)
        self.plot.hideButtons()
        self.plot.getAxis("bottom").setLabel("token")
        self.plot.setMinimumHeight(80)
        # The legend is the plot's title row, above the data: a legend inside the plot
        # hid the curves where they run along the top (a confident model's probability).
        self.plot.setTitle(_legend_html((("top-1 probability", theme.VIOLET),
                                         ("mean |h|", theme.WARM))), size="9pt")
        self.legend = self.plot.getPlotItem().titleLabel
        self.plot.setYRange(0, 1, padding=0.03)
        self.probability = self.plot.plot([], [], pen=pg.mkPen(theme.VIOLET, width=2))
        self.mean_abs = self.plot.plot([], [], pen=pg.mkPen(theme.WARM, width=2))
        self.cursor = pg.InfiniteLine(angle=90, movable=False,
                                      pen=pg.mkPen(theme.ACCENT, width=1, style=Qt.PenStyle.DashLine))
        self.plot.addItem(self.cursor)
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
            self.plot.setXRange(0, max(n - 1, 1), padding=0.02)
        self.cursor.setVisible(index >= 0)
        self.cursor.setPos(max(index, 0))
        self.plot.viewport().update()

    def _on_click(self, event) -> None:
        if self._length <= 0:
            return
        point = self.plot.getPlotItem().vb.mapSceneToView(event.scenePos())
        self.token_clicked.emit(int(round(min(max(point.x(), 0), self._length - 1))))
