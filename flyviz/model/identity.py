"""Which model a run was made with: digests of its weights and graph, independent of layout.

A recording stores :func:`model_identity`; :func:`identity_mismatch` says in
one line how a loaded checkpoint differs from the one a recording names, so
that states are never shown as another model's without a word.

The digests are computed from the arrays, not from files: the same weights
stored as a web export, as fly-wordbrain safetensors or in ngxson's layout
have the same identity. The graph digests are the frozen-buffer digests of
the releases (fly-formats.md section 2.2), so they can be compared with any
manifest's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from flyviz._version import __version__
from flyviz.model.checkpoint import Checkpoint
from flyviz.model.formats.common import FROZEN_BUFFER_DTYPES, array_digest

#: Parameters in the order their digests enter the weights digest.
_PARAMETERS = ("wte", "in_proj", "gain", "rec_gain", "bias", "ln_weight", "ln_bias", "head",
               "head_a", "head_b")


def weights_digest(ckpt: Checkpoint) -> str:
    """SHA-256 over the float32 digests of every trained parameter (cached on the checkpoint).

    Each parameter is digested with
    :func:`~flyviz.model.formats.common.array_digest` as float32; the result is
    the SHA-256 of the lines ``name:digest``. A full-size dense checkpoint
    (205 MB of parameters) takes about 0.1 s once.
    """
    cached = ckpt.digests.get("identity/weights")
    if cached:
        return cached
    lines = []
    for name in _PARAMETERS:
        array = getattr(ckpt, name)
        if array is not None:
            lines.append(f"{name}:{array_digest(array, 'float32')}\n")
    digest = hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()
    ckpt.digests["identity/weights"] = digest
    return digest


def graph_digests(ckpt: Checkpoint) -> dict[str, str]:
    """The five frozen-buffer digests of the checkpoint's graph.

    Loaders that join a dataset have recomputed them already (``graph/...``
    in :attr:`Checkpoint.digests`); otherwise they are computed once here.
    """
    known = {name: ckpt.digests.get(f"graph/{name}") for name in FROZEN_BUFFER_DTYPES}
    if all(known.values()):
        return {k: str(v) for k, v in known.items()}
    from flyviz.model.digests import frozen_buffer_digests

    digests = frozen_buffer_digests(ckpt)
    for name, value in digests.items():
        ckpt.digests[f"graph/{name}"] = value
    return digests


def model_identity(ckpt: Checkpoint) -> dict[str, Any]:
    """What identifies the model a run was made with (plain JSON).

    Returns
    -------
    dict
        ``spec`` (how to load it again: an absolute folder, a hub id or
        ``"demo"``), ``name``, ``layout``, ``dataset`` (the dataset folder it
        was joined to, or ``None``), ``neurons``, ``edges``, ``vocabulary``,
        ``weights_sha256`` (:func:`weights_digest`), ``graph_sha256`` (the
        five frozen-buffer digests) and ``flyviz_version``.
    """
    dataset = ckpt.metadata.get("dataset")
    return {
        "spec": str(ckpt.metadata.get("spec") or ckpt.name),
        "name": ckpt.name,
        "layout": ckpt.layout,
        "dataset": str(dataset) if dataset else None,
        "neurons": ckpt.config.neurons,
        "edges": ckpt.n_edges,
        "vocabulary": ckpt.config.vocabulary,
        "weights_sha256": weights_digest(ckpt),
        "graph_sha256": graph_digests(ckpt),
        "flyviz_version": __version__,
    }


def identity_mismatch(recorded: Mapping[str, Any] | None, ckpt: Checkpoint,
                      what: str = "the recording", advice: str | None = None) -> str | None:
    """One line on how ``ckpt`` differs from the model a recording was made with.

    Parameters
    ----------
    recorded
        The recording's ``metadata["model_identity"]`` (``None`` for a
        recording made before flyviz stored one).
    ckpt
        The loaded model.
    what
        How to name the recording in the message (e.g. its file name).
    advice
        What to do instead, ending the message (default: load the recording's model).

    Returns
    -------
    str or None
        ``None`` when the graph and the weights are the same; otherwise what
        differs (size, graph, or weights) and which model to load instead.
    """
    if not isinstance(recorded, Mapping):
        return None
    name = recorded.get("name") or recorded.get("spec") or "another model"
    spec = recorded.get("spec")
    load_hint = f"; {advice}" if advice else f"; load {spec} to see its own states" if spec \
        else ""
    neurons = recorded.get("neurons")
    if isinstance(neurons, int) and neurons != ckpt.config.neurons:
        return (f"{what} was made with {name} ({neurons:,} neurons), not {ckpt.name} "
                f"({ckpt.config.neurons:,} neurons){load_hint}")
    graph = recorded.get("graph_sha256")
    if isinstance(graph, Mapping) and graph:
        own = graph_digests(ckpt)
        differing = [k for k, v in graph.items() if k in own and str(v).lower() != own[k]]
        if differing:
            return (f"{what} was made with {name} on a different graph ({differing[0]} "
                    f"{str(graph[differing[0]])[:12]}... vs {own[differing[0]][:12]}... in "
                    f"{ckpt.name}): its states are not this model's{load_hint}")
    weights = recorded.get("weights_sha256")
    if weights and str(weights).lower() != weights_digest(ckpt):
        return (f"{what} was made with {name}, whose weights differ from {ckpt.name}'s "
                f"({str(weights)[:12]}... vs {weights_digest(ckpt)[:12]}...) on the same "
                f"graph{load_hint}")
    return None
