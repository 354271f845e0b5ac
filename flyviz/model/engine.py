"""The Fly LLM engine: :class:`Engine` steps a checkpoint one token at a time and takes
interventions as they are written.

The forward pass itself, its speed notes and its helpers live in
:mod:`flyviz.model.engine_core` (re-exported here: ``from flyviz.model.engine import
softmax`` keeps working). :class:`Engine` adds one thing to that core: it resolves
interventions (:func:`flyviz.model.interventions.resolve`) against its checkpoint. The
order of the imports is one way: the core, then the interventions (whose patches run
a source prompt on a core, :func:`flyviz.model.patching.source_states`), then this
module.
"""

from __future__ import annotations

from typing import Any

from flyviz.model.engine_core import (SINGLE_THREADED_BLAS, CsrRowBlock, EngineCore, as_f32,
                                      default_threads, softmax, split_rows, top_k)
from flyviz.model.interventions import ResolvedInterventions
from flyviz.model.interventions import resolve as resolve_interventions


class Engine(EngineCore):
    """Runs a :class:`~flyviz.model.checkpoint.Checkpoint` one token at a time.

    The parameters are :class:`~flyviz.model.engine_core.EngineCore`'s; ``interventions``
    may be written ones (:mod:`flyviz.model.interventions`), resolved here.
    """

    def set_interventions(self, interventions: Any) -> ResolvedInterventions:
        """Apply ``interventions`` from the next step on; return them resolved.

        Parameters
        ----------
        interventions
            A sequence of :class:`~flyviz.model.interventions.Silence`,
            ``Clamp``, ``Stimulate``, ``Cut``, ``Scale`` or
            :class:`~flyviz.model.patching.Patch` (query strings are resolved
            against this engine's checkpoint; a patch's source prompt is run
            untouched on it), an already
            :class:`~flyviz.model.interventions.ResolvedInterventions`, or an
            empty sequence / ``None`` for none. With none, a step is exactly
            the plain forward pass (the same code, bit for bit).

        Call it between runs or from the thread that steps the engine (a
        worker thread, say), not while another thread is in :meth:`step`.
        Everything is checked and precomputed here: the neuron index arrays,
        and for cuts and scales one copy of the graph's weights per
        combination of edits that is active at some token (laid out for the
        sparse kernel once), so that a step only switches between them.
        Positions in token windows count the steps since :meth:`reset`.

        Raises
        ------
        InputError
            For a bad or empty selection (nothing is changed then).
        """
        return super().set_interventions(
            resolve_interventions(self.checkpoint, interventions or ()))


__all__ = ["SINGLE_THREADED_BLAS", "CsrRowBlock", "Engine", "EngineCore", "as_f32",
           "default_threads", "softmax", "split_rows", "top_k"]
