"""NWB files name each neuron by its identity in the connectome, not only by the model's
index, and a spiking comparison keeps its untouched run's bins.

A user of ``flyviz convert run.flyrec run.nwb`` reads the neurons in another tool, where
the model's index means nothing: the ``units`` table of a spiking run and the neuron table
of a Fly LLM's carry each neuron's body id (root id) and cell type where the model has them.
"""

from __future__ import annotations

import numpy as np
import pytest

from flyviz.cli import main
from flyviz.record.recording import Recording
from flyviz.record.run import GenerationSettings
from flyviz.record.runner import Model

pynwb = pytest.importorskip("pynwb")
pytest.importorskip("pyarrow")
pytestmark = pytest.mark.usefixtures("spiking_kernels")


@pytest.fixture(scope="module")
def brain_folder(tmp_path_factory):
    from test_spiking_kind import write_brain

    return write_brain(tmp_path_factory.mktemp("identity") / "brain")


def _spiking_run(brain_folder, silence=None, bins=3):
    from flyviz.kinds.spiking import BinSettings, SpikingModel, Stimulus, record_run

    return record_run(SpikingModel.load(str(brain_folder)),
                      Stimulus(excite="superclass:sensory", rate=300.0, silence=silence, seed=4),
                      BinSettings(bins=bins))


def test_a_spiking_runs_units_carry_their_body_ids_and_cell_types(brain_folder, tmp_path):
    """Each unit (a neuron that spiked) says its root id and cell type, as the brain the
    recording ran on gives them; the unit's id stays the model's index."""
    from test_spiking_kind import IDS

    from flyviz import spiking

    brain = spiking.load_brain(brain_folder)
    rec = tmp_path / "run.flyrec"
    _spiking_run(brain_folder).save(rec)
    out = tmp_path / "run.nwb"
    assert main(["convert", str(rec), str(out)]) == 0
    assert pynwb.validate(path=str(out)) == []
    with pynwb.NWBHDF5IO(str(out), "r") as io:
        units = io.read().units
        index = np.asarray(units.id[:])
        assert index.size > 0
        np.testing.assert_array_equal(np.asarray(units["body_id"][:]), IDS[index])
        assert list(units["cell_type"][:]) == [brain.cell_type[i] for i in index]
        assert list(units["superclass"][:]) == ["sensory"] * index.size


def test_units_without_the_model_say_they_carry_no_identity(brain_folder, tmp_path):
    rec = tmp_path / "run.flyrec"
    _spiking_run(brain_folder).save(rec)
    out = tmp_path / "bare.nwb"
    assert main(["convert", str(rec), str(out), "--no-labels"]) == 0
    with pynwb.NWBHDF5IO(str(out), "r") as io:
        units = io.read().units
        assert "body_id" not in units.colnames
        assert "carry no connectome identity" in units.description


def test_a_fly_llm_runs_neurons_carry_their_body_ids_and_cell_types(tiny_checkpoint,
                                                                    tmp_path):
    """A Fly LLM's run has no spikes (no units): its neuron table, one row per model
    neuron, carries the same identity columns."""
    with Model(tiny_checkpoint, spec="tiny") as model:
        recording = model.record("the little dog", GenerationSettings(max_new_tokens=2))
        anatomy = model.anatomy
        assert anatomy.body_id is not None and anatomy.cell_type is not None
        out = recording.to_nwb(tmp_path / "llm.nwb", model)
    with pynwb.NWBHDF5IO(str(out), "r") as io:
        nwb = io.read()
        neurons = nwb.processing["flyviz"]["ImageSegmentation"]["neurons"]
        assert list(neurons.id[:]) == list(range(len(anatomy.body_id)))
        np.testing.assert_array_equal(np.asarray(neurons["body_id"][:]), anatomy.body_id)
        assert list(neurons["cell_type"][:]) == list(anatomy.cell_type)
        assert nwb.units is None


def test_a_spiking_comparison_keeps_its_untouched_runs_bins(brain_folder, tmp_path):
    """A spiking run saved beside its untouched run (its baseline) converts with the
    baseline's bins, as a Fly LLM comparison keeps its baseline's tokens: one interval per
    bin, with its spike count."""
    silenced = _spiking_run(brain_folder, silence="superclass:central", bins=3)
    base = _spiking_run(brain_folder, bins=4)   # the untouched run may run longer
    delta = [float(np.abs(silenced.state(i) - base.state(i)).mean()) for i in range(3)]
    silenced.metadata["comparison"] = {"mode": "free", "kl": [None] * 3,
                                       "mean_abs_delta": delta}
    silenced.baseline = base
    rec = tmp_path / "compare.flyrec"
    silenced.save(rec)
    out = tmp_path / "compare.nwb"
    assert main(["convert", str(rec), str(out), "--no-labels"]) == 0
    assert pynwb.validate(path=str(out)) == []
    with pynwb.NWBHDF5IO(str(out), "r") as io:
        nwb = io.read()
        assert len(nwb.intervals["bins"]) == 3
        bins = nwb.intervals["baseline_bins"]
        np.testing.assert_allclose(bins["start_time"][:], [0.0, 0.01, 0.02, 0.03])
        np.testing.assert_allclose(bins["stop_time"][:], [0.01, 0.02, 0.03, 0.04])
        assert list(bins["spikes"][:]) == base.metadata["spiking"]["bin_spikes"]
        baseline = nwb.processing["flyviz"]["Fluorescence"]["baseline_states"]
        np.testing.assert_array_equal(np.asarray(baseline.data[:]), base.states())
    loaded = Recording.load(rec)
    assert loaded.baseline is not None and len(loaded.baseline) == 4
