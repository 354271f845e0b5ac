"""Strongest inputs and outputs of one neuron, read from the checkpoint's CSR graph.

Rows of the CSR graph are postsynaptic, so a neuron's inputs are one row.
Its outputs are one *column*, which CSR cannot read without scanning every
edge; the transposed (CSC) index is therefore built once and reused. For the
full brain (9 million synapses) that takes a good part of a second, so the
app builds it off the UI thread (:meth:`Connectivity.prepare` in the model
loader or a helper thread) and asks :attr:`Connectivity.ready` before it
looks up outputs. No Qt here.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from flyviz.model.checkpoint import Checkpoint


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
    checkpoint
        The model whose graph is read (arrays are not copied).
    """

    def __init__(self, checkpoint: Checkpoint) -> None:
        self._offsets = np.asarray(checkpoint.w_offsets)
        self._indices = np.asarray(checkpoint.w_indices)
        self._values = np.asarray(checkpoint.w_values)
        self.neurons = int(checkpoint.config.neurons)
        self._csc: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        """True once the transposed index exists: output lookups are then instant."""
        return self._csc is not None

    def prepare(self) -> "Connectivity":
        """Build the transposed index now (call it from a background thread); returns self."""
        self.transposed()
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

    def inputs(self, neuron: int, limit: int = 10) -> list[Partner]:
        """Presynaptic partners with the largest |weight|, strongest first."""
        i = self._check(neuron)
        lo, hi = int(self._offsets[i]), int(self._offsets[i + 1])
        return self._strongest(self._indices[lo:hi], self._values[lo:hi], limit)

    def outputs(self, neuron: int, limit: int = 10) -> list[Partner]:
        """Postsynaptic partners with the largest |weight|, strongest first."""
        j = self._check(neuron)
        offsets, rows, values = self.transposed()
        lo, hi = int(offsets[j]), int(offsets[j + 1])
        return self._strongest(rows[lo:hi], values[lo:hi], limit)

    def currents(self, neuron: int, state: np.ndarray, limit: int = 10) -> list["Current"]:
        """The presynaptic currents into ``neuron`` from ``state`` (the previous step's
        activations): ``weight × activation`` per synapse, largest |current| first."""
        i = self._check(neuron)
        lo, hi = int(self._offsets[i]), int(self._offsets[i + 1])
        partners = np.asarray(self._indices[lo:hi])
        if partners.size == 0:
            return []
        weights = np.asarray(self._values[lo:hi], dtype=np.float32)
        activations = np.asarray(state, dtype=np.float32)[partners]
        flows = weights * activations
        order = np.argsort(-np.abs(flows), kind="stable")[:limit]
        return [Current(int(partners[k]), float(weights[k]), float(activations[k]),
                        float(flows[k])) for k in order]

    def in_degree(self, neuron: int) -> int:
        """Number of presynaptic partners."""
        i = self._check(neuron)
        return int(self._offsets[i + 1] - self._offsets[i])

    def out_degree(self, neuron: int) -> int:
        """Number of postsynaptic partners."""
        j = self._check(neuron)
        offsets = self.transposed()[0]
        return int(offsets[j + 1] - offsets[j])

    def transposed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(offsets, rows, values)`` of the graph by presynaptic neuron, built once."""
        if self._csc is None:
            with self._lock:   # a second caller waits for the first build, never repeats it
                if self._csc is None:
                    from scipy.sparse import csr_matrix

                    n = self.neurons
                    matrix = csr_matrix((self._values, self._indices, self._offsets),
                                        shape=(n, n))
                    csc = matrix.tocsc()
                    self._csc = (csc.indptr, csc.indices, csc.data)
        return self._csc
