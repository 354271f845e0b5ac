"""The Qt desktop application (PySide6, vispy, pyqtgraph).

Nothing outside this package imports Qt: :mod:`flyviz.model` and
:mod:`flyviz.record` stay usable from scripts and notebooks. The main pieces:

:mod:`flyviz.app.main_window`
    The window, its docks, actions and shortcuts.
:mod:`flyviz.app.worker`
    The engine thread and the background model loader.
:mod:`flyviz.app.session`
    The recording every view reads and the frame it shows.
:mod:`flyviz.app.brain_view`, :mod:`flyviz.app.panels`, :mod:`flyviz.app.inspector`
    The views.
"""
