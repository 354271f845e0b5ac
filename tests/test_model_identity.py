"""Model identity: the same model in any layout has the same digests; any change shows."""

from __future__ import annotations

import dataclasses

import numpy as np

from flyviz.model.formats import load_folder
from flyviz.model.identity import model_identity
from flyviz.model.writers import write_connectome_dataset, write_fly_llm_hf, write_recital_web


def _digests(ckpt) -> tuple[str, dict]:
    identity = model_identity(ckpt)
    return identity["weights_sha256"], identity["graph_sha256"]


def test_layouts_and_index_widths_share_one_identity(tiny_checkpoint, tmp_path):
    write_fly_llm_hf(tiny_checkpoint, tmp_path / "hf")
    write_recital_web(tiny_checkpoint, tmp_path / "web" / "model")
    write_connectome_dataset(tiny_checkpoint, tmp_path / "web" / "dataset")
    want = _digests(tiny_checkpoint)
    assert _digests(load_folder(tmp_path / "hf")) == want
    assert _digests(load_folder(tmp_path / "web" / "model")) == want
    narrow = dataclasses.replace(tiny_checkpoint, digests={},
                                 w_indices=np.asarray(tiny_checkpoint.w_indices).astype(np.uint16))
    assert _digests(narrow) == want


def test_weights_and_graph_changes_show_in_their_own_digest(tiny_checkpoint):
    weights, graph = _digests(tiny_checkpoint)
    values = np.array(tiny_checkpoint.w_values, copy=True)
    values[17] = -values[17]
    other = _digests(dataclasses.replace(tiny_checkpoint, w_values=values, digests={}))
    assert other[0] == weights and other[1]["brain.w_values"] != graph["brain.w_values"]
    gain = np.array(tiny_checkpoint.gain, copy=True)
    gain[0] += 1e-3
    other = _digests(dataclasses.replace(tiny_checkpoint, gain=gain, digests={}))
    assert other[1] == graph and other[0] != weights
