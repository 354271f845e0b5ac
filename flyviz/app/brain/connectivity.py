"""Strongest inputs and outputs of one neuron, read from its model's wiring.

A model's synapses come as one compressed table grouped by one end
(:class:`~flyviz.kinds.Wiring`): the Fly LLM's by postsynaptic neuron (a
neuron's inputs are one row), the spiking brain's by presynaptic neuron (its
outputs are one row). The other direction is one *column*, which the table
cannot read without scanning every synapse; the transposed index is therefore
built once and reused. For the full brain (9 to 15 million synapses) that takes
a good part of a second, so the app builds it off the UI thread
(:meth:`Connectivity.prepare` in the model loader or a helper thread) and asks
:meth:`Connectivity.has` before it looks that direction up. No Qt here.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from flyviz.kinds import LANGUAGE, Wiring
from flyviz.model.checkpoint import Checkpoint

#: A neuron's partners of one direction: ``(offsets, partners, weights)`` rows by neuron.
Rows = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Partner:
    """One synaptic partner of a neuron."""

    neuron: int
    weight: float


@dataclass(frozen=True)
class Current:
    """One synapse's current into a neuron at one step: ``weight × activation``."""

    neuron: int
    weight: float
    activation: float
    current: float


class Connectivity:
    """Look up a neuron's strongest synaptic partners.

    Parameters
    ----------
    wiring
        The model's synapses (arrays are not copied); :meth:`of_checkpoint` reads a
        Fly LLM checkpoint's.
    """

    def __init__(self, wiring: Wiring) -> None:
        self.neurons = int(wiring.neurons)
        #: What a weight is (a table's column header) and whether weights are whole numbers.
        self.weight_name = wiring.weight_name
        self.whole = bool(wiring.whole)
        given: Rows = (np.asarray(wiring.offsets), np.asarray(wiring.partners),
                       np.asarray(wiring.weights))
        # Rows by postsynaptic neuron (inputs) and by presynaptic neuron (outputs).
        self._rows: dict[str, Rows | None] = {"post": None, "pre": None}
        self._rows[wiring.grouped_by] = given
        self._given = wiring.grouped_by
        self._lock = threading.Lock()

    @classmethod
    def of_checkpoint(cls, checkpoint: Checkpoint) -> "Connectivity":
        """A Fly LLM checkpoint's signed weights (its CSR rows are by postsynaptic neuron)."""
        wiring = LANGUAGE.wiring(checkpoint)
        if wiring is None:
            raise ValueError(f"{checkpoint.name} has no graph")
        return cls(wiring)

    @property
    def ready(self) -> bool:
        """True once both directions are indexed: every lookup is then instant."""
        return all(rows is not None for rows in self._rows.values())

    def has(self, direction: str) -> bool:
        """True when ``direction`` (``"inputs"`` or ``"outputs"``) is indexed: a lookup of it
        is instant (otherwise the first one builds the index, a good part of a second on
        the full brain)."""
        return self._rows[_END[direction]] is not None

    def prepare(self) -> "Connectivity":
        """Build the transposed index now (call it from a background thread); returns self."""
        self._by("pre" if self._given == "post" else "post")
        return self

    def _check(self, neuron: int) -> int:
        neuron = int(neuron)
        if not 0 <= neuron < self.neurons:
            raise IndexError(f"neuron {neuron} out of range 0..{self.neurons - 1}")
        return neuron

    @staticmethod
    def _strongest(partners: np.ndarray, weights: np.ndarray, limit: int) -> list[Partner]:
        if partners.size == 0:
            return []
        weights = np.asarray(weights, dtype=np.float32)
        order = np.argsort(-np.abs(weights), kind="stable")[:limit]
        return [Partner(int(partners[i]), float(weights[i])) for i in order]

    def _row(self, end: str, neuron: int) -> tuple[np.ndarray, np.ndarray]:
        i = self._check(neuron)
        offsets, partners, weights = self._by(end)
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        return partners[lo:hi], weights[lo:hi]

    def inputs(self, neuron: int, limit: int = 10) -> list[Partner]:
        """Presynaptic partners with the largest |weight|, strongest first."""
        return self._strongest(*self._row("post", neuron), limit)

    def outputs(self, neuron: int, limit: int = 10) -> list[Partner]:
        """Postsynaptic partners with the largest |weight|, strongest first."""
        return self._strongest(*self._row("pre", neuron), limit)

    def currents(self, neuron: int, state: np.ndarray, limit: int = 10) -> list["Current"]:
        """The presynaptic currents into ``neuron`` from ``state`` (the previous step's
        activations): ``weight × activation`` per synapse, largest |current| first."""
        partners, weights = self._row("post", neuron)
        if partners.size == 0:
            return []
        weights = np.asarray(weights, dtype=np.float32)
        activations = np.asarray(state, dtype=np.float32)[partners]
        flows = weights * activations
        order = np.argsort(-np.abs(flows), kind="stable")[:limit]
        return [Current(int(partners[k]), float(weights[k]), float(activations[k]),
                        float(flows[k])) for k in order]

    def in_degree(self, neuron: int) -> int:
        """Number of presynaptic partners."""
        return int(self._row("post", neuron)[0].shape[0])

    def out_degree(self, neuron: int) -> int:
        """Number of postsynaptic partners."""
        return int(self._row("pre", neuron)[0].shape[0])

    def _by(self, end: str) -> Rows:
        """The rows grouped by ``end`` (``"post"`` or ``"pre"``), transposed once from the
        given ones if need be."""
        rows = self._rows[end]
        if rows is None:
            with self._lock:   # a second caller waits for the first build, never repeats it
                rows = self._rows[end]
                if rows is None:
                    from scipy.sparse import csr_matrix

                    offsets, partners, weights = self._rows[self._given]  # type: ignore[misc]
                    n = self.neurons
                    # Row i of the given table is neuron i's end; its columns, the other end's.
                    column_major = csr_matrix((weights, partners, offsets), shape=(n, n)).tocsc()
                    rows = (column_major.indptr, column_major.indices, column_major.data)
                    self._rows[end] = rows
        return rows


#: The end of a synapse a direction's rows are grouped by.
_END = {"inputs": "post", "outputs": "pre"}
