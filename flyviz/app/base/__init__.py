"""What every part of the app builds on: the theme, background jobs, actions, the wheel guard,
the protocol a feature sees of the window (:class:`~flyviz.app.base.host.WindowHost`), the
shown frame's Qt signals, the export jobs and the save dialogs' questions. Features
(``flyviz.app.<feature>``) import this package, never :mod:`flyviz.app.window`, the
composition root that assembles them."""
