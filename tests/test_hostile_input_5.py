"""Hostile input, part 5: damaged configs and manifests of each model layout, each one a
mutant that used to end in a traceback or run without end. Every folder is written by
flyviz's own writers and then damaged the way a bad download, a bad edit or a bad disk
would: a byte that is not UTF-8, a number written as text, ``null`` or ``Infinity``, an
entry that is a list, a shape too large to count, a step count of 10**20. Each is one
``flyviz: error:`` line and exit 2 that names the file and the key, on every command that
reads it; the intact folders still load.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from cli_checks import cli_run, one_error_line

from flyviz.errors import FlyvizError
from flyviz.model.checkpoint import MAX_MICROSTEPS, validate_checkpoint
from flyviz.model.resolve import load_model
from flyviz.model.synthetic import make_flygpt_tensors, make_random_checkpoint
from flyviz.model.tokenizer import FlyTokenizer
from flyviz.model.writers import (write_connectome_dataset, write_fly_llm_hf, write_flygpt,
                                  write_recital_web, write_wordbrain)


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tokenizer_path) -> Path:
    """One small model in each layout: ``hf`` (ngxson's), ``wb`` (fly-wordbrain), ``web``
    (Fly Recital), ``flygpt`` and the connectome dataset ``ds`` the last two join to."""
    root = tmp_path_factory.mktemp("layouts")
    ckpt = validate_checkpoint(make_random_checkpoint(
        neurons=120, edges=900, d_embed=16, vocabulary=FlyTokenizer(tokenizer_path).vocab_size,
        readout_rank=6, seed=3, tokenizer_path=tokenizer_path, name="five"))
    write_fly_llm_hf(ckpt, root / "hf")
    write_wordbrain(ckpt, root / "wb", tokenizer_path=tokenizer_path)
    write_recital_web(ckpt, root / "web")
    write_connectome_dataset(ckpt, root / "ds")
    write_flygpt(make_flygpt_tensors(seed=3), root / "flygpt")
    return root


@pytest.fixture
def copy(folders, tmp_path):
    """A fresh copy of the five folders to damage."""
    shutil.copytree(folders, tmp_path / "m")
    return tmp_path / "m"


#: The file each layout is read from first, and the argv of the commands that read it.
LAYOUTS = {
    "hf": ("hf/config.json", ["{m}/hf"]),
    "flygpt": ("flygpt/config.json", ["{m}/flygpt"]),
    "web": ("web/manifest.json", ["{m}/web", "--dataset", "{m}/ds"]),
    "wb": ("wb/manifest.json", ["{m}/wb", "--dataset", "{m}/ds"]),
    "ds": ("ds/manifest.json", ["{m}/wb", "--dataset", "{m}/ds"]),
}


def _commands(model: list[str], m: Path) -> list[list[str]]:
    spec = [a.format(m=m) for a in model]
    return [["info", *spec], ["generate", *spec, "--prompt", "hi", "--max-new-tokens", "2"]]


def _edit(path: Path, edit) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data), encoding="utf-8")  # NaN/inf as JSON5's NaN/Infinity


@pytest.mark.parametrize("how, expected", [
    ("not utf-8", "is not UTF-8 text (byte 5)"),
    ("nested", "nests too deeply"),
])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_config_or_manifest_that_is_not_json_text_is_one_line(capsys, copy, layout, how,
                                                                 expected):
    """A byte flipped to one that is not UTF-8 (a bad disk or download) and a file of
    100,000 ``[`` (Python's parser gives up: RecursionError) were tracebacks."""
    member, model = LAYOUTS[layout]
    path = copy / member
    if how == "not utf-8":
        raw = bytearray(path.read_bytes())
        raw[5] = 0xFF
        path.write_bytes(bytes(raw))
    else:
        path.write_text("[" * 100_000, encoding="utf-8")
    for argv in _commands(model, copy):
        code, _, err = cli_run(capsys, *argv)
        one_error_line(code, err, Path(member).name, expected, "download it again")


@pytest.mark.parametrize("which", ["166k", "49k"])
def test_a_dataset_whose_manifest_is_not_json_says_so_on_every_command(capsys, copy, tmp_path,
                                                                       which):
    """A dataset folder with a broken manifest.json was called "a connectome dataset (the
    graph only), not a model" by info, simulate and verify alike."""
    from flyviz.model.synthetic import make_malecns_arrays
    from flyviz.model.writers import write_malecns_dataset

    if which == "166k":
        folder = write_malecns_dataset(tmp_path / "malecns-166k",
                                       **make_malecns_arrays(neurons=300, edges=3000, seed=3))
    else:
        folder = copy / "ds"
    folder = Path(folder)
    (folder / "manifest.json").write_text("{\n", encoding="utf-8")
    for argv in (["info", str(folder)], ["verify", str(folder)],
                 ["simulate", str(folder), "--out", str(tmp_path / "x.parquet")]):
        code, _, err = cli_run(capsys, *argv)
        one_error_line(code, err, f"{folder / 'manifest.json'} is not valid JSON (line 2, "
                                  "column 1")
        assert "not a model" not in err


def _set(*keys, value):
    def edit(data):
        for key in keys[:-1]:
            data = data[key]
        data[keys[-1]] = value
    return edit


#: A damaged value in a config or manifest: (layout, edit, words the error must hold).
BAD_VALUES = {
    "hf n_edges as text": ("hf", _set("n_edges", value="abc"),
                           ["config.json: n_edges is 'abc', expected an integer"]),
    "hf n_edges NaN": ("hf", _set("n_edges", value=float("nan")),
                       ["config.json: n_edges is nan, expected an integer"]),
    "hf n_neurons Infinity": ("hf", _set("n_neurons", value=float("inf")),
                              ["config.json: n_neurons is inf, expected an integer"]),
    "hf delay_k a list": ("hf", _set("delay_k", value=[8]),
                          ["config.json: delay_k is [8], expected an integer"]),
    "hf leak null": ("hf", _set("leak", value=None),
                     ["config.json: leak is None, expected a number"]),
    "hf layer_norm_eps as text": ("hf", _set("layer_norm_eps", value="abc"),
                                  ["config.json: layer_norm_eps is 'abc', expected a number"]),
    "web leak an object": ("web", _set("config", "leak", value={"a": 1}),
                           ["manifest.json: config.leak is {'a': 1}, expected a number"]),
    "web neurons Infinity": ("web", _set("config", "neurons", value=float("inf")),
                             ["manifest.json: config.neurons is inf, expected an integer"]),
    "web vocabulary 1.5": ("web", _set("config", "vocabulary", value=1.5),
                           ["manifest.json: config.vocabulary is 1.5, expected an integer"]),
    "web files entry a list": ("web", _set("files", "wte", value=[1]),
                               ["manifest.json: files.wte is [1], expected an object"]),
    "web files shape a number": ("web", _set("files", "bias", "shape", value=3),
                                 ["bias.f32: manifest shape 3 does not match the config's [120]"]),
    "web files shape as text": ("web", _set("files", "in_proj", "shape", value=["a"]),
                                ["in_proj.f32: manifest shape ['a'] does not match"]),
    "wb pad_token_id as text": ("wb", _set("web_export", "config", "pad_token_id", value="abc"),
                                ["manifest.json: pad_token_id is 'abc', expected an integer"]),
    "wb leak an object": ("wb", _set("web_export", "config", "leak", value={"a": 1}),
                          ["manifest.json: leak is {'a': 1}, expected a number"]),
    "ds shape past any disk": ("ds", _set("files", "edges_source", "shape", value=[10**20]),
                               ["edges_source.u16 is 1,800 bytes but [100000000000000000000] x "
                                "uint16 needs"]),
    "ds shape negative": ("ds", _set("files", "edges_source", "shape", value=[-3, -300]),
                          ["edges_source.u16: shape [-3, -300] has a negative size"]),
    "ds anatomy a list": ("ds", _set("anatomy", value=["synthetic"]),
                          ["manifest.json: anatomy is ['synthetic'], expected an object"]),
    # Python reads the text "false" as true: the weights would be scaled that the file says not.
    "flygpt degree_normalization as text": (
        "flygpt", _set("degree_normalization", value="false"),
        ["config.json: degree_normalization is 'false', expected true or false"]),
    "flygpt degree_normalization 0": (
        "flygpt", _set("degree_normalization", value=0),
        ["config.json: degree_normalization is 0, expected true or false"]),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_a_value_of_the_wrong_kind_is_one_line_naming_its_key(capsys, copy, case):
    """Each was a traceback (ValueError, TypeError, OverflowError or AttributeError from
    ``int()``, ``float()``, ``.get`` or ``np.prod`` on the value as read)."""
    layout, edit, expected = BAD_VALUES[case]
    member, model = LAYOUTS[layout]
    _edit(copy / member, edit)
    for argv in _commands(model, copy):
        code, _, err = cli_run(capsys, *argv)
        one_error_line(code, err, *expected)


@pytest.mark.parametrize("size", ["abc", float("nan"), [28416], 1.5])
def test_verify_reports_a_manifest_size_that_is_no_number_as_a_failed_check(capsys, copy,
                                                                           size):
    """``flyviz verify`` of a web export whose manifest gives a file's ``bytes`` as text,
    NaN or a list ended in a traceback (``int()`` of it); it is a failed check (exit 1,
    verify's status for a check that fails) naming the file, and the others still run."""
    _edit(copy / "web/manifest.json", _set("files", "wte", "bytes", value=size))
    code, out, err = cli_run(capsys, "verify", str(copy / "web"), "--dataset", str(copy / "ds"))
    assert code == 1 and "Traceback" not in err, err
    assert f"the manifest gives wte.f32 a size of {size!r}, not a whole number of bytes" in out
    assert "NOT verified: 1 of" in out
    assert "sha256 in_proj.f32" in out


@pytest.mark.parametrize("where", [("steps", 0, "top1_probability"),
                                   ("steps", 2, "mean_abs_state"),
                                   ("final_state_mean_abs",)])
@pytest.mark.parametrize("value", ["abc", [0.5], float("nan")])
def test_verify_fails_a_golden_trace_whose_expected_numbers_are_no_numbers(capsys, copy,
                                                                           where, value):
    """Text or a list as a golden step's expected probability or mean |x| ended ``verify``
    in a traceback mid-replay, and NaN passed every comparison (``nan > tolerance`` is
    false): each is now that trace's failed check, named, and the other traces still run."""
    _edit(copy / "web/manifest.json", _set("golden", 0, *where, value=value))
    code, out, err = cli_run(capsys, "verify", str(copy / "web"), "--dataset", str(copy / "ds"))
    assert code == 1 and "Traceback" not in err, err
    what = f"step {where[1]}'s {where[2]}" if len(where) == 3 else where[0]
    assert (f"the golden trace is malformed ({what} is {value!r}, not a finite number)"
            in out), out
    assert "NOT verified: 1 of" in out
    assert out.count("60 tokens identical") == 3  # the other three traces


@pytest.mark.parametrize("damage", ["truncated", "empty", "not utf-8"])
def test_verify_fails_a_tokenizer_that_does_not_read(capsys, copy, damage):
    """No digest is recorded for ngxson's tokenizer.json, so ``verify`` said "verified" of a
    truncated one, and ``generate`` then stopped on it; reading it is now a check."""
    tokenizer = copy / "hf/tokenizer.json"
    whole = tokenizer.read_bytes()
    tokenizer.write_bytes({"truncated": whole[:len(whole) // 2], "empty": b"",
                           "not utf-8": b"\xff" + whole[1:]}[damage])
    code, out, err = cli_run(capsys, "verify", str(copy / "hf"))
    assert code == 1 and "Traceback" not in err, err
    assert "NOT verified: 1 of" in out
    assert "tokenizer.json reads: cannot read tokenizer" in out and "download it again" in out
    code, _, err = cli_run(capsys, "generate", str(copy / "hf"), "--prompt", "hi")
    one_error_line(code, err, "cannot read tokenizer")


def test_verify_reads_an_intact_tokenizer(capsys, copy):
    code, out, err = cli_run(capsys, "verify", str(copy / "hf"))
    assert code == 0, out + err
    assert "tokenizer.json reads" in out and "tokens, within the model's" in out


def test_values_written_as_whole_floats_still_load(capsys, copy):
    """What the checks accept: ``8.0`` for 8, an integer leak of 1 (a number, in range)."""
    _edit(copy / "hf/config.json", _set("delay_k", value=8.0))
    _edit(copy / "web/manifest.json", _set("config", "leak", value=1))
    for spec in (["hf"], ["web", "--dataset", "ds"]):
        code, out, err = cli_run(capsys, "info", str(copy / spec[0]),
                                 *[str(copy / a) if a == "ds" else a for a in spec[1:]])
        assert code == 0 and not err, err
        assert "neurons" in out


@pytest.mark.parametrize("microsteps", [10**20, MAX_MICROSTEPS + 1, 0])
def test_flygpt_microsteps_out_of_range_are_refused_before_any_step(capsys, copy, microsteps):
    """A damaged ``microsteps`` of 10**20 made ``generate`` loop for ever (each token runs
    that many updates); the loader refuses it at once, and ``info`` says the same."""
    _edit(copy / "flygpt/config.json", _set("microsteps", value=microsteps))
    for argv in _commands(LAYOUTS["flygpt"][1], copy):
        started = time.monotonic()
        code, _, err = cli_run(capsys, *argv)
        assert time.monotonic() - started < 10
        one_error_line(code, err, f"microsteps {microsteps}" if microsteps else "microsteps",
                       "positive integer" if microsteps == 0 else f"outside 1..{MAX_MICROSTEPS}")
    with pytest.raises(FlyvizError):
        load_model(str(copy / "flygpt"))


def test_flygpt_degree_normalization_false_leaves_the_learned_weights_unscaled(copy):
    """``false`` loads the edge values as stored; ``true`` (the default) divides each by
    the square root of its target's in-degree, at least 1."""
    import numpy as np

    scaled = load_model(str(copy / "flygpt"))
    _edit(copy / "flygpt/config.json", _set("degree_normalization", value=False))
    plain = load_model(str(copy / "flygpt"))
    assert plain.metadata["degree_normalization"] is False
    assert np.array_equal(scaled.w_offsets, plain.w_offsets)
    in_degree = np.diff(plain.w_offsets)
    expected = plain.w_values / np.repeat(np.sqrt(np.maximum(in_degree, 1)), in_degree)
    assert np.allclose(scaled.w_values, expected, rtol=1e-6)
    assert not np.allclose(scaled.w_values, plain.w_values)


def test_flygpt_at_the_microstep_limit_still_generates(capsys, copy):
    _edit(copy / "flygpt/config.json", _set("microsteps", value=MAX_MICROSTEPS))
    code, out, err = cli_run(capsys, "generate", str(copy / "flygpt"), "--prompt", "hi",
                             "--max-new-tokens", "2")
    assert code == 0 and not err, err
    assert out.strip()


# ------------------------------------------------------------------ spike tables (CSV)


@pytest.fixture
def shiu(tmp_path):
    """The four-neuron brain of part 4 in the authors' layout, and 20 ms of its spikes
    (``--compare``'s input) as a CSV table."""
    import pandas as pd
    from test_hostile_input_4 import write_brain

    brain = write_brain(tmp_path / "brain")
    spikes = tmp_path / "spikes.parquet"
    assert cli_run_quiet(["simulate", str(brain), "--excite", "all", "--rate", "400",
                          "--duration", "20ms", "--trials", "2", "--out", str(spikes)]) == 0
    table = pd.read_parquet(spikes)
    assert len(table) > 10
    return brain, table


def cli_run_quiet(argv: list[str]) -> int:
    from flyviz.cli import main

    return main(argv)


def _compare(capsys, brain: Path, table_file: Path) -> tuple[int, str, str]:
    return cli_run(capsys, "simulate", str(brain), "--excite", "all", "--rate", "400",
                   "--duration", "20ms", "--trials", "2", "--compare", str(table_file))


pytest_spiking = pytest.mark.usefixtures("spiking_kernels")


@pytest_spiking
def test_a_spike_table_whose_rows_end_in_a_delimiter_is_read_as_written(capsys, tmp_path,
                                                                         shiu):
    """A comma at each row's end (some tools write one) made pandas take the first column
    as an index and shift the others: ``t`` was read from ``trial``. It reads as written."""
    brain, table = shiu
    lines = table.to_csv(index=False).splitlines()
    text = lines[0] + "\n" + "".join(line + ",\n" for line in lines[1:])
    (tmp_path / "trailing.csv").write_text(text, encoding="utf-8")
    code, out, err = _compare(capsys, brain, tmp_path / "trailing.csv")
    assert code == 0 and not err, err
    assert f"identical, {len(table)} spikes" in out


@pytest_spiking
@pytest.mark.parametrize("row, expected", [(1, "its first row holds more fields than the header "
                                                "names"),
                                           (3, "Expected 4 fields in line 4, saw")])
@pytest.mark.parametrize("extra", [1, 100_000])
def test_a_spike_table_row_longer_than_its_header_is_one_line_at_once(capsys, tmp_path, shiu,
                                                                      extra, row, expected):
    """A first row with fields the header does not name was read with its columns shifted
    (one more: ``t`` from ``trial``) or took minutes (100,000 more: pandas built an index of
    them all); a later one was refused already, and still is."""
    brain, table = shiu
    lines = table.to_csv(index=False).splitlines()
    lines[row] += ",7" * extra
    (tmp_path / "long.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    started = time.monotonic()
    code, _, err = _compare(capsys, brain, tmp_path / "long.csv")
    assert time.monotonic() - started < 10
    one_error_line(code, err, "long.csv", expected)
    code, _, err = cli_run(capsys, "simulate", str(brain), "--input-spikes",
                           str(tmp_path / "long.csv"), "--duration", "20ms", "--out",
                           str(tmp_path / "x.parquet"))
    one_error_line(code, err, "the input spikes file", expected)
    assert not (tmp_path / "x.parquet").exists()


@pytest_spiking
@pytest.mark.parametrize("t", [1e300, 2.0**70, 0.0205])
def test_a_compared_spike_after_the_run_is_one_line_without_a_warning(capsys, tmp_path, shiu,
                                                                      t):
    """A time of 1e300 s was cast to an int64 tick (a RuntimeWarning on stderr, a garbage
    tick below zero) and reported as a difference (exit 1); it is after the run's end."""
    brain, table = shiu
    table = table.copy()
    table.loc[table.index[-1], "t"] = t
    table.to_csv(tmp_path / "late.csv", index=False)
    code, _, err = _compare(capsys, brain, tmp_path / "late.csv")
    one_error_line(code, err, "late.csv holds a spike at", "after this run's 20 ms",
                   "give a longer --duration")


@pytest_spiking
def test_an_excite_file_saved_with_a_byte_order_mark_reads_its_first_id(capsys, tmp_path,
                                                                       shiu):
    """Notepad's UTF-8 starts the file with a BOM: the first id was refused as "line 1 must
    hold root ids". It excites the same neurons as the file without one."""
    from test_hostile_input_4 import IDS

    brain, _ = shiu
    for name, prefix in (("plain.txt", b""), ("bom.txt", b"\xef\xbb\xbf")):
        ids = tmp_path / name
        ids.write_bytes(prefix + f"{IDS[0]}\n{IDS[2]}\n".encode())
        code, out, err = cli_run(capsys, "simulate", str(brain), "--excite-file", str(ids),
                                 "--rate", "400", "--duration", "20ms", "--out",
                                 str(tmp_path / f"{name}.parquet"))
        assert code == 0 and not err, err
        assert "2 excited at 400 Hz" in out
    import pandas as pd

    plain, bom = (pd.read_parquet(tmp_path / f"{n}.parquet") for n in ("plain.txt", "bom.txt"))
    assert len(plain) > 0
    assert plain.drop(columns="exp_name").equals(bom.drop(columns="exp_name"))


def test_a_file_or_an_unpublished_flygpt_model_is_named_as_given(capsys, monkeypatch,
                                                                tmp_path) -> None:
    """``info /etc/passwd`` said "/etc holds no Fly LLM checkpoint" (the folder of the file
    given); ``QuixiAI/FlyGPT/bogus`` offline gave download advice for files that are not
    published, without saying that the subfolder is none of FlyGPT's models."""
    stray = tmp_path / "notes.txt"
    stray.write_text("not a model\n")
    code, _, err = cli_run(capsys, "info", str(stray))
    one_error_line(code, err, f"{stray} is a file, not a model, and its folder {tmp_path} "
                              "holds no checkpoint")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hub"))
    code, _, err = cli_run(capsys, "info", "QuixiAI/FlyGPT/bogus")
    one_error_line(code, err, "'bogus' is none of its published models (the root, scrambled/, "
                              "init/, full-cns/)")
    code, _, err = cli_run(capsys, "info", "QuixiAI/FlyGPT/scrambled")
    assert code == 2 and "none of its published models" not in err, err


@pytest.mark.parametrize("edit", ["no block", "empty", "other buffers"])
def test_a_web_export_whose_manifest_binds_it_to_no_graph_is_refused(copy, capsys, edit) -> None:
    """A web export holds parameters only: without graph.frozen_buffers_sha256 it ran on any
    dataset of its size, as fly-wordbrain weights without their manifest did."""
    path = copy / "web" / "manifest.json"
    manifest = json.loads(path.read_text())
    if edit == "no block":
        del manifest["graph"]["frozen_buffers_sha256"]
    elif edit == "empty":
        manifest["graph"]["frozen_buffers_sha256"] = {}
    else:
        manifest["graph"]["frozen_buffers_sha256"] = {"brain.other": "0" * 64}
    path.write_text(json.dumps(manifest))
    for command in (["info"], ["generate", "--prompt", "the", "--max-new-tokens", "2"]):
        code, _, err = cli_run(capsys, command[0], str(copy / "web"), "--dataset",
                               str(copy / "ds"), *command[1:])
        one_error_line(code, err, "records no frozen-buffer digests of the graph",
                       "nothing binds these weights to")
