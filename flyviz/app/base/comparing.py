"""Start a run of the shown language model with a feature's interventions lent to it,
compared with the untouched model (Patching's cells, a circuit, a lesion)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flyviz.app.base.host import WindowHost
    from flyviz.viewer.run_config import InterventionLoan

__all__ = ["compare_with_lent"]


def compare_with_lent(host: "WindowHost", loan: "InterventionLoan",
                      interventions: Sequence[Any], prompt: str | None = None) -> bool:
    """Lend ``interventions`` to the next run (set to ``prompt`` when given) and start it.

    The shown model resolves the interventions first, so one it refuses is refused here,
    in words, before anything is lent or run.

    Returns
    -------
    bool
        Whether a run started (False without a language model shown: nothing is lent).

    Raises
    ------
    FlyvizError
        The model refuses the interventions (its message says why).
    """
    from flyviz.model.interventions import resolve

    checkpoint = host.models.checkpoint
    if checkpoint is None:
        return False
    resolve(checkpoint, interventions)
    loan.lend(interventions)
    if prompt is not None:
        host.state.docks.prompt = prompt
    return host.runner.start() is not None
