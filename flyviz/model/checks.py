"""The outcome of one integrity check, shared by the loaders and ``flyviz verify``.

A check either passes, fails (the message says what is wrong and what to do)
or is skipped (the message says why: a file that was not downloaded, a digest
the manifest does not record). The loaders raise the first failure as a
:class:`~flyviz.model.errors.CheckpointError`; :mod:`flyviz.model.verify`
lists them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from flyviz.model.errors import CheckpointError

PASS = "pass"
FAIL = "fail"
SKIP = "skip"

#: Progress callback: ``progress(label, fraction)`` with fraction in [0, 1].
Progress = Callable[[str, float], None]


@dataclass(frozen=True)
class CheckResult:
    """One check and its outcome.

    Parameters
    ----------
    group
        What was checked: ``"files"``, ``"dataset"``, ``"binding"``,
        ``"checkpoint"`` or ``"golden"``.
    name
        Short name, e.g. ``"sha256 graph/edges_weight.f32"`` or
        ``"frozen digest brain.w_values"``.
    status
        :data:`PASS`, :data:`FAIL` or :data:`SKIP`.
    detail
        One line: what was found, why it was skipped, or what is wrong and
        what to do.
    """

    group: str
    name: str
    status: str
    detail: str = ""

    @property
    def failed(self) -> bool:
        """True when the check failed."""
        return self.status == FAIL

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON form."""
        return asdict(self)


def raise_first_failure(results: Iterable[CheckResult]) -> None:
    """Raise the first failed check's detail as a :class:`CheckpointError`."""
    for result in results:
        if result.failed:
            raise CheckpointError(result.detail)
