"""The running text: prompt and continuation up to the shown frame, in whole characters.

A byte-level tokenizer can split one character (an accented letter, an emoji,
a curly quote) over two or more tokens; each of those tokens alone decodes to
"�". The panel therefore shows *pieces*: a token on its own, or the few tokens
that together make whole characters, decoded together. A piece enters the text
at the frame of its last token, live and when scrubbing alike, so a half
character is never shown.

The panel keeps its document and edits it where the text changed (new pieces
at the end, pieces cut when scrubbing back, the highlight moved), instead of
laying out the whole text again at each refresh.
"""

from __future__ import annotations

import bisect
import html
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QPoint, Signal
from PySide6.QtGui import (QAction, QColor, QContextMenuEvent, QFont, QMouseEvent, QResizeEvent,
                           QTextBlockFormat, QTextCharFormat, QTextCursor)
from PySide6.QtWidgets import QAbstractScrollArea, QTextBrowser, QToolTip, QWidget

from flyviz.app.language.compare_views import comparison_html, visible_token_text
from flyviz.app.base import theme
from flyviz.kinds.language import EOS_SHOWN, EOS_TEXT
from flyviz.record.frame import PHASE_GENERATION
from flyviz.record.recording import Recording

#: Most pieces the panel lays out at once (the newest ones).
MAX_TEXT_PIECES = 1500

#: Tokens that make no text.
SPECIAL_TOKENS = frozenset({"<s>", "<pad>", "</s>"})
_REPLACEMENT = "\ufffd"


@dataclass(frozen=True)
class TextToken:
    """One token of the running text.

    Parameters
    ----------
    text
        Display text of the token on its own.
    generated
        True for model output, False for the prompt.
    appears_at
        Index of the first frame at which it is part of the text.
    scored_by
        Index of the frame whose prediction it answers (``-1`` for the first
        prompt token, which nothing predicted).
    token_id
        The token's id (``-1`` when unknown).
    """

    text: str
    generated: bool
    appears_at: int
    scored_by: int
    token_id: int = -1


@dataclass(frozen=True)
class TextPiece:
    """Whole characters made by tokens ``first..last`` (usually one token)."""

    text: str
    generated: bool
    appears_at: int
    first: int
    last: int


#: From this many new frames on, the text is read column by column (no frame states).
_BULK_FRAMES = 32


def _token_columns(recording: Recording, start: int):
    """(phase, input text, input id, predicted text, predicted id) of frames ``start:``."""
    if len(recording) - start >= _BULK_FRAMES:
        # A whole (possibly lazily loaded) recording: read its columns, not every state.
        return list(zip(recording.phases[start:], recording.token_texts[start:],
                        recording.token_ids[start:].tolist(), recording.predicted_texts[start:],
                        recording.predicted_ids[start:].tolist()))
    frames = (recording[i] for i in range(start, len(recording)))
    return [(f.phase, f.input_text, f.input_token_id, f.predicted_text, f.predicted_token_id)
            for f in frames]


def text_tokens(recording: Recording, start: int = 0) -> list[TextToken]:
    """Tokens of the running text contributed by frames ``start:`` of ``recording``.

    A prompt token enters the text when a frame consumes it; a generated token
    enters when the frame that predicted it is produced (the next frame's
    input is that same token and adds nothing).
    """
    tokens: list[TextToken] = []
    seen_generation = start > 0 and recording[start - 1].phase == PHASE_GENERATION
    for i, (phase, input_text, input_id, predicted_text, predicted_id) in enumerate(
            _token_columns(recording, start), start=start):
        if not seen_generation or phase != PHASE_GENERATION:
            if not (i == 0 and input_text in SPECIAL_TOKENS):
                tokens.append(TextToken(input_text, False, i, i - 1, int(input_id)))
        if phase == PHASE_GENERATION:
            seen_generation = True
            tokens.append(TextToken(predicted_text, True, i, i, int(predicted_id)))
    return tokens


