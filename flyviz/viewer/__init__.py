"""The Qt-free viewer state: what every view of the brain shows (napari's ``components/``).

:class:`ViewerState` holds the model, the recording (or comparison), the shown
token, the colour layer and its range, the highlight, the selected and picked
neurons, the camera, the interventions and the display, run and mesh settings,
with validation and psygnal change signals. The Qt window binds its widgets
to one (``window.state``); :func:`flyviz.export.export_state` makes a movie of
one and :func:`flyviz.render.offscreen.render_state_image` renders one to an
image, without a window. Importing this package loads neither Qt nor vispy.

Threading rules (the app's; the README's *Architecture* section repeats them)
-----------------------------------------------------------------------------
1. **One owner thread.** A state and every Qt widget belong to the UI thread:
   only it sets fields, appends frames and receives the signals.
2. **Workers step the model, the UI reads frames.** While an engine worker
   steps a :class:`~flyviz.record.runner.Model`, the UI thread calls none of
   the model's stepping or state methods (``engine.step``, ``reset``,
   ``set_interventions``, ``run``): it reads only what is immutable for the
   model's life (``checkpoint``, ``config``, ``neurons``, ``name``,
   ``tokenizer``, ``drawing_anatomy()``) and the frames the worker hands over
   through queued Qt signals. Interventions and settings reach the worker as
   values with the next start command (:mod:`flyviz.app.runs.worker`).
3. **Exports read a frozen snapshot.** An export running off the UI thread
   reads :meth:`ViewerState.snapshot` (:meth:`flyviz.record.recording.Recording.snapshot`),
   never the recording a run still appends to.
4. **Every background shutdown has a timeout.** Joins of engine, loader,
   export and background threads wait at most
   :data:`flyviz.app.base.background.JOIN_TIMEOUT_S` and log the thread left
   running instead of hanging the window's close.
5. **One garbage-collection policy**, set once at app entry by
   :func:`flyviz.app.base.gc_policy.install_gc_policy`: Python's automatic
   collection is off and the UI thread collects once a second, so no
   collection starts in a worker and frees a Qt object there.
"""

from flyviz.viewer.highlight import Highlights
from flyviz.viewer.settings import DisplaySettings, MeshSettings, RunSettings, ViewerError
from flyviz.viewer.state import (COMPARE_MODES, STATE, ColourLayerEntry, ViewerEvents,
                                 ViewerState)

__all__ = ["COMPARE_MODES", "STATE", "ColourLayerEntry", "DisplaySettings", "Highlights",
           "MeshSettings", "RunSettings", "ViewerError", "ViewerEvents", "ViewerState"]
