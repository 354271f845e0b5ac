"""flyviz in napari: a reader for ``.flyrec`` files and atlas stores, and a dock widget.

Installed with ``pip install 'flyviz[napari]'``; napari finds it through the
``napari.manifest`` entry point (``flyviz/napari/napari.yaml``)::

    import napari

    viewer = napari.Viewer()
    viewer.open("run.flyrec", plugin="flyviz")   # the brain, coloured at the token slider
    napari.run()

or ``napari run.flyrec`` from a shell. The pieces:

:mod:`flyviz.napari._reader`
    ``get_reader``: the brain as a 3-D Points layer at the somas, the
    neurons' labels as ``features``, coloured by the state at the token of
    the dims slider; a comparison adds a Δx layer; an atlas's statistics
    become features (colour by them in napari's layer controls).
:mod:`flyviz.napari._layers`
    The layers and the binding that recolours them on napari's dims event.
:mod:`flyviz.napari._widget`
    ``FlyvizWidget``: load a model, run a prompt into a new layer (off the UI
    thread), choose the colour quantity, read the token at the slider.

What the layers show is a :class:`~flyviz.viewer.state.ViewerState` (the one the window,
movies and the notebook render), read through :class:`flyviz.brain_source.BrainSource`.
"""

from __future__ import annotations

from typing import Any

from flyviz.errors import MissingDependencyError


def require_napari() -> Any:
    """The napari module, or :class:`MissingDependencyError` naming ``pip install 'flyviz[napari]'``."""
    try:
        import napari
    except ImportError:
        raise MissingDependencyError.for_feature("the napari plugin", "napari", "napari") from None
    return napari


def view(path: str, model: Any = None) -> Any:
    """Open a ``.flyrec`` file or an atlas folder in a new napari viewer, with the flyviz widget.

    Returns the viewer (call ``napari.run()`` to show it outside IPython).
    """
    napari = require_napari()
    from flyviz.brain_source import BrainSource
    from flyviz.napari._widget import FlyvizWidget, add_source

    viewer = napari.Viewer()
    add_source(viewer, BrainSource.open(path, model=model))
    viewer.window.add_dock_widget(FlyvizWidget(viewer), name="flyviz", area="right")
    return viewer
