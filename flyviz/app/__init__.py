"""The Qt desktop application (PySide6, vispy, pyqtgraph).

Nothing outside this package imports Qt: :mod:`flyviz.model` and
:mod:`flyviz.record` stay usable from scripts and notebooks. The main pieces:

:mod:`flyviz.app.window.main_window`
    The window: which widget goes in which dock, which action goes where.
:mod:`flyviz.app.runs.run_control`
    Runs, pauses, steps, replays and scrubbing, without a window.
:mod:`flyviz.app.runs.model_control`
    Loading a model and preparing it off the UI thread.
:mod:`flyviz.app.window.display`
    Keeps the brain and the panels on the shown frame, at display rate.
:mod:`flyviz.app.base.actions`, :mod:`flyviz.app.window.window_layout`
    Commands, shortcuts and menus; docks and a window that fits the screen.
:mod:`flyviz.app.window.files`, :mod:`flyviz.app.window.dialogs`
    Recordings, screenshots and movies; the small dialogs.
:mod:`flyviz.app.runs.worker`
    The engine thread.
:mod:`flyviz.app.base.session`
    The Qt signals of the viewer state's recording and shown frame
    (the state itself, :mod:`flyviz.viewer`, is Qt-free).
:mod:`flyviz.app.base.host`, :mod:`flyviz.app.window.window_features`
    The :class:`~flyviz.app.base.host.WindowHost` protocol features are installed
    against (the state, the loaded model and services; no widget), and the window's
    side of it (:class:`~flyviz.app.base.docks.Docks`, the feature registry).
:mod:`flyviz.app.base.gc_policy`
    The one garbage-collection policy, set at app entry.
:mod:`flyviz.app.brain.brain_view`, :mod:`flyviz.app.language.panels`, :mod:`flyviz.app.brain.inspector`,
:mod:`flyviz.app.runs.model_panel`
    The views.
"""
