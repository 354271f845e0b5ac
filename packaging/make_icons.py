"""Render assets/icons/flyviz.svg to the PNG sizes desktops expect.

Usage: ``python packaging/make_icons.py`` (writes packaging/linux/icons/hicolor/NxN/apps/org.flyviz.flyviz.png
and assets/icons/flyviz-256.png, the window icon).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ROOT = Path(__file__).resolve().parents[1]
APP_ID = "org.flyviz.flyviz"


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(str(ROOT / "assets" / "icons" / "flyviz.svg"))
    if not renderer.isValid():
        print("make_icons: cannot read assets/icons/flyviz.svg", file=sys.stderr)
        return 2
    for size in SIZES:
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
        painter.end()
        out = ROOT / "packaging" / "linux" / "icons" / "hicolor" / f"{size}x{size}" / "apps" / f"{APP_ID}.png"
        out.parent.mkdir(parents=True, exist_ok=True)
        image.save(str(out))
        if size == 256:
            image.save(str(ROOT / "assets" / "icons" / "flyviz-256.png"))
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
