"""Population views of a run: row orders, a pooled raster, group time courses, trajectories.

49,393 neurons do not fit on a screen as rows; these are the computations that
make the population legible, shared by the app's docks, ``flyviz figure`` and
notebooks (no Qt, no vispy):

- :func:`anatomy_order` sorts neurons by superclass, then cell type, and names
  the bands; :func:`similarity_order` puts neurons with similar activity next
  to each other (a randomised PCA of the z-scored states, k-means
  "superneurons", the superneurons in optimal leaf order, each superneuron's
  neurons along the line from its neighbour before to its neighbour after:
  the kind of picture rastermap draws, built from scipy alone);
  :func:`importance_order` sorts by a score (a lesion map's or a trace's).
- :class:`RasterPooler` pools ordered neurons into pixel rows keeping, per row
  and token, the value of largest magnitude (a single neuron that fires is not
  averaged away), for a whole run or one new token.
- :func:`group_time_courses` gives each cell type's (or superclass's) mean
  activation, mean |x| or mean Δx per token, rows in similarity order.
- :func:`principal_trajectory` projects the states on their first principal
  components (and :meth:`Trajectory.project` another run on the same axes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np

from flyviz.errors import InputError

#: Quantities a group time course can average.
GroupQuantity = Literal["mean", "abs"]


# ----------------------------------------------------------------------------- orders
@dataclass(frozen=True)
class Band:
    """A run of rows that share a label (a superclass, a cell type, a cluster)."""

    label: str
    start: int
    stop: int


@dataclass(frozen=True)
class RowOrder:
    """A permutation of the neurons for drawing them as rows.

    Attributes
    ----------
    order
        ``(N,)`` int: ``order[r]`` is the neuron drawn in row ``r``.
    name
        What the order is (``"anatomy"``, ``"similarity"``, ``"importance"``).
    bands
        Labelled runs of rows (superclasses for the anatomical order, groups of
        superneurons for the similarity order); may be empty.
    """

    order: np.ndarray
    name: str
    bands: tuple[Band, ...] = ()

    @property
    def rank(self) -> np.ndarray:
        """``(N,)``: the row of each neuron (the inverse permutation)."""
        rank = np.empty_like(self.order)
        rank[self.order] = np.arange(self.order.size)
        return rank


def _labels(values: Sequence[str] | None, n: int, what: str) -> list[str]:
    if values is None:
        return ["unlabelled"] * n
    if len(values) != n:
        raise InputError(f"{what} has {len(values)} labels for {n} neurons")
    return [str(v) if v else "unlabelled" for v in values]


def _ranks(labels: list[str]) -> tuple[list[str], np.ndarray]:
    """The distinct ``labels`` in order, and each label's place among them."""
    names = sorted(set(labels))
    place = {name: i for i, name in enumerate(names)}
    return names, np.fromiter(map(place.__getitem__, labels), np.int64, len(labels))


def anatomy_order(superclass: Sequence[str] | None, cell_type: Sequence[str] | None = None,
                  n: int | None = None) -> RowOrder:
    """Neurons by superclass, then cell type, then index; one band per superclass."""
    if n is None:
        n = len(superclass) if superclass is not None else len(cell_type or ())
    superclasses, sup = _ranks(_labels(superclass, n, "superclass"))
    _, typ = _ranks(_labels(cell_type, n, "cell type"))
    # Sorting the few distinct labels and then the neurons by their places (a stable sort,
    # so index breaks ties) orders them as comparing the labels themselves does, at a
    # fraction of the cost: the window does it for every model it opens.
    order = np.lexsort((typ, sup)).astype(np.int64)
    ranked = sup[order]
    starts = np.flatnonzero(np.diff(ranked, prepend=-1))
    stops = np.append(starts[1:], n)
    return RowOrder(order, "anatomy", tuple(Band(superclasses[ranked[start]], int(start), int(stop))
                                            for start, stop in zip(starts, stops)))


