"""The app's dark theme: a glowing brain reads best on near-black."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

#: Colours shared by Qt widgets, pyqtgraph panels and the vispy canvas.
BACKGROUND = "#0b0d12"
PANEL = "#12151c"
RAISED = "#1a1e27"
BORDER = "#262b36"
TEXT = "#d7dce5"
MUTED = "#7d8595"
ACCENT = "#4fd1c5"     # teal: live, selection, the newest token
WARM = "#f6ad55"       # amber: activity raster and traces
VIOLET = "#b794f4"     # the top-1 probability trace
PROMPT_TEXT = "#8f98aa"

#: The style sheet. Its ``:focus`` rules mark the control that has the keyboard: the
#: borders it sets replace the style's own focus frame, which left a keyboard user unable to
#: see which button, box or slider Tab had reached.
STYLE_SHEET = f"""
QMainWindow, QDialog {{ background: {BACKGROUND}; }}
QDockWidget {{ color: {TEXT}; font-weight: 600; }}
QDockWidget::title {{ background: {PANEL}; padding: 4px 8px; border-bottom: 1px solid {BORDER}; }}
QToolBar {{ background: {PANEL}; border: none; border-bottom: 1px solid {BORDER}; spacing: 6px;
           padding: 4px; }}
QStatusBar {{ background: {PANEL}; color: {MUTED}; border-top: 1px solid {BORDER}; }}
QStatusBar QLabel {{ color: {MUTED}; padding: 0 8px; }}
QLineEdit, QComboBox, QSpinBox, QDoubleSpinBox, QTextEdit, QPlainTextEdit, QTableWidget {{
    background: {RAISED}; color: {TEXT}; border: 1px solid {BORDER}; border-radius: 4px;
    padding: 3px 6px; selection-background-color: #2c6e68; }}
QComboBox#promptBox {{ font-size: 14px; padding: 5px 8px; }}
QPushButton, QToolButton {{ background: {RAISED}; color: {TEXT}; border: 1px solid {BORDER};
    border-radius: 4px; padding: 4px 10px; }}
QPushButton:hover, QToolButton:hover {{ border-color: {ACCENT}; }}
QTabBar QToolButton {{ padding: 0px; }}
QPushButton:checked, QToolButton:checked {{ background: #1f4d49; border-color: {ACCENT}; }}
QPushButton:disabled, QToolButton:disabled {{ color: #4a5060; }}
QPushButton#runButton {{ background: #1f4d49; border-color: {ACCENT}; font-weight: 600; }}
QLabel#overlay {{ color: {TEXT}; background: rgba(11, 13, 18, 170); padding: 4px 8px;
                  border-radius: 4px; }}
QLabel#hint {{ color: {MUTED}; }}
QSlider::groove:horizontal {{ height: 4px; background: {BORDER}; border-radius: 2px; }}
QSlider::sub-page:horizontal {{ background: {ACCENT}; border-radius: 2px; }}
QSlider::handle:horizontal {{ background: {TEXT}; width: 12px; margin: -5px 0; border-radius: 6px; }}
QPushButton:focus, QToolButton:focus, QLineEdit:focus, QComboBox:focus, QSpinBox:focus,
QDoubleSpinBox:focus, QTableWidget:focus {{ border-color: {ACCENT}; }}
QPushButton#runButton:focus {{ border-color: {TEXT}; }}
QCheckBox:focus, QRadioButton:focus {{ color: {ACCENT}; }}
QSlider::handle:horizontal:focus {{ background: {ACCENT}; }}
QLabel#result {{ border: 1px solid transparent; border-radius: 4px; }}
QLabel#result:focus {{ border-color: {ACCENT}; }}
QHeaderView::section {{ background: {PANEL}; color: {MUTED}; border: none; padding: 3px; }}
QTableWidget {{ gridline-color: {BORDER}; }}
QToolTip {{ background: {RAISED}; color: {TEXT}; border: 1px solid {BORDER}; }}
QMenu {{ background: {PANEL}; color: {TEXT}; border: 1px solid {BORDER}; }}
QMenu::item:selected {{ background: #1f4d49; }}
QMenuBar {{ background: {PANEL}; color: {TEXT}; }}
QMenuBar::item:selected {{ background: #1f4d49; }}
"""


def apply_dark_theme(app: QApplication) -> None:
    """Fusion style, a dark palette and the style sheet, for the whole application."""
    import pyqtgraph as pg

    app.setStyle("Fusion")
    palette = QPalette()
    roles = {
        QPalette.ColorRole.Window: BACKGROUND, QPalette.ColorRole.WindowText: TEXT,
        QPalette.ColorRole.Base: RAISED, QPalette.ColorRole.AlternateBase: PANEL,
        QPalette.ColorRole.ToolTipBase: RAISED, QPalette.ColorRole.ToolTipText: TEXT,
        QPalette.ColorRole.Text: TEXT, QPalette.ColorRole.Button: RAISED,
        QPalette.ColorRole.ButtonText: TEXT, QPalette.ColorRole.Highlight: "#2c6e68",
        QPalette.ColorRole.HighlightedText: "#ffffff", QPalette.ColorRole.Link: ACCENT,
        QPalette.ColorRole.PlaceholderText: MUTED,
    }
    for role, colour in roles.items():
        palette.setColor(role, QColor(colour))
    app.setPalette(palette)
    app.setStyleSheet(STYLE_SHEET)
    # No antialiasing: the panels repaint several times a second beside a software-
    # rendered brain, and smooth lines cost more CPU than they add here.
    pg.setConfigOptions(background=PANEL, foreground=MUTED, antialias=False)

@contextmanager
def dark_theme_applied(app: QApplication) -> Iterator[None]:
    """The dark theme inside a ``with`` block, the application's look put back after it
    (scripts and tests that picture the window as ``flyviz gui`` shows it)."""
    import pyqtgraph as pg

    keys = ("background", "foreground", "antialias")
    style, palette, sheet = app.style().name(), app.palette(), app.styleSheet()
    options = {key: pg.getConfigOption(key) for key in keys}
    apply_dark_theme(app)
    try:
        yield
    finally:
        app.setStyle(style)
        app.setPalette(palette)
        app.setStyleSheet(sheet)
        pg.setConfigOptions(**options)


#: A positive and a negative contribution (graph nodes, synapse lines): the flow colormap's
#: hues.
POSITIVE = (240, 50, 90)
NEGATIVE = (80, 90, 250)
