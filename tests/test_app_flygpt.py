"""The window draws a FlyGPT model whose dataset labels its neurons but places none (a
connectome set without soma positions): the graph laid out, with the dataset's labels, as
``flyviz info`` says and as a movie or napari draws it; not an empty brain."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytestmark = [pytest.mark.gui]


def test_a_flygpt_whose_dataset_has_no_positions_is_drawn_as_a_graph_layout(qtbot, tmp_path):
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import lit_count, make_window, settled_render

    from flyviz.model.synthetic import make_flygpt_tensors, make_random_checkpoint
    from flyviz.model.writers import write_connectome_dataset, write_flygpt
    from flyviz.record.runner import Model

    tensors = make_flygpt_tensors(seed=11)
    folder = write_flygpt(tensors, tmp_path / "FlyGPT")
    host = make_random_checkpoint(neurons=60, edges=300, d_embed=4, delay_k=2, vocabulary=16,
                                  seed=4, with_anatomy=True)
    node_ids = np.asarray(tensors["graph.node_id"])
    body = host.anatomy.body_id.copy()
    body[:node_ids.size] = node_ids                 # every FlyGPT neuron is in the dataset
    order = np.argsort(body)
    host.anatomy = dataclasses.replace(
        host.anatomy, body_id=body[order], positions=host.anatomy.positions[order],
        valid=np.zeros(body.size, bool),            # ... and none has a soma position
        superclass=[host.anatomy.superclass[i] for i in order],
        side=[host.anatomy.side[i] for i in order],
        cell_type=[host.anatomy.cell_type[i] for i in order])
    dataset = write_connectome_dataset(host, tmp_path / "dataset")

    win = make_window(qtbot, None, tmp_path)
    win.models.load(str(folder), dataset=str(dataset))   # `flyviz gui FOLDER --dataset DIR`
    qtbot.waitUntil(lambda: win.state.model is not None, timeout=30_000)
    checkpoint = win.state.model.checkpoint
    assert checkpoint.anatomy.n_valid == 0           # what the loader gives: labels only
    anatomy = win.state.anatomy
    assert anatomy.kind == "layout" and anatomy.valid.all()
    # The dataset's labels travel with the layout (queries and the inspector use them).
    assert anatomy.cell_type == checkpoint.anatomy.cell_type
    assert np.array_equal(anatomy.body_id, node_ids)
    # The same positions as the library draws (a movie, napari, the notebook).
    library = Model(checkpoint).drawing_anatomy()
    assert np.array_equal(anatomy.positions, library.positions)
    assert "layout computed from the graph" in win.brain.note.text()
    assert lit_count(settled_render(qtbot, win)) > 0


def test_the_model_dock_says_flygpt_has_no_delay_slots(qtbot, tmp_path):
    """FlyGPT's inputs are a linear map of the token's embedding: the Model dock says it has
    no delay slots, as flyviz info does, not the loader's one slot; a slotted model still
    gives its count."""
    from types import SimpleNamespace

    from flyviz.app.runs.model_panel import ModelPanel
    from flyviz.commands.info import describe
    from flyviz.model.formats import load_folder
    from flyviz.model.synthetic import make_flygpt_tensors, make_random_checkpoint
    from flyviz.model.writers import write_flygpt

    panel = ModelPanel()
    qtbot.addWidget(panel)
    flygpt = load_folder(write_flygpt(make_flygpt_tensors(seed=11), tmp_path / "FlyGPT"))
    assert describe(flygpt)["delay_slots"] is None
    panel.describe(SimpleNamespace(checkpoint=flygpt, name="FlyGPT", is_demo=False))
    text = panel.label.text()
    assert "no delay slots" in text and "1 delay slots" not in text
    assert f"{flygpt.config.n_inputs:,} input neurons" in text
    slotted = make_random_checkpoint(neurons=60, edges=300, d_embed=4, delay_k=3,
                                     vocabulary=16, seed=4)
    panel.describe(SimpleNamespace(checkpoint=slotted, name="demo", is_demo=True))
    assert "3 delay slots" in panel.label.text()