def importance_order(score: np.ndarray) -> RowOrder:
    """Neurons by decreasing ``|score|`` (ties and NaNs last, in index order)."""
    score = np.asarray(score, dtype=np.float64)
    key = np.where(np.isfinite(score), -np.abs(score), np.inf)
    return RowOrder(np.argsort(key, kind="stable").astype(np.int64), "importance")


def _randomized_embedding(z: np.ndarray, components: int, seed: int,
                          power_iterations: int = 2) -> np.ndarray:
    """Rows of ``z.T`` (neurons) in the space of ``z``'s leading singular vectors.

    ``z`` is ``(T, N)``; returns ``(N, k)`` loadings ``V_k * S_k`` of a
    randomised SVD (Halko et al.): a few passes over ``z``, never ``N x N``.
    """
    t, n = z.shape
    k = max(1, min(components, t, n))
    rng = np.random.default_rng(seed)
    probe = z @ rng.standard_normal((n, min(t, k + 10))).astype(z.dtype)   # (T, k+p)
    for _ in range(power_iterations):
        probe, _ = np.linalg.qr(probe)
        probe = z @ (z.T @ probe)
    basis, _ = np.linalg.qr(probe)                                         # (T, k+p)
    small = basis.T @ z                                                    # (k+p, N)
    _, s, vt = np.linalg.svd(small, full_matrices=False)
    return (vt[:k].T * s[:k]).astype(np.float32)