class PieceBuilder:
    """Groups tokens into :class:`TextPiece` objects of whole characters.

    Parameters
    ----------
    decode
        ``decode(ids) -> str`` of the model's tokenizer; ``None`` shows every
        token on its own.
    """

    #: Tokens waiting for the rest of a character at most; past that the bytes are shown.
    MAX_PENDING = 8

    def __init__(self, decode: Callable[[list[int]], str] | None) -> None:
        self._decode = decode
        self._pending: list[tuple[int, TextToken]] = []

    def add(self, k: int, token: TextToken) -> list[TextPiece]:
        """Token number ``k``; returns the pieces it completes (none while a character is open)."""
        done: list[TextPiece] = []
        alone = (self._decode is None or token.token_id < 0 or token.text in SPECIAL_TOKENS)
        if self._pending and (alone or token.generated != self._pending[0][1].generated):
            done.append(self._flush())
        if alone or (not self._pending and _REPLACEMENT not in token.text):
            done.append(TextPiece(token.text, token.generated, token.appears_at, k, k))
            return done
        self._pending.append((k, token))
        assert self._decode is not None  # not alone: there is a decoder
        text = self._decode([t.token_id for _, t in self._pending])
        if text.endswith(_REPLACEMENT) and len(self._pending) < self.MAX_PENDING:
            return done                               # the character goes on in the next token
        done.append(self._flush(text))
        return done

    def _flush(self, text: str | None = None) -> TextPiece:
        pending, self._pending = self._pending, []
        if text is None:
            assert self._decode is not None  # only decoded tokens are ever pending
            text = self._decode([t.token_id for _, t in pending])
        last = pending[-1][1]
        return TextPiece(text, last.generated, last.appears_at, pending[0][0], pending[-1][0])


