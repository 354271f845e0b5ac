"""Recordings as xarray, Zarr, NWB and .npz: the same numbers and labels come back, the
states are not copied, and ``flyviz convert`` fails on bad input with one line."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from flyviz.cli import main
from flyviz.errors import ExportError, InputError, MissingDependencyError, RecordingError
from flyviz.record.convert import convert
from flyviz.record.recording import Recording
from flyviz.record.run import GenerationSettings
from flyviz.record.runner import Model

xr = pytest.importorskip("xarray")
PROMPT = "the little dog saw"


@pytest.fixture
def model(tiny_checkpoint):
    with Model(tiny_checkpoint, spec="tiny") as loaded:
        yield loaded


@pytest.fixture
def recording(model):
    return model.record(PROMPT, GenerationSettings(max_new_tokens=6, temperature=0.9, seed=7),
                        interventions=["silence side:left@2:"])


def test_to_xarray_labels_tokens_and_neurons(recording, model):
    ds = recording.to_xarray(model)
    assert ds["state"].dims == ("token", "neuron")
    assert ds["state"].shape == (len(recording), model.neurons)
    assert ds["state"].dtype == np.float16
    assert dict(ds["state"].attrs) == {"long_name": "state x after the token", "units": "1"}
    np.testing.assert_array_equal(ds["state"].values.astype(np.float32), recording.states())
    np.testing.assert_array_equal(ds["token_id"], recording.token_ids)
    assert list(ds["token_text"].values) == recording.token_texts
    assert list(ds["phase"].values) == recording.phases
    np.testing.assert_array_equal(ds["probability"], recording.probabilities)
    generation = ds["generation_index"].values[ds["phase"].values == "generation"]
    assert list(generation) == list(range(len(recording.generated_ids)))
    ids, probabilities = recording.top_k_arrays()
    np.testing.assert_array_equal(ds["top_k_id"], ids)
    anatomy = model.anatomy
    assert list(ds["superclass"].values) == anatomy.superclass
    assert list(ds["cell_type"].values) == anatomy.cell_type
    np.testing.assert_array_equal(ds["body_id"], anatomy.body_id)
    x = ds["x"].values
    assert np.isnan(x[~anatomy.valid]).all()
    np.testing.assert_allclose(x[anatomy.valid], anatomy.positions[anatomy.valid, 0] * 0.008,
                               rtol=1e-6)
    assert ds.attrs["prompt"] == PROMPT and ds.attrs["text"] == recording.text
    assert ds.attrs["seed"] == 7 and ds.attrs["anatomy"] == "synthetic"
    assert '"kind": "silence"' in ds.attrs["interventions"]
    # Selections by label work as in any xarray dataset.
    left = ds["state"].where(ds["side"] == "left", drop=True)
    assert np.all(left.isel(token=slice(2, None)).values == 0)


def test_without_a_model_the_neurons_carry_only_their_index(recording):
    ds = recording.to_xarray()
    assert set(ds["state"].coords) >= {"token", "neuron", "token_id", "phase"}
    assert not {"superclass", "x", "body_id"} & set(ds.coords)
    assert "pass the model" in ds.attrs["neuron_labels"]
    with pytest.raises(RecordingError, match="neurons"):
        recording.to_xarray(_other_checkpoint())


def _other_checkpoint():
    from flyviz.model.synthetic import make_random_checkpoint

    return make_random_checkpoint(neurons=77, edges=500, vocabulary=300, with_anatomy=True)


def test_a_saved_recording_is_exported_from_its_memory_map(recording, model, tmp_path):
    path = recording.save(tmp_path / "run.flyrec")
    for verify in (True, False):
        loaded = Recording.load(path, verify=verify)
        state = loaded.to_xarray(model)["state"].variable._data
        assert isinstance(state, np.memmap)  # the file's pages, not a copy
        np.testing.assert_array_equal(np.asarray(state), recording.state_blocks()[0][:len(loaded)])
    # A lazily opened file is checked before its states are handed out.
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF
    damaged = tmp_path / "damaged.flyrec"
    damaged.write_bytes(bytes(raw))
    with pytest.raises(RecordingError, match="checksum"):
        Recording.load(damaged, verify=False).to_xarray()


def test_a_loaded_recording_names_its_file_and_is_never_converted_onto_it(recording,
                                                                         tmp_path):
    # Recording.source is what convert() asks, rather than the recording's private field.
    assert recording.source is None and recording.snapshot().source is None
    path = recording.save(tmp_path / "run.flyrec")
    loaded = Recording.load(path)
    assert loaded.source == path and loaded.snapshot().source == path
    before = path.read_bytes()
    with pytest.raises(InputError, match="is the recording itself"):
        convert(loaded.snapshot(), path, "npz")
    assert path.read_bytes() == before


def test_a_long_run_in_memory_spans_several_blocks(tiny_checkpoint):
    with Model(tiny_checkpoint) as model:
        long = model.record("the", GenerationSettings(max_new_tokens=150, seed=1),
                            states_dtype="float32")
    assert len(long) > 64 and len(long.state_blocks()) > 1
    np.testing.assert_array_equal(np.asarray(long.to_xarray()["state"]), long.states())


def test_zarr_round_trip(recording, model, tmp_path):
    pytest.importorskip("zarr")
    from flyviz.record.convert import LABELS_ATTR, open_zarr

    out = recording.to_zarr(tmp_path / "run.zarr", model)
    back = open_zarr(out)
    xr.testing.assert_identical(back.load(), recording.to_xarray(model).load())
    # Other readers see integer codes and the table of texts, not Zarr strings.
    raw = xr.open_zarr(out, consolidated=False)
    assert raw["token_text"].dtype.kind == "i" and raw["superclass"].dtype.kind == "i"
    table = raw["token_text"].attrs[LABELS_ATTR]
    assert [table[i] for i in raw["token_text"].values] == recording.token_texts
    assert raw["state"].encoding["chunks"] == (len(recording), model.neurons)
    # Writing again replaces the store; a folder that is not one is left alone.
    shorter = Model(model.checkpoint).record("the", GenerationSettings(max_new_tokens=1))
    shorter.to_zarr(out)
    assert open_zarr(out).sizes["token"] == len(shorter)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ExportError, match="not a store flyviz wrote"):
        recording.to_zarr(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "run.zarr"]


def test_npz_round_trip_without_pickles(recording, model, tmp_path):
    import json

    out = recording.to_npz(tmp_path / "run.npz", model)
    with np.load(out, allow_pickle=False) as data:
        np.testing.assert_array_equal(data["state"], recording.state_blocks()[0])
        np.testing.assert_array_equal(data["token_id"], recording.token_ids)
        assert list(data["token_text"]) == recording.token_texts
        assert list(data["superclass"]) == model.anatomy.superclass
        attributes = json.loads(str(data["attributes"]))
    assert attributes["prompt"] == PROMPT and attributes["seed"] == 7


def test_nwb_round_trip_and_validation(recording, model, tmp_path):
    pynwb = pytest.importorskip("pynwb")
    out = recording.to_nwb(tmp_path / "run.nwb", model)
    assert pynwb.validate(path=str(out)) == []
    with pynwb.NWBHDF5IO(str(out), "r") as io:
        nwb = io.read()
        series = nwb.processing["flyviz"]["Fluorescence"]["states"]
        data = np.asarray(series.data[:])
        assert data.shape == (len(recording), model.neurons)  # time first
        np.testing.assert_array_equal(data, recording.states())
        assert series.rate == 1.0 and series.starting_time == 0.0
        table = series.rois.table
        assert list(series.rois.data[:]) == list(range(model.neurons))
        assert list(table["superclass"][:]) == model.anatomy.superclass
        assert list(table["side"][:]) == model.anatomy.side
        x = np.asarray(table["x"][:])
        np.testing.assert_allclose(x[model.anatomy.valid],
                                   model.anatomy.positions[model.anatomy.valid, 0] * 0.008,
                                   rtol=1e-6)
        first = table["voxel_mask"][int(np.flatnonzero(model.anatomy.valid)[0])]
        assert first[0][3] == 1.0
        tokens = nwb.intervals["tokens"]
        assert list(tokens["token_text"][:]) == recording.token_texts
        assert list(tokens["token_id"][:]) == list(recording.token_ids)
        assert list(tokens["start_time"][:]) == list(range(len(recording)))
        assert '"prompt": "the little dog saw"' in nwb.notes
    bare = recording.to_nwb(tmp_path / "bare.nwb")
    assert pynwb.validate(path=str(bare)) == []
    with pynwb.NWBHDF5IO(str(bare), "r") as io:
        assert "superclass" not in io.read().processing["flyviz"]["ImageSegmentation"][
            "neurons"].colnames


def test_a_missing_optional_package_is_one_line(recording, monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "pynwb", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'flyviz\[nwb\]'"):
        recording.to_nwb(tmp_path / "run.nwb")
    path = recording.save(tmp_path / "run.flyrec")
    assert main(["convert", str(path), str(tmp_path / "run.nwb"), "--no-labels"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "flyviz[nwb]" in err[0]
    assert not (tmp_path / "run.nwb").exists()


@pytest.fixture
def saved_run(tiny_checkpoint, tmp_path):
    """A recording of a model saved as a folder, which the recording names."""
    from flyviz.model.writers import write_connectome_dataset, write_recital_web
    from flyviz.record.runner import record_prompt

    write_recital_web(tiny_checkpoint, tmp_path / "model")
    write_connectome_dataset(tiny_checkpoint, tmp_path / "dataset")
    model = Model.load(tmp_path / "model")
    recording = record_prompt(model.checkpoint, PROMPT, GenerationSettings(max_new_tokens=3))
    return recording.save(tmp_path / "run.flyrec"), model


@pytest.mark.parametrize("fmt", ["zarr", "npz", "nwb"])
def test_convert_command_writes_each_format_with_the_recorded_models_labels(
        saved_run, tmp_path, capsys, fmt):
    path, model = saved_run
    out = tmp_path / f"out.{fmt}"
    assert main(["convert", str(path), "--to", fmt, str(out)]) == 0
    assert f"with the neurons of {model.name}" in capsys.readouterr().err
    if fmt == "zarr":
        from flyviz.record.convert import open_zarr

        assert list(open_zarr(out)["superclass"].values) == model.anatomy.superclass
    elif fmt == "npz":
        with np.load(out, allow_pickle=False) as data:
            assert list(data["cell_type"]) == model.anatomy.cell_type
    else:
        import pynwb

        assert pynwb.validate(path=str(out)) == []


def _one_line_error(code, capsys, fragment):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("flyviz: error:"), err
    assert fragment in lines[0], lines[0]


def test_convert_bad_input_is_one_line_and_exit_2(saved_run, tmp_path, capsys):
    path, _ = saved_run
    cases = [
        (["convert", str(tmp_path / "nope.flyrec"), str(tmp_path / "a.zarr")], "no such file"),
        (["convert", str(path), str(tmp_path / "a.txt")], "cannot tell the format"),
        (["convert", str(path), "--to", "hdf", str(tmp_path / "a.h5")], "invalid choice"),
        (["convert", str(path), str(tmp_path / "a.npz"), "--model", str(tmp_path / "none")],
         "--no-labels"),
        (["convert", str(path), str(tmp_path / "a.npz"), "--no-labels", "--model", "demo"],
         "leave out --model"),
        # It said "cannot write ...: File exists", naming neither the file nor the problem.
        (["convert", str(path), str(tmp_path / "run.flyrec" / "x.npz"), "--no-labels"],
         f"cannot write OUT {tmp_path / 'run.flyrec' / 'x.npz'}: {path} is a file, not a "
         "folder"),
        (["convert", str(path), str(tmp_path / "run.flyrec" / "sub" / "x.zarr"),
          "--no-labels"], f"{path} is a file, not a folder"),
        # A Zarr folder named x.npz was written: every tool then reads it as an archive.
        (["convert", str(path), str(tmp_path / "a.npz"), "--to", "zarr", "--no-labels"],
         "a.npz is named as a NumPy archive but --to zarr writes a Zarr store: name it a.zarr"),
        (["convert", str(path), str(tmp_path / "a.zarr"), "--to", "nwb", "--no-labels"],
         "a.zarr is named as a Zarr store but --to nwb writes an NWB file"),
    ]
    for argv, fragment in cases:
        try:
            code = main(argv)
        except SystemExit as exc:  # a usage error, from argparse
            code = exc.code
        _one_line_error(code, capsys, fragment)
    (tmp_path / "garbage.flyrec").write_bytes(b"\x00" * 100)
    _one_line_error(main(["convert", str(tmp_path / "garbage.flyrec"), str(tmp_path / "a.npz")]),
                    capsys, "garbage.flyrec")
    assert not (tmp_path / "a.npz").exists() and not (tmp_path / "a.zarr").exists()


def test_saved_files_and_folders_get_the_mode_a_new_file_gets(recording, model, tmp_path):
    """A recording, a table or a store written through a temporary beside it is readable as
    any new file of the user's is (the umask's mode), not by its owner only: the temporary
    file's 0600 (and folder's 0700) used to stick through the rename, so a recording put on
    a shared machine or a web host could not be read there."""
    pytest.importorskip("zarr")
    from flyviz import fileio
    from flyviz.analysis.circuit_export import write_json

    file_mode, folder_mode = 0o666 & ~fileio._UMASK, 0o777 & ~fileio._UMASK
    assert file_mode & 0o044, "this test needs a umask that lets others read new files"
    written = [recording.save(tmp_path / "run.flyrec"), recording.to_npz(tmp_path / "run.npz"),
               write_json(tmp_path / "circuit.json", {"a": 1})]
    for path in written:
        assert oct(path.stat().st_mode & 0o777) == oct(file_mode), path.name
    with fileio.new_folder(tmp_path / "nulls") as scratch:
        (scratch / "x.txt").write_text("x", encoding="utf-8")
    for path in (tmp_path / "nulls", recording.to_zarr(tmp_path / "run.zarr", model)):
        assert oct(path.stat().st_mode & 0o777) == oct(folder_mode), path.name
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "circuit.json", "nulls", "run.flyrec", "run.npz", "run.zarr"]   # no temporaries left


@pytest.fixture(params=["forced", "free"])
def comparison(tiny_checkpoint, tmp_path, request):
    from flyviz.model.interventions import as_interventions
    from flyviz.record.compare import Comparison

    runner = Comparison.for_checkpoint(tiny_checkpoint, as_interventions(["silence side:left@2:"]))
    try:
        recording = runner.record(PROMPT, GenerationSettings(max_new_tokens=6, temperature=0.9,
                                                              seed=3), mode=request.param,
                                  spec="tiny")
    finally:
        runner.close()
    return Recording.load(recording.save(tmp_path / "comparison.flyrec"))


def _every_array(recording):
    """Every array a recording stores, by the name the converters give it."""
    def run(rec, prefix):
        ids, probabilities = rec.top_k_arrays()
        texts = np.full(ids.shape, "", dtype=object)
        for i, frame in enumerate(rec):
            texts[i, :len(frame.top_k_text)] = frame.top_k_text
        return {f"{prefix}state": rec.states(), f"{prefix}token_id": rec.token_ids,
                f"{prefix}token_text": rec.token_texts, f"{prefix}position": rec.positions,
                f"{prefix}phase": rec.phases, f"{prefix}predicted_id": rec.predicted_ids,
                f"{prefix}predicted_text": rec.predicted_texts,
                f"{prefix}probability": rec.probabilities,
                f"{prefix}mean_abs_state": rec.mean_abs_states,
                f"{prefix}top_k_id": ids, f"{prefix}top_k_probability": probabilities,
                f"{prefix}top_k_text": texts.astype(str)}

    arrays = run(recording, "")
    arrays.update(run(recording.baseline, "baseline_"))
    meta = recording.metadata["comparison"]
    for name in ("kl", "mean_abs_delta"):
        arrays[name] = [np.nan if v is None else v for v in meta[name]]
    return arrays


def _assert_same(got, want, name):
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-6,
                                   err_msg=name)
    else:
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_a_comparison_keeps_its_untouched_run_and_numbers_in_every_format(comparison,
                                                                         tmp_path):
    """Each format holds every array of a comparison recording (both runs' states, token
    tables and top-k ids, probabilities and texts, and the per-frame KL and mean |dx|),
    with the comparison's metadata and the untouched run's as attributes."""
    import json

    pytest.importorskip("zarr")
    pynwb = pytest.importorskip("pynwb")
    from flyviz.record.convert import open_zarr

    want = _every_array(comparison)
    assert comparison.baseline is not None and len(comparison.baseline)
    top_texts = want["top_k_text"]
    assert (top_texts != "").any() and (top_texts[0, :len(comparison[0].top_k_text)]
                                        == list(comparison[0].top_k_text)).all()
    for to in ("npz", "zarr"):
        out = tmp_path / f"c.{to}"
        assert main(["convert", str(tmp_path / "comparison.flyrec"), str(out),
                     "--no-labels"]) == 0
        if to == "npz":
            data = np.load(out, allow_pickle=False)
            attrs = json.loads(str(data["attributes"]))
        else:
            data = open_zarr(out).load()
            attrs = data.attrs
            assert data["baseline_state"].dims == ("baseline_token", "neuron")
        for name, values in want.items():
            _assert_same(data[name], values, f"{to}: {name}")
        assert json.loads(attrs["comparison"]) == comparison.metadata["comparison"]
        assert json.loads(attrs["baseline_metadata"]) == comparison.baseline.metadata
        assert attrs["baseline_text"] == comparison.baseline.text
    out = tmp_path / "c.nwb"
    assert main(["convert", str(tmp_path / "comparison.flyrec"), str(out), "--no-labels"]) == 0
    assert pynwb.validate(path=str(out)) == []
    with pynwb.NWBHDF5IO(str(out), "r") as io:
        nwb = io.read()
        series = nwb.processing["flyviz"]["Fluorescence"]
        for prefix, table in (("", nwb.intervals["tokens"]),
                              ("baseline_", nwb.intervals["baseline_tokens"])):
            _assert_same(series[f"{prefix}states"].data[:], want[f"{prefix}state"], prefix)
            for name in ("token_id", "token_text", "position", "phase", "predicted_id",
                         "predicted_text", "probability", "mean_abs_state"):
                _assert_same(table[name][:], want[prefix + name], prefix + name)
            rows = len(table)
            ids, probabilities = want[f"{prefix}top_k_id"], want[f"{prefix}top_k_probability"]
            texts = want[f"{prefix}top_k_text"]
            for i in range(rows):
                kept = ids[i] >= 0
                _assert_same(table["top_k_id"][i], ids[i][kept], "top_k_id")
                _assert_same(table["top_k_probability"][i], probabilities[i][kept], "top_k_p")
                _assert_same(table["top_k_text"][i], texts[i][kept], "top_k_text")
        for name in ("kl", "mean_abs_delta"):
            _assert_same(nwb.intervals["tokens"][name][:], want[name], name)
        assert json.loads(json.loads(nwb.notes)["comparison"]) == \
            comparison.metadata["comparison"]


@pytest.mark.parametrize("suffix, what", [(".zarr", "a Zarr store"), (".npz", "a NumPy archive")])
def test_a_converted_file_given_as_a_recording_says_what_it_is(recording, tmp_path, capsys,
                                                               suffix, what):
    """A Zarr store (a folder) read as a recording said 'it is a folder'; what convert
    writes is for other tools and is not read back."""
    from cli_checks import one_error_line

    out = recording.to_zarr(tmp_path / "run.zarr") if suffix == ".zarr" else \
        recording.to_npz(tmp_path / "run.npz")
    for argv in (["replay", str(out)], ["share", str(out), "--out", str(tmp_path / "p.html")]):
        code = main(argv)
        one_error_line(code, capsys.readouterr().err,
                       f"run{suffix} is {what}, which flyviz convert writes for other tools",
                       "from .flyrec files only")
    with pytest.raises(RecordingError, match="from .flyrec files only"):
        Recording.load(out)


def test_mean_abs_state_is_copied_exactly_by_every_format(recording, tmp_path):
    """The recording stores each frame's mean |x| as float64; every format and to_xarray
    copy those numbers bit for bit (they were read as float32 and widened again, ~1e-8
    off)."""
    pytest.importorskip("zarr")
    pynwb = pytest.importorskip("pynwb")
    from flyviz.model.safetensors_io import SafetensorsFile
    from flyviz.record.convert import open_zarr

    path = recording.save(tmp_path / "run.flyrec")
    stored = np.array(SafetensorsFile(path).get("mean_abs_state"))
    assert stored.dtype == np.float64
    loaded = Recording.load(path)
    assert loaded.mean_abs_states.dtype == np.float64
    np.testing.assert_array_equal(loaded.mean_abs_states, stored)
    np.testing.assert_array_equal(loaded.to_xarray()["mean_abs_state"].values, stored)
    with np.load(loaded.to_npz(tmp_path / "run.npz"), allow_pickle=False) as data:
        np.testing.assert_array_equal(data["mean_abs_state"], stored)
    np.testing.assert_array_equal(
        open_zarr(loaded.to_zarr(tmp_path / "run.zarr"))["mean_abs_state"].values, stored)
    with pynwb.NWBHDF5IO(str(loaded.to_nwb(tmp_path / "run.nwb")), "r") as io:
        column = np.asarray(io.read().intervals["tokens"]["mean_abs_state"][:])
    np.testing.assert_array_equal(column, stored)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux's /proc")
@pytest.mark.parametrize("name", ["x.nwb", "x.npz", "x.zarr"])
def test_a_folder_that_takes_no_file_is_said_so_not_a_full_disk(recording, tmp_path, capsys,
                                                                 name):
    """/proc takes no new file and reports 0 bytes of 0 free: NWB said "no space left on
    device (it needs about 16.1 MB, 0.0 MB are free)"; every format now says the folder
    takes no new files, before anything is written."""
    pytest.importorskip({"x.nwb": "pynwb", "x.zarr": "zarr", "x.npz": "numpy"}[name])
    path = recording.save(tmp_path / "run.flyrec")
    code = main(["convert", str(path), f"/proc/{name}", "--no-labels"])
    _one_line_error(code, capsys, "the folder /proc takes no new files")
    with pytest.raises(ExportError, match="takes no new files"):
        {"x.nwb": recording.to_nwb, "x.npz": recording.to_npz,
         "x.zarr": recording.to_zarr}[name](f"/proc/{name}")


def test_a_file_system_that_reports_no_size_is_not_a_full_disk(recording, tmp_path,
                                                               monkeypatch):
    """A pseudo-file system reports 0 bytes of 0 free: where it takes files, NWB is written
    (the free-space check is for disks that report a size)."""
    pynwb = pytest.importorskip("pynwb")
    from flyviz.record import convert as convert_module

    real = convert_module.shutil.disk_usage
    monkeypatch.setattr(convert_module.shutil, "disk_usage",
                        lambda folder: real(folder)._replace(total=0, used=0, free=0))
    out = recording.to_nwb(tmp_path / "run.nwb")
    assert pynwb.validate(path=str(out)) == []


def test_a_zarr_store_opens_with_a_plain_open_zarr_without_a_warning(recording, tmp_path):
    """The store's metadata is consolidated: xr.open_zarr(path), with no options, opens it
    without "Failed to open Zarr store with consolidated metadata", and writing it warns of
    nothing either."""
    import warnings

    pytest.importorskip("zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = recording.to_zarr(tmp_path / "run.zarr")
        plain = xr.open_zarr(out)
    np.testing.assert_array_equal(plain["state"].values, recording.states())