def _kmeans(points: np.ndarray, k: int, seed: int, iterations: int = 25
            ) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd's k-means from a k-means++ start, vectorised (scipy's ``kmeans2`` starts
    its ++ seeding in Python loops: ~40 s for 49k points and 200 clusters).

    Returns the centroids of the non-empty clusters and each point's cluster.
    """
    rng = np.random.default_rng(seed)
    x = points.astype(np.float32)
    n = x.shape[0]
    k = max(1, min(k, n))
    squared = np.einsum("ij,ij->i", x, x)
    centres = [int(rng.integers(n))]
    closest = squared - 2 * x @ x[centres[0]] + squared[centres[0]]
    for _ in range(1, k):
        weights = np.clip(closest, 0.0, None).astype(np.float64)
        total = weights.sum()
        pick = int(rng.choice(n, p=weights / total)) if total > 0 else int(rng.integers(n))
        centres.append(pick)
        closest = np.minimum(closest, squared - 2 * x @ x[pick] + squared[pick])
    from scipy import sparse

    centroids = x[centres].copy()
    label = np.full(n, -1, dtype=np.int64)
    for _ in range(iterations):
        # |x - c|^2 without the |x|^2 that every centre shares.
        distance = x @ centroids.T
        distance *= -2.0
        distance += np.einsum("ij,ij->i", centroids, centroids)[None, :]
        new_label = np.argmin(distance, axis=1)
        if np.array_equal(new_label, label):
            break
        label = new_label
        members = sparse.csr_matrix((np.ones(n, dtype=np.float32), (label, np.arange(n))),
                                    shape=(k, n))
        counts = np.asarray(members.sum(axis=1)).ravel()
        filled = counts > 0
        centroids[filled] = (members @ x)[filled] / counts[filled, None]
    used = np.unique(label)
    remap = np.full(k, -1, dtype=np.int64)
    remap[used] = np.arange(used.size)
    return centroids[used], remap[label]


#: Up to this many points the leaves are put in optimal order (scipy's is cubic in the
#: count or worse: 100 points take ~0.1 s, 1,000 several minutes); beyond, the
#: average-linkage tree's own leaf order.
_OPTIMAL_LEAVES = 160


def _leaf_order(points: np.ndarray) -> np.ndarray:
    """A 1-D order of ``points`` in which neighbours are similar (optimal leaf order)."""
    from scipy.cluster.hierarchy import leaves_list, linkage, optimal_leaf_ordering
    from scipy.spatial.distance import pdist

    if len(points) < 3:
        return np.arange(len(points))
    distances = pdist(points.astype(np.float64))
    tree = linkage(distances, method="average")
    if len(points) <= _OPTIMAL_LEAVES:
        tree = optimal_leaf_ordering(tree, distances)
    return leaves_list(tree).astype(np.int64)


def similarity_order(states: np.ndarray, *, components: int = 24, clusters: int | None = None,
                     seed: int = 0) -> RowOrder:
    """Neurons with similar activity in adjacent rows.

    Parameters
    ----------
    states
        ``(T, N)`` states of a run (or any per-neuron features as columns).
    components
        Principal components the neurons are compared in.
    clusters
        Superneurons (k-means clusters); default ``clamp(N / 400, 2, 100)``
        (rastermap's default is 100).
    seed
        For the random projection and k-means: the same seed, the same order.

    Returns
    -------
    RowOrder
        Silent neurons (no variance) come last, in index order, as one band
        ``"silent"``; the others are banded by superneuron.
    """
    x = np.asarray(states, dtype=np.float32)
    if x.ndim != 2 or x.shape[0] < 2:
        raise InputError("a similarity order needs at least two tokens of states")
    spread = x.std(axis=0)
    active = np.flatnonzero(spread > 1e-6)
    silent = np.flatnonzero(spread <= 1e-6)
    if active.size < 3:
        order = np.concatenate([active, silent]).astype(np.int64)
        return RowOrder(order, "similarity", (Band("silent", active.size, order.size),))
    z = (x[:, active] - x[:, active].mean(axis=0)) / spread[active]
    embedding = _randomized_embedding(z, components, seed)
    # Cosine geometry: neurons that rise and fall together, whatever their amplitude.
    embedding /= np.maximum(np.linalg.norm(embedding, axis=1, keepdims=True), 1e-12)
    k = clusters or int(np.clip(active.size // 400, 2, 100))
    k = max(1, min(k, active.size))
    centroids, label = _kmeans(embedding, k, seed)
    cluster_order = _leaf_order(centroids)
    rows: list[np.ndarray] = []
    bands: list[Band] = []
    for place, c in enumerate(cluster_order):
        members = np.flatnonzero(label == c)
        # Along the path: from the superneuron before this one towards the one after it.
        before = centroids[cluster_order[place - 1]] if place > 0 else centroids[c]
        after = centroids[cluster_order[place + 1]] if place + 1 < len(cluster_order) \
            else centroids[c]
        direction = after - before
        if not np.any(direction):
            direction = centroids[c]
        key = embedding[members] @ direction
        members = members[np.lexsort((active[members], key))]
        start = sum(r.size for r in rows)
        rows.append(active[members])
        bands.append(Band(f"superneuron {place + 1}", start, start + members.size))
    order = np.concatenate(rows + [silent]).astype(np.int64)
    if silent.size:
        bands.append(Band("silent", order.size - silent.size, order.size))
    return RowOrder(order, "similarity", tuple(bands))


# ----------------------------------------------------------------------------- raster
@dataclass
class RasterPooler:
    """Pool ordered neurons into ``rows`` pixel rows, keeping the largest |value|.

    Attributes
    ----------
    order
        The row order of the neurons.
    rows
        Pixel rows (at most the number of neurons: one neuron a row then).
    edges
        ``(rows + 1,)``: pixel row ``r`` holds the neurons in ordered positions
        ``edges[r]:edges[r + 1]`` (what a legend or a hover reads).
    """

    order: RowOrder
    rows: int
    edges: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        n = self.order.order.size
        if n == 0:
            raise InputError("there are no neurons to draw")
        self.rows = int(min(max(1, self.rows), n))
        self.edges = np.linspace(0, n, self.rows + 1).round().astype(np.int64)

    def neurons_in_row(self, row: int) -> np.ndarray:
        """The neurons pooled into pixel row ``row``."""
        return self.order.order[self.edges[row]:self.edges[row + 1]]

    def row_of_neuron(self, neuron: int) -> int:
        """The pixel row a neuron is pooled into."""
        rank = int(np.flatnonzero(self.order.order == neuron)[0])
        return int(np.searchsorted(self.edges, rank, side="right") - 1)

    def pool(self, states: np.ndarray) -> np.ndarray:
        """``(T, N)`` states to a ``(rows, T)`` float32 image (the signed max-|x| per cell)."""
        x = np.asarray(states, dtype=np.float32)
        if x.ndim == 1:
            x = x[None, :]
        ordered = x[:, self.order.order]
        starts = self.edges[:-1]
        high = np.maximum.reduceat(ordered, starts, axis=1)
        low = np.minimum.reduceat(ordered, starts, axis=1)
        return np.ascontiguousarray(np.where(high >= -low, high, low).T)

    def pool_one(self, state: np.ndarray) -> np.ndarray:
        """One token's ``(N,)`` state to its ``(rows,)`` image column."""
        return self.pool(np.asarray(state)[None, :])[:, 0]


# ----------------------------------------------------------------------------- groups
@dataclass(frozen=True)
class GroupTimeCourse:
    """Per-group averages over time.

    Attributes
    ----------
    names
        Group names, in row order (similar time courses adjacent).
    values
        ``(groups, T)`` float32.
    sizes
        Neurons in each group.
    parents
        Each group's superclass (its most common one), for a side colour bar.
    quantity
        ``"mean"`` (of x or of Δx) or ``"abs"`` (mean |x|).
    """

    names: list[str]
    values: np.ndarray
    sizes: np.ndarray
    parents: list[str]
    quantity: str

    def row(self, name: str) -> int:
        """The row of a group (an unknown name is an error naming the groups)."""
        try:
            return self.names.index(name)
        except ValueError:
            raise InputError(f"no group {name!r}; there are {len(self.names)}, e.g. "
                             f"{', '.join(self.names[:5])}") from None


def group_time_courses(states: np.ndarray, labels: Sequence[str],
                       parents: Sequence[str] | None = None, *,
                       quantity: GroupQuantity = "mean", order: str = "similarity"
                       ) -> GroupTimeCourse:
    """Each group's mean (or mean |x|) over its neurons, per token.

    Parameters
    ----------
    states
        ``(T, N)``: a run's states, or a comparison's Δx.
    labels
        ``(N,)`` group names (cell types, superclasses).
    parents
        ``(N,)`` coarser labels (superclasses) reported per group.
    quantity
        ``"mean"`` or ``"abs"``.
    order
        ``"similarity"`` (rows with similar time courses adjacent) or ``"name"``.
    """
    from scipy import sparse

    if quantity not in ("mean", "abs"):
        raise InputError(f"unknown quantity {quantity!r}; choose mean or abs")
    x = np.asarray(states, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != len(labels):
        raise InputError(f"states of shape {x.shape} do not match {len(labels)} neuron labels")
    names, codes = np.unique(np.asarray([str(v) if v else "unlabelled" for v in labels]),
                             return_inverse=True)
    sizes = np.bincount(codes, minlength=names.size)
    n = len(labels)
    average = sparse.csr_matrix((1.0 / sizes[codes], (np.arange(n), codes)),
                                shape=(n, names.size), dtype=np.float64)
    source = np.abs(x) if quantity == "abs" else x
    values = np.asarray((average.T @ source.T.astype(np.float64)), dtype=np.float32)
    if parents is not None:
        parent_names, parent_codes = np.unique(np.asarray([str(v) for v in parents]),
                                               return_inverse=True)
        pairs = np.bincount(codes * parent_names.size + parent_codes,
                            minlength=names.size * parent_names.size)
        most = pairs.reshape(names.size, parent_names.size).argmax(axis=1)
        parent_of = [str(parent_names[m]) for m in most]
    else:
        parent_of = [""] * names.size
    if order == "similarity" and names.size >= 3 and values.shape[1] >= 2:
        if names.size <= _OPTIMAL_LEAVES:
            centred = values - values.mean(axis=1, keepdims=True)
            scale = np.linalg.norm(centred, axis=1, keepdims=True)
            rows = _leaf_order(np.where(scale > 0, centred / np.maximum(scale, 1e-12), 0.0))
        else:
            # Thousands of cell types: the neurons' sort, with groups as its columns (an
            # average-linkage tree of 9,143 time courses took most of a minute).
            rows = similarity_order(values.T).order
    elif order in ("similarity", "name"):
        rows = np.arange(names.size)
    else:
        raise InputError(f"unknown order {order!r}; choose similarity or name")
    return GroupTimeCourse([str(names[r]) for r in rows], values[rows], sizes[rows],
                           [parent_of[r] for r in rows], quantity)


# ----------------------------------------------------------------------------- trajectory
@dataclass(frozen=True)
class Trajectory:
    """A run's states on their principal axes.

    Attributes
    ----------
    coordinates
        ``(T, k)`` float64 projections of the centred states.
    explained
        ``(k,)`` fraction of the run's variance each axis explains.
    mean
        ``(N,)`` the mean state the axes are centred on.
    axes
        ``(k, N)`` orthonormal principal axes (the sign chosen so that each
        axis's largest loading is positive: the same run gives the same picture).
    """

    coordinates: np.ndarray
    explained: np.ndarray
    mean: np.ndarray
    axes: np.ndarray

    def project(self, states: np.ndarray) -> np.ndarray:
        """Another run's ``(T', N)`` states on these axes: ``(T', k)``."""
        x = np.asarray(states, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.mean.size:
            raise InputError(f"states of shape {x.shape} do not match {self.mean.size} neurons")
        return (x - self.mean) @ self.axes.T

    def captured(self, states: np.ndarray) -> np.ndarray:
        """``(k,)``: the fraction of another run's variance each of these axes holds.

        The variance of ``states`` about their own mean along each axis, over
        their total variance: for the run the axes were fitted on this is
        :attr:`explained`; for another run on these axes (a comparison, a run
        drawn on a kept basis) it says how much of that run the picture shows.
        """
        x = np.asarray(states, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.mean.size:
            raise InputError(f"states of shape {x.shape} do not match {self.mean.size} neurons")
        if x.shape[0] < 2:
            return np.zeros(self.axes.shape[0])
        centred = x - x.mean(axis=0)
        total = float(np.einsum("ij,ij->", centred, centred))
        along = ((centred @ self.axes.T) ** 2).sum(axis=0)
        return along / total if total > 0 else np.zeros(self.axes.shape[0])


def principal_trajectory(states: np.ndarray, components: int = 3) -> Trajectory:
    """The first ``components`` principal components of a ``(T, N)`` run (T >= 2)."""
    x = np.asarray(states, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise InputError("a trajectory needs at least two tokens of states")
    mean = x.mean(axis=0)
    centred = x - mean
    # The T x T Gram matrix: runs are far shorter than the brain is wide.
    gram = centred @ centred.T
    eigenvalues, vectors = np.linalg.eigh(gram)
    top = np.argsort(eigenvalues)[::-1][:max(1, min(components, x.shape[0]))]
    values = np.clip(eigenvalues[top], 0.0, None)
    singular = np.sqrt(values)
    # A component with no variance (a run of fewer dimensions than components asked for)
    # has a zero axis: its eigenvalue is rounding error (about 1e-8 of the largest singular
    # value, relatively), and dividing by it made axes of norm 1e280 of noise.
    real = singular > 1e-6 * max(float(singular.max()), 1e-300)
    axes = (vectors[:, top].T @ centred) / np.where(real, singular, np.inf)[:, None]
    flip = np.sign(axes[np.arange(axes.shape[0]), np.argmax(np.abs(axes), axis=1)])
    flip[flip == 0] = 1.0
    axes *= flip[:, None]
    total = float(np.clip(eigenvalues, 0.0, None).sum())
    explained = np.where(real, values, 0.0) / total if total > 0 else np.zeros_like(values)
    return Trajectory(centred @ axes.T, explained, mean, axes)
