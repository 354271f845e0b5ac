"""What one run is given, for any kind of model (no Qt): :class:`RunRequest`.

It lives apart from :mod:`flyviz.runs`, which steps runs, so that the kinds
(:meth:`ModelKind.run_request <flyviz.kinds.ModelKind.run_request>`,
:meth:`~flyviz.kinds.ModelKind.prepare_run`) speak of requests without importing the
machinery that calls them; :mod:`flyviz.runs` offers it under its own name too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["RunRequest"]


@dataclass(frozen=True)
class RunRequest:
    """What one run is given, for any kind of model.

    Parameters
    ----------
    given
        What the run reads: the prompt (the Fly LLM), a
        :class:`~flyviz.kinds.spiking.Stimulus` (the spiking brain); ``None``: the
        kind's default.
    settings
        The kind's settings of a run (:class:`~flyviz.record.run.GenerationSettings`,
        :class:`~flyviz.kinds.spiking.BinSettings`); ``None``: the kind's default.
    interventions
        Interventions for this run (kinds that take them), in any form the kind accepts.
    compare
        Compare the run with the untouched one in this mode (``"forced"`` or ``"free"``;
        the Fly LLM): one recording holds both, ``None`` runs once.
    states_dtype
        How the recording stores the states (``"float16"``, ``"float32"``; ``None``: the
        kind's default).
    start_paused
        Prepare the run but wait for resume or step before the first frame.
    note
        What the interventions do, in words, for the messages (``"group T4 silenced"``).
    """

    given: Any = None
    settings: Any = None
    interventions: Any = ()
    compare: str | None = None
    states_dtype: str | None = None
    start_paused: bool = False
    note: str = ""
