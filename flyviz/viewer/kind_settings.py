"""Each kind's run settings, as a part of the viewer state (``"kind_settings"``).

A kind declares the settings of its runs as an evented dataclass (psygnal):
:meth:`ModelKind.new_run_settings <flyviz.kinds.ModelKind.new_run_settings>`. The
state keeps one object per kind in :class:`KindSettingsPart`, made the first time it
is asked for; a dock binds to its kind's, a script sets them, and the kind reads them
to start the run a state describes
(:meth:`ModelKind.run_request <flyviz.kinds.ModelKind.run_request>`)::

    settings = state.kind_settings.of(SPIKING)
    settings.rate, settings.bins = 400.0, 12
    runs.start()                      # the run those settings say

The Fly LLM's are the state's :attr:`~flyviz.viewer.state.ViewerState.run` (the
Settings dock's *Generation* group). A kind's docks keep their own choices here too
(:meth:`KindSettingsPart.docks_of`, made by :meth:`ModelKind.new_dock_settings
<flyviz.kinds.ModelKind.new_dock_settings>`): the Fly LLM's prompt, *Why?*'s lag, the
patching measure... (:attr:`ViewerState.docks <flyviz.viewer.state.ViewerState.docks>`).
Settings are the user's: kept through runs, Reset, models and opened recordings.

No Qt here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flyviz.viewer.parts import ALWAYS, StatePart

__all__ = ["KindSettingsPart"]


class KindSettingsPart(StatePart):
    """Each kind's run settings, by kind.

    Parameters
    ----------
    given
        Settings objects already made, by kind (the Fly LLM's: the state's ``run``).
    """

    name = "kind_settings"
    lifetime = ALWAYS

    def __init__(self, given: dict[Any, Any] | None = None,
                 docks: dict[Any, Any] | None = None) -> None:
        super().__init__()
        self._by_kind: dict[Any, Any] = dict(given or {})
        self._docks_by_kind: dict[Any, Any] = dict(docks or {})

    def of(self, kind: Any) -> Any:
        """``kind``'s run settings (``None`` for a kind whose runs take none)."""
        return _made(self._by_kind, kind, kind.new_run_settings)

    def docks_of(self, kind: Any) -> Any:
        """``kind``'s docks' own choices (``None`` for a kind whose docks keep none)."""
        return _made(self._docks_by_kind, kind, kind.new_dock_settings)

    def frozen(self) -> StatePart:
        """A copy whose settings are copies of these."""
        return KindSettingsPart({kind: _copied(value) for kind, value in self._by_kind.items()},
                                {kind: _copied(value)
                                 for kind, value in self._docks_by_kind.items()})


def _made(held: dict[Any, Any], kind: Any, make: Any) -> Any:
    """``held[kind]``, made by ``make()`` the first time ``kind`` asks."""
    try:
        return held[kind]
    except KeyError:
        return held.setdefault(kind, make())


def _copied(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value)
    return value
