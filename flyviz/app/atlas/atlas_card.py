"""The atlas card in the Inspector: what one neuron responds to across a whole corpus.

A :class:`~flyviz.analysis.atlas.NeuronCard` shown as a compact panel: the
summary statistics, the histogram of the neuron's values, its top contexts as
text with the activating token highlighted and its value, the quantile samples
(when the atlas keeps them), the tokens that drive it most, and the tokens its
direct readout effect promotes and suppresses. A driving token is a link:
clicking it asks for every neuron that token drives (*Find neurons*).

The card reads nothing itself: it is handed an :class:`~flyviz.analysis.atlas.Atlas`
(or ``None``) and a neuron, and a card lookup takes a few milliseconds (one
chunk of 1,024 neurons, cached by the atlas).
"""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QLabel, QSizePolicy, QVBoxLayout, QWidget

from flyviz.analysis.atlas import Atlas, Context, NeuronCard, TokenScore
from flyviz.app.base import theme
from flyviz.app.base.plots import PlotWidget
from flyviz.app.population.plot_axes import paint_on_demand
from flyviz.model.errors import FlyvizError

#: Background of the activating token in a context (amber: the activity colour).
TOKEN_HIGHLIGHT = theme.WARM

#: Text colour on the highlight.
TOKEN_HIGHLIGHT_TEXT = theme.BACKGROUND

#: Links in the token lists: ``token:<id>`` asks for the neurons that token drives.
TOKEN_LINK = "token:"


def _visible(text: str) -> str:
    """Context text for one line: newlines shown as ⏎, tabs as →."""
    return text.replace("\r", "").replace("\n", "⏎ ").replace("\t", "→")


def context_html(context: Context) -> str:
    """One context as HTML: its value, then the text with the activating token highlighted."""
    a, b = context.span
    text = context.text
    before, here, after = (html.escape(_visible(part)) for part in
                           (text[:a], text[a:b], text[b:]))
    mark = (f'<span style="background-color:{TOKEN_HIGHLIGHT}; color:{TOKEN_HIGHLIGHT_TEXT};">'
            f"{here or '∅'}</span>")
    # A quantile sample from beyond its band's values (a fill-in) says so.
    outside = (f' <i style="color:{theme.MUTED};">(outside the band)</i>'
               if context.outside else "")
    return (f'<tr><td style="color:{theme.WARM}; padding-right:6px;" align="right">'
            f"{context.value:+.3f}</td><td>{before}{mark}{after}{outside}</td></tr>")


def token_label(text: str) -> str:
    """A token as the user reads it: quoted, with spaces and newlines visible."""
    return repr(text)


def tokens_html(scores: list[TokenScore], links: bool = False, counts: bool = False) -> str:
    """A token list as HTML; ``links`` makes each token a ``token:<id>`` link."""
    if not scores:
        return f'<span style="color:{theme.MUTED};">none</span>'
    parts = []
    for score in scores:
        name = html.escape(token_label(score.text))
        if links:
            name = (f'<a href="{TOKEN_LINK}{score.token_id}" style="color:{theme.ACCENT};">'
                    f"{name}</a>")
        count = f" ×{score.count:,}" if counts and score.count is not None else ""
        parts.append(f'{name}&nbsp;<span style="color:{theme.MUTED};">'
                     f"{score.value:+.3f}{count}</span>")
    return " · ".join(parts)


def atlas_name(atlas: Atlas) -> str:
    """How to name an atlas: its folder, with the parent's name for a folder called
    ``atlas`` (the demo brain's is ``demo/atlas``)."""
    path = atlas.path
    return f"{path.parent.name}/{path.name}" if path.name == "atlas" else path.name


def summary_text(card: NeuronCard) -> str:
    """The card's statistics in two lines."""
    return (f"mean {card.mean:+.3f} · std {card.std:.3f} · max {card.max:+.3f}\n"
            f"active {card.density:.1%} (|x| ≥ {card.density_threshold:g}) · "
            f"selectivity {card.selectivity:+.2f}")