class TextPanel(QTextBrowser):
    """Prompt and continuation up to the shown frame, newest piece highlighted.

    Hovering a piece shows the probability the model gave its tokens and the
    model's top candidates at that point.

    Signals
    -------
    why_requested(frame)
        *Why this token?* was chosen on a generated piece: the frame whose
        prediction it is.
    """

    why_requested = Signal(int)

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
        self._decode: Callable[[list[int]], str] | None = None
        self._placeholder = "Type a prompt above and press Enter."
        self._formats = self._make_formats()
        #: Flow of the token read at each input position (the *Why?* shading), or None.
        self._flows: list[float] | None = None
        self._flow_limit = 0.0
        self._last_index = -1
        self._reset(None)
        self.show_text_placeholder()

    def focusNextPrevChild(self, next: bool) -> bool:  # noqa: N802, A002 (Qt's names)
        """Tab goes on to the next control. A browser steps through its links on Tab, and
        every word here is one (for its hover and its Why?), so the keyboard was held in
        the panel word by word; the shown word's Why? is the W key."""
        return QAbstractScrollArea.focusNextPrevChild(self, next)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        """Keep following the end of the text when the panel gets shorter: the shown token
        is the last piece, and a dock shrunk under it (Why? opening the Graph dock) left it
        below the fold."""
        bar = self.verticalScrollBar()
        following = bar.value() >= bar.maximum()
        super().resizeEvent(event)
        if following:
            bar.setValue(bar.maximum())

    # ------------------------------------------------------------ model of the text
    def set_decoder(self, decode: Callable[[list[int]], str] | None) -> None:
        """How token ids become text (the model tokenizer's ``decode``)."""
        self._decode = decode
        self._reset(None)

    def _reset(self, recording: Recording | None) -> None:
        self._recording = recording
        self._tokens: list[TextToken] = []
        self._pieces: list[TextPiece] = []
        self._appears: list[int] = []
        self._builder = PieceBuilder(self._decode)
        self._scanned = 0
        self._shown_index = -2
        self._doc_first = -1          # first piece in the document; -1: no pieces in it
        self._doc_ends: list[int] = []  # document position where each piece in it ends
        self._doc_start = 0           # where the first piece starts (after the "… " mark)
        self._highlighted = -1

    def tokens(self) -> list[TextToken]:
        """Every token of the current recording known so far."""
        return self._tokens

    def pieces(self) -> list[TextPiece]:
        """Every complete piece of the current recording known so far."""
        return self._pieces

    def _scan(self, recording: Recording) -> None:
        if recording is not self._recording:
            self._reset(recording)
        if len(recording) > self._scanned:
            for token in text_tokens(recording, self._scanned):
                for piece in self._builder.add(len(self._tokens), token):
                    self._pieces.append(piece)
                    self._appears.append(piece.appears_at)
                self._tokens.append(token)
            self._scanned = len(recording)

    # ------------------------------------------------------------ showing a frame
    def show_text_placeholder(self, message: str | None = None) -> None:
        """Show a hint instead of text (no recording yet)."""
        if message is not None:
            self._placeholder = message
        self.setHtml(f"<p style='color:{theme.MUTED}'>{html.escape(self._placeholder)}</p>")
        self._doc_first, self._doc_ends, self._highlighted = -1, [], -1
        self._shown_index = -2

    def show_frame(self, recording: Recording, index: int) -> None:
        """Show the text as it stood at frame ``index`` (both texts for a comparison)."""
        if recording.baseline is not None and index >= 0:
            self._show_comparison(recording, index)
            return
        self._compared_at: tuple[int, int, int] | None = None
        self._scan(recording)
        if index == self._shown_index:
            return
        self._shown_index = index
        self._last_index = index
        if index < 0:
            self.show_text_placeholder()
            return
        count = bisect.bisect_right(self._appears, index)
        # Very long runs show their tail: thousands of pieces cost more than they show.
        first = max(0, count - MAX_TEXT_PIECES)
        self._show_pieces(first, count)
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _show_comparison(self, recording: Recording, index: int) -> None:
        key = (id(recording), index, len(recording))
        if key == getattr(self, "_compared_at", None):
            return
        self._reset(None)                      # the next single run rebuilds its document
        self._compared_at = key
        self.setHtml(comparison_html(recording, index))
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _show_pieces(self, first: int, count: int) -> None:
        shown_first, shown_count = self._doc_first, self._doc_first + len(self._doc_ends)
        if self._doc_first < 0 or first < shown_first or first >= max(shown_count, shown_first + 1):
            self._rebuild(first, count)
            return
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        if first > shown_first:                       # the tail window moved on: cut the front
            cut = self._doc_ends[first - shown_first - 1] - self._doc_start
            cursor.setPosition(self._doc_start)
            cursor.setPosition(self._doc_start + cut, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
            self._doc_ends = [end - cut for end in self._doc_ends[first - shown_first:]]
            self._doc_first = first
            if shown_first == 0:
                self._insert_ellipsis(cursor)
        kept = count - self._doc_first
        if kept < len(self._doc_ends):                # scrubbed back: cut the end
            cursor.setPosition(self._doc_ends[kept - 1] if kept > 0 else self._doc_start)
            cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
            del self._doc_ends[kept:]
        for k in range(self._doc_first + len(self._doc_ends), count):
            self._append_piece(cursor, k)
        self._move_highlight(cursor, count - 1)
        cursor.endEditBlock()

    def _rebuild(self, first: int, count: int) -> None:
        self.clear()
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        block = QTextBlockFormat()
        block.setLineHeight(140.0, QTextBlockFormat.LineHeightTypes.ProportionalHeight.value)
        cursor.setBlockFormat(block)
        self._doc_first, self._doc_ends, self._highlighted = first, [], -1
        self._doc_start = 0
        if first:
            self._insert_ellipsis(cursor)
        for k in range(first, count):
            self._append_piece(cursor, k)
        self._move_highlight(cursor, count - 1)
        cursor.endEditBlock()

    def _insert_ellipsis(self, cursor: QTextCursor) -> None:
        cursor.setPosition(0)
        cursor.insertText("… ", self._formats["muted"])
        shift = cursor.position()
        self._doc_start = shift
        self._doc_ends = [end + shift for end in self._doc_ends]

    def _append_piece(self, cursor: QTextCursor, k: int) -> None:
        cursor.movePosition(QTextCursor.MoveOperation.End)
        text, fmt = self._piece_look(k, highlighted=False)
        cursor.insertText(text, fmt)
        self._doc_ends.append(cursor.position())

    def _move_highlight(self, cursor: QTextCursor, k: int) -> None:
        if self._highlighted == k:
            return
        for piece, lit in ((self._highlighted, False), (k, True)):
            j = piece - self._doc_first
            if piece < 0 or not 0 <= j < len(self._doc_ends):
                continue
            start = self._doc_ends[j - 1] if j > 0 else self._doc_start
            cursor.setPosition(start)
            cursor.setPosition(self._doc_ends[j], QTextCursor.MoveMode.KeepAnchor)
            cursor.setCharFormat(self._piece_look(piece, lit)[1])
        self._highlighted = k

    def _piece_look(self, k: int, highlighted: bool) -> tuple[str, QTextCharFormat]:
        piece = self._pieces[k]
        if piece.generated and piece.text == EOS_TEXT:
            # The shared page's text line shows the end the same way (EOS_SHOWN).
            text, fmt = EOS_SHOWN.replace(" ", "\u00a0"), QTextCharFormat(self._formats["end"])
        else:
            text = visible_token_text(piece.text)
            fmt = QTextCharFormat(self._formats["generated" if piece.generated else "prompt"])
        fmt.setAnchor(True)
        fmt.setAnchorHref(f"tok:{k}")
        if highlighted:
            fmt.setBackground(QColor(theme.ACCENT))
            fmt.setForeground(QColor(theme.BACKGROUND))
        else:
            shade = self.piece_shade(k)
            if shade is not None:
                fmt.setBackground(shade)
                fmt.setForeground(QColor(theme.TEXT))      # readable on the shade
        return text, fmt

    # ------------------------------------------------------------ flows (Why?)
    @staticmethod
    def token_position(token: TextToken) -> int:
        """The input position at which ``token`` is read: a prompt token at the frame that
        consumes it, a generated one at the frame after the one that predicted it."""
        return token.appears_at + 1 if token.generated else token.appears_at

    def set_flows(self, flows: "list[float] | None") -> None:
        """Shade each input token by its flow (``flows[p]``: the token read at position
        ``p``, in units of L; red adds to L, blue takes from it); ``None`` clears."""
        self._flows = None if flows is None else [float(f) for f in flows]
        self._flow_limit = max((abs(f) for f in self._flows), default=0.0) if self._flows else 0.0
        if self._recording is not None and self._last_index >= 0:
            recording, index = self._recording, self._last_index
            self._doc_first, self._shown_index = -1, -2    # restyle every piece
            self.show_frame(recording, index)

    def piece_flow(self, k: int) -> float | None:
        """The flow of piece ``k``'s tokens (summed), or None when none of them was traced."""
        if self._flows is None or not 0 <= k < len(self._pieces):
            return None
        piece = self._pieces[k]
        values = [self._flows[p] for p in (self.token_position(t)
                                           for t in self._tokens[piece.first:piece.last + 1])
                  if 0 <= p < len(self._flows)]
        return float(sum(values)) if values else None

    def piece_shade(self, k: int) -> QColor | None:
        """The background of piece ``k``: its flow's sign in hue, ``|flow|`` in opacity."""
        flow = self.piece_flow(k)
        if flow is None or self._flow_limit <= 0.0:
            return None
        strength = min(1.0, abs(flow) / self._flow_limit)
        colour = QColor(220, 40, 70) if flow > 0 else QColor(70, 90, 240)
        colour.setAlpha(int(round(30 + 200 * strength)))
        return colour

    @staticmethod
    def _make_formats() -> dict[str, QTextCharFormat]:
        formats = {}
        for name, colour in (("generated", theme.TEXT), ("prompt", theme.PROMPT_TEXT),
                             ("muted", theme.MUTED), ("end", theme.MUTED)):
            fmt = QTextCharFormat()
            fmt.setForeground(QColor(colour))
            formats[name] = fmt
        formats["end"].setFontPointSize(10)
        return formats

    # ------------------------------------------------------------ hovering
    def piece_tooltip(self, k: int) -> str:
        """Tooltip of piece ``k``: the probability of its tokens and the top candidates."""
        if self._recording is None or not 0 <= k < len(self._pieces):
            return ""
        piece = self._pieces[k]
        label = "generated" if piece.generated else "prompt"
        tokens = self._tokens[piece.first:piece.last + 1]
        lines = [f"<b>{html.escape(repr(piece.text))}</b> &nbsp;({label}"
                 + (f", {len(tokens)} tokens" if len(tokens) > 1 else "") + ")"]
        flow = self.piece_flow(k)
        if flow is not None:
            lines.append(f"flow {flow:+.4f} (units of L)")
        for token in tokens:
            lines.extend(self._token_lines(token, several=len(tokens) > 1))
        return "<br>".join(lines)

    def _token_lines(self, token: TextToken, several: bool) -> list[str]:
        lines = [f"token {html.escape(repr(token.text))}:"] if several else []
        if token.scored_by < 0:
            return lines + ["first token: nothing predicted it"]
        recording = self._recording
        assert recording is not None  # tooltips exist only for a shown recording
        frame = recording[token.scored_by]
        ids = [int(i) for i in frame.top_k_ids]
        target = frame.predicted_token_id if token.generated else (
            recording[token.appears_at].input_token_id)
        if token.generated:
            lines.append(f"probability {frame.probability:.1%}")
        elif target in ids:
            lines.append(f"the model gave it {float(frame.top_k_probabilities[ids.index(target)]):.1%}")
        else:
            lines.append(f"not among the model's top {len(ids)}")
        if not several:
            for tid, text, p in list(zip(ids, frame.top_k_text, frame.top_k_probabilities))[:5]:
                mark = "▸ " if tid == target else "&nbsp;&nbsp;"
                lines.append(f"{mark}{html.escape(repr(text))} &nbsp;{float(p):.1%}")
        return lines

    def why_frame(self, k: int) -> int | None:
        """The frame that predicted generated piece ``k`` (its last token), or None."""
        if not 0 <= k < len(self._pieces) or not self._pieces[k].generated:
            return None
        return self._tokens[self._pieces[k].last].scored_by

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:  # noqa: N802 - Qt API
        menu = self.createStandardContextMenu(event.pos())
        anchor = self.anchorAt(event.pos())
        frame = self.why_frame(int(anchor[4:])) if anchor.startswith("tok:") else None
        if frame is not None:
            first = menu.actions()[0] if menu.actions() else None
            action = QAction("Why this token?", menu)
            action.triggered.connect(lambda _c=False, f=frame: self.why_requested.emit(f))
            if first is None:
                menu.addAction(action)
            else:
                menu.insertAction(first, action)
                menu.insertSeparator(first)
        menu.exec(event.globalPos())
        menu.deleteLater()

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt API
        anchor = self.anchorAt(event.position().toPoint())
        if anchor.startswith("tok:"):
            tip = self.piece_tooltip(int(anchor[4:]))
            QToolTip.showText(event.globalPosition().toPoint() + QPoint(12, 12), tip, self)
        else:
            QToolTip.hideText()
        super().mouseMoveEvent(event)