class AtlasCard(QWidget):
    """The picked neuron's atlas card (hidden while no atlas is open or no neuron picked).

    Signals
    -------
    token_requested(token_id)
        The user clicked a driving token: find the neurons it drives.
    """

    token_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 6, 0, 0)
        self.title = QLabel("<b>Atlas</b>")
        layout.addWidget(self.title)
        self.note = QLabel("")
        self.note.setObjectName("hint")
        self.note.setWordWrap(True)
        layout.addWidget(self.note)
        self.summary = self._text_label(rich=False)
        layout.addWidget(self.summary)
        self.contexts = self._text_label()
        layout.addWidget(self.contexts)
        self.tokens = self._text_label()
        self.tokens.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.tokens.linkActivated.connect(self._on_link)
        self.tokens.setToolTip("Click a driving token to find every neuron it drives")
        layout.addWidget(self.tokens)
        self.histogram = PlotWidget(enableMenu=False)   # no menu, none built
        self.histogram.setFixedHeight(76)
        self.histogram.hideButtons()
        self.histogram.setMouseEnabled(False, False)
        self.histogram.getAxis("bottom").setLabel("x over the corpus")
        self.histogram.getAxis("left").setStyle(showValues=False)
        self.histogram.setXRange(-1.0, 1.0, padding=0.02)
        self.bars = pg.BarGraphItem(x=[0.0], height=[0.0], width=0.04,
                                    brush=pg.mkBrush(theme.WARM), pen=pg.mkPen(None))
        self.histogram.addItem(self.bars)
        self.mean_line = pg.InfiniteLine(angle=90, movable=False,
                                         pen=pg.mkPen(theme.ACCENT, style=Qt.PenStyle.DashLine))
        self.histogram.addItem(self.mean_line)
        paint_on_demand(self.histogram)
        layout.addWidget(self.histogram)
        self.samples = self._text_label()
        layout.addWidget(self.samples)
        self.atlas: Atlas | None = None
        self.card: NeuronCard | None = None
        self._pending: int | None = None
        self._fill_timer = QTimer(self)
        self._fill_timer.setSingleShot(True)
        self._fill_timer.setInterval(0)
        self._fill_timer.timeout.connect(self._fill)
        self.set_atlas(None)

    @staticmethod
    def _text_label(rich: bool = True) -> QLabel:
        label = QLabel("")
        label.setWordWrap(True)
        label.setTextFormat(Qt.TextFormat.RichText if rich else Qt.TextFormat.PlainText)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        return label

    # ------------------------------------------------------------ state
    def set_atlas(self, atlas: Atlas | None) -> None:
        """Read cards from ``atlas``; without one the card is hidden."""
        self.atlas = atlas
        self.card = None
        self._pending = None
        self._fill_timer.stop()
        self.setVisible(False)
        if atlas is not None:
            corpus = atlas.info.get("corpus", {})
            tokens = corpus.get("tokens") if isinstance(corpus, dict) else None
            over = f" · {int(tokens):,} corpus tokens" if isinstance(tokens, int) else ""
            self.title.setText(f"<b>Atlas</b> <span style='color:{theme.MUTED};'>"
                               f"{html.escape(atlas_name(atlas))}{over}</span>")

    def show_neuron(self, neuron: int | None) -> None:
        """Show ``neuron``'s card from the atlas (``None``: nothing picked).

        The card is read and laid out just after the current event (a click)
        is handled, so the brain shows the selection first; several picks in a
        row read only the last one's card.
        """
        if self.atlas is None:
            return
        self._pending = neuron
        if neuron is None:
            self._fill_timer.stop()
            self.card = None
            self.setVisible(False)
            return
        self._fill_timer.start()

    @property
    def pending(self) -> bool:
        """True while a picked neuron's card is still to be shown."""
        return self._fill_timer.isActive()

    def _fill(self) -> None:
        neuron = self._pending
        if self.atlas is None or neuron is None:
            return
        try:
            card = self.atlas.card(int(neuron))
        except FlyvizError as exc:
            self.card = None
            self._show_note(str(exc))
            return
        except Exception as exc:  # a damaged chunk of the store: say so, keep the app up
            self.card = None
            self._show_note(f"cannot read neuron {neuron} from the atlas "
                            f"({type(exc).__name__}: {str(exc)[:100]})")
            return
        self.show_card(card)

    def show_card(self, card: NeuronCard) -> None:
        """Fill the card from ``card``."""
        self.card = card
        self.setVisible(True)
        self.note.setVisible(False)
        self.summary.setText(summary_text(card) + f"\nover {card.count:,} positions")
        counts = np.asarray(card.histogram, dtype=float)
        edges = np.asarray(card.histogram_edges, dtype=float)
        self.bars.setOpts(x=(edges[:-1] + edges[1:]) / 2, height=counts,
                          width=float(edges[1] - edges[0]))
        self.histogram.setYRange(0.0, max(1.0, float(counts.max(initial=0.0))), padding=0.05)
        self.mean_line.setPos(card.mean)
        rows = "".join(context_html(c) for c in card.top_contexts)
        self.contexts.setText(f"<b>Top contexts</b><table cellspacing='2'>{rows}</table>"
                              if rows else "<b>Top contexts</b><br>none")
        bands = []
        for (lo, hi), found in card.quantile_samples:
            if found:
                bands.append(f"<i>{lo:.1%} – {hi:.1%}</i><table cellspacing='2'>"
                             + "".join(context_html(c) for c in found) + "</table>")
        self.samples.setText("<b>Samples by quantile</b><br>" + "".join(bands) if bands else "")
        self.tokens.setText(
            f"<b>Driving tokens</b> (mean h when read)<br>"
            f"{tokens_html(card.driving_tokens, links=True, counts=True)}<br>"
            f"<b>Promotes</b> (logit per unit h)<br>{tokens_html(card.promoted_tokens)}<br>"
            f"<b>Suppresses</b><br>{tokens_html(card.suppressed_tokens)}")
        for widget in (self.summary, self.histogram, self.contexts, self.tokens):
            widget.setVisible(True)
        self.samples.setVisible(bool(bands))
        self.histogram.viewport().update()

    def _show_note(self, text: str) -> None:
        self.setVisible(True)
        self.note.setText(text)
        self.note.setVisible(True)
        for widget in (self.summary, self.histogram, self.contexts, self.samples, self.tokens):
            widget.setVisible(False)

    def _on_link(self, link: str) -> None:
        if link.startswith(TOKEN_LINK):
            try:
                self.token_requested.emit(int(link[len(TOKEN_LINK):]))
            except ValueError:
                pass
