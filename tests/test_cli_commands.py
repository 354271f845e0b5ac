"""flyviz info / generate / bench on small checkpoints, and their one-line errors."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from flyviz.cli import main
from flyviz.model.synthetic import make_random_checkpoint
from flyviz.model.writers import write_connectome_dataset, write_fly_llm_hf, write_recital_web


@pytest.fixture
def web_model(tiny_checkpoint, tmp_path):
    write_recital_web(tiny_checkpoint, tmp_path / "model")
    write_connectome_dataset(tiny_checkpoint, tmp_path / "dataset")
    return tmp_path / "model"


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(code, err):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flyviz: error:"), err
    assert "Traceback" not in err


def test_info_reports_sizes_positions_and_digests(capsys, web_model, tiny_checkpoint):
    code, out, _ = _run(capsys, "info", str(web_model), "--json")
    assert code == 0
    info = json.loads(out)
    cfg = tiny_checkpoint.config
    assert info["layout"] == "recital-web"
    assert (info["neurons"], info["edges"], info["vocabulary"], info["d_embed"]) == (
        cfg.neurons, tiny_checkpoint.n_edges, cfg.vocabulary, cfg.d_embed)
    assert (info["delay_slots"], info["neurons_per_slot"], info["readout_rank"]) == (
        cfg.delay_k, cfg.neurons_per_slot, 12)
    assert info["parameters"] == tiny_checkpoint.parameter_count()
    assert info["positions"]["with_position"] == int(tiny_checkpoint.anatomy.valid.sum())
    assert info["positions"]["kind"] == "synthetic"
    frozen = info["frozen_buffers_sha256"]
    assert frozen["agree"] is True and frozen["model"] == frozen["dataset"]
    assert set(frozen["model"]) == {"brain.w_offsets", "brain.w_indices", "brain.w_values",
                                    "brain.in_index", "brain.out_index"}
    code, text, _ = _run(capsys, "info", str(web_model))
    assert code == 0 and "rank 12" in text and f"{cfg.neurons:,}" in text


def test_generate_json_matches_the_frames(capsys, web_model, tiny_checkpoint):
    code, out, _ = _run(capsys, "generate", str(web_model), "--prompt", "the dog ran",
                        "--max-new-tokens", "9", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["prompt"] == "the dog ran"
    assert result["prompt_ids"][0] == tiny_checkpoint.config.bos_token_id
    assert 1 <= len(result["tokens"]) <= 9
    assert len(result["tokens"]) == 9 or result["tokens"][-1] == 2
    assert [s["token"] for s in result["steps"]] == result["tokens"]
    assert all(0 < s["top1_probability"] <= 1 and 0 < s["mean_abs_state"] < 1
               for s in result["steps"])
    code, text, _ = _run(capsys, "generate", str(web_model), "--prompt", "the dog ran",
                         "--max-new-tokens", "9")
    assert code == 0 and text == result["text"] + "\n"


def test_generate_stops_at_eos(capsys, tmp_path, tiny_checkpoint):
    # A readout that always prefers EOS: generation stops after one token.
    head_b = np.zeros_like(tiny_checkpoint.head_b)
    head_b[2] = 50.0
    ckpt = dataclasses.replace(tiny_checkpoint, head_b=head_b,
                               ln_bias=np.ones_like(tiny_checkpoint.ln_bias),
                               head_a=np.abs(tiny_checkpoint.head_a))
    write_fly_llm_hf(ckpt, tmp_path / "m")
    code, out, _ = _run(capsys, "generate", str(tmp_path / "m"), "--prompt", "a", "--json")
    assert code == 0 and json.loads(out)["tokens"] == [2]


@pytest.mark.parametrize("argv, fragment", [
    (["--prompt", ""], "prompt is empty"),
    (["--prompt", "   "], "prompt is empty"),
    (["--prompt", "a", "--max-new-tokens", "0"], "max new tokens"),
    (["--prompt", "a", "--temperature", "-1"], "temperature"),
    (["--prompt", "a", "--top-p", "0"], "top-p"),
    (["--prompt", "a", "--top-p", "1.5"], "top-p"),
])
def test_generate_bad_options(capsys, web_model, argv, fragment):
    code, _, err = _run(capsys, "generate", str(web_model), *argv)
    _one_line_error(code, err)
    assert fragment in err


def test_unparsable_option_values_are_usage_errors(capsys, web_model):
    with pytest.raises(SystemExit) as info:
        main(["generate", str(web_model), "--prompt", "a", "--max-new-tokens", "many"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert "invalid int value" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, option", [
    (["generate", "demo", "--prompt", "a", "--record", ""], "--record"),
    (["figure", "", "--out", "x.png"], "REC"),
    (["convert", "", "--to", "npz", "out.npz"], "REC"),
])
def test_an_empty_path_is_a_usage_error_not_the_working_folder(capsys, tmp_path, monkeypatch,
                                                                argv, option):
    """``Path("")`` is ``.``: ``generate --record ""`` tried to write its recording over the
    working folder. Every option that takes a path refuses an empty one before any work."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.strip().splitlines()) == 1
    assert f"argument {option}: the name is empty" in err
    assert list(tmp_path.iterdir()) == []


def _writes_no_file(folder) -> bool:
    """Whether ``folder`` refuses a new file even to root (/proc does; os.access says yes)."""
    try:
        with open(os.path.join(folder, ".flyviz-test-probe"), "wb"):
            pass
    except OSError:
        return True
    os.remove(os.path.join(folder, ".flyviz-test-probe"))
    return False


@pytest.mark.parametrize("where", ["proc", "file in the way", "a folder"])
def test_generate_refuses_a_record_it_cannot_write_before_the_model_runs(
        capsys, tmp_path, monkeypatch, web_model, where):
    """``generate --record /proc/run.flyrec`` ran the whole generation (minutes on a real
    model) and then failed to save it; a folder named as the recording, or a file where the
    recording's folder should be, likewise. Each is one line before the model loads."""
    if where == "proc" and not (os.path.isdir("/proc/self") and _writes_no_file("/proc")):
        pytest.skip("no /proc here")
    work = tmp_path / "work"
    work.mkdir()
    blocker = work / "notes.txt"
    blocker.write_text("not a folder\n")
    (work / "folder.flyrec").mkdir()
    record = {"proc": "/proc/run.flyrec", "file in the way": str(blocker / "run.flyrec"),
              "a folder": str(work / "folder.flyrec")}[where]

    def must_not_load(*args, **kwargs):
        raise AssertionError("the model was loaded before --record was checked")

    import flyviz.commands.generate as generate_command

    monkeypatch.setattr(generate_command, "model_from_args", must_not_load)
    code, out, err = _run(capsys, "generate", str(web_model), "--prompt", "a", "--record",
                          record)
    _one_line_error(code, err)
    assert "--record" in err and record in err and out == ""
    assert sorted(p.name for p in work.iterdir()) == ["folder.flyrec", "notes.txt"]


def test_damaged_checkpoints_exit_2_with_one_line(capsys, tmp_path, tiny_checkpoint):
    write_fly_llm_hf(tiny_checkpoint, tmp_path / "truncated")
    weights = tmp_path / "truncated" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    indices = np.array(tiny_checkpoint.w_indices).copy()
    indices[5] = 10_000
    write_fly_llm_hf(dataclasses.replace(tiny_checkpoint, w_indices=indices), tmp_path / "index")
    gain = np.array(tiny_checkpoint.gain).copy()
    gain[3] = np.nan
    write_fly_llm_hf(dataclasses.replace(tiny_checkpoint, gain=gain), tmp_path / "nan")
    for name, fragment in (("truncated", "truncated"), ("index", "w_indices"),
                           ("nan", "non-finite"), ("missing", "no such folder")):
        code, _, err = _run(capsys, "info", str(tmp_path / name))
        _one_line_error(code, err)
        assert fragment in err


def test_info_in_a_real_process_prints_no_traceback(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-m", "flyviz", "info", "ngxson/fly-llm-hf"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "model.safetensors" in done.stderr


def test_bench_on_a_model_folder(capsys, tmp_path, tokenizer_vocabulary):
    ckpt = make_random_checkpoint(neurons=3001, edges=60_000, d_embed=16, readout_rank=None,
                                  vocabulary=tokenizer_vocabulary, seed=2)
    write_fly_llm_hf(ckpt, tmp_path / "m")
    code, out, _ = _run(capsys, "bench", str(tmp_path / "m"), "--steps", "5", "--threads", "2",
                        "--json")
    assert code == 0
    result = json.loads(out)
    (engine,) = result["engines"]
    assert engine["readout"] == "dense" and engine["steps"] == 5
    # The floor streams exactly what a step reads: graph (row offsets once per thread's
    # block, hence the +1), head, input projections and the five per-neuron vectors.
    expected = (4 * (ckpt.w_offsets.size + 1) + ckpt.w_indices.nbytes + ckpt.w_values.nbytes
                + ckpt.head.nbytes + ckpt.in_proj.nbytes + 5 * 4 * ckpt.config.neurons)
    assert engine["floor_bytes"] == expected
    assert engine["ratio"] == pytest.approx(engine["step_ms"] / engine["floor_ms"])
    code, _, err = _run(capsys, "bench", str(tmp_path / "m"), "--steps", "0")
    _one_line_error(code, err)


class _Engines(list):
    """The kernel each engine was asked for (the list), and the engines (``made``)."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list = []


@pytest.fixture
def engines_made(monkeypatch):
    """Every engine built during the test, whoever built it, with the kernel it was asked for."""
    from flyviz.model import engine as engine_module

    engines = _Engines()
    original = engine_module.Engine.__init__

    def spy(self, *args, **kwargs):
        engines.append(kwargs.get("kernel"))
        engines.made.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(engine_module.Engine, "__init__", spy)
    return engines


def test_kernel_option_on_the_commands_that_run_a_model(capsys, web_model, tmp_path,
                                                        engines_made, monkeypatch):
    monkeypatch.delenv("FLYVIZ_KERNEL", raising=False)
    outputs = {}
    for kernel in ("scipy", "llvm", "auto"):
        code, out, _ = _run(capsys, "generate", str(web_model), "--prompt", "the cat",
                            "--max-new-tokens", "4", "--seed", "1", "--json", "--kernel", kernel)
        assert code == 0
        outputs[kernel] = json.loads(out)["tokens"]
    assert engines_made == ["scipy", "llvm", None]
    assert outputs["scipy"] == outputs["llvm"] == outputs["auto"]
    record = tmp_path / "run.flyrec"
    assert _run(capsys, "generate", str(web_model), "--prompt", "the cat", "--max-new-tokens",
                "3", "--record", str(record))[0] == 0
    engines_made.clear()
    assert _run(capsys, "replay", str(record), "--kernel", "llvm")[0] == 0
    assert _run(capsys, "compare", str(web_model), "--prompt", "the cat", "--max-new-tokens",
                "2", "--silence", "side:left", "--kernel", "llvm", "--json")[0] == 0
    assert _run(capsys, "verify", str(web_model), "--kernel", "scipy")[0] in (0, 1)
    assert engines_made[:3] == ["llvm", "llvm", "llvm"]
    for command in ("generate", "export", "compare", "replay", "verify"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "--kernel {auto,scipy,llvm}" in capsys.readouterr().out


def test_flyviz_kernel_is_the_default_and_a_bad_one_is_one_line(capsys, web_model, monkeypatch,
                                                                 engines_made):
    from flyviz.model import kernels

    monkeypatch.setenv("FLYVIZ_KERNEL", "llvm")
    code, out, _ = _run(capsys, "generate", str(web_model), "--prompt", "the cat",
                        "--max-new-tokens", "2", "--json")
    assert code == 0 and engines_made == [None]
    assert engines_made.made[0].kernel == kernels.resolve("llvm")
    monkeypatch.setenv("FLYVIZ_KERNEL", "fortran")
    code, _, err = _run(capsys, "generate", str(web_model), "--prompt", "the cat")
    _one_line_error(code, err)
    assert "FLYVIZ_KERNEL='fortran'" in err
    # The option wins over the variable.
    assert _run(capsys, "generate", str(web_model), "--prompt", "the cat", "--max-new-tokens",
                "2", "--kernel", "scipy")[0] == 0
    assert engines_made.made[-1].kernel == "scipy"


def test_info_says_how_the_models_graph_runs_as_a_spiking_brain(capsys, web_model,
                                                                  tiny_checkpoint):
    """``info`` told a 166k dataset's and a ``.ct`` brain's millivolts but not a model's,
    though ``flyviz simulate SPEC`` runs any model whose weights count synapses."""
    from flyviz.commands.info import describe
    from flyviz.spiking.brain import MALECNS_W_SYN, brain_from_checkpoint

    # The random test model's weights are not whole multiples of one synapse.
    code, out, _ = _run(capsys, "info", str(web_model), "--json")
    assert code == 0 and json.loads(out)["spiking"]["runs"] is False
    code, text, _ = _run(capsys, "info", str(web_model))
    line = next(t for t in text.splitlines() if t.startswith("as a brain"))
    assert "no: its weights are not whole multiples of one synapse" in line
    code, _, err = _run(capsys, "simulate", str(web_model), "--out", "never.parquet")
    assert code == 2 and "cannot run as a spiking brain: its weights are not whole multiples" in err
    # Weights of whole synapses (3 x 0.0125 ...): the unit and counts it names are the brain's.
    unit = 0.0125
    w = np.asarray(tiny_checkpoint.w_values, dtype=np.float64)
    counts = np.sign(w) * np.maximum(1.0, np.rint(np.abs(w) / np.abs(w).max() * 9))
    counted = dataclasses.replace(tiny_checkpoint, w_values=(counts * unit).astype(np.float32))
    spiking = describe(counted)["spiking"]
    assert spiking["runs"] is True and spiking["w_syn_mV"] == MALECNS_W_SYN
    assert spiking["synapse_unit"] == pytest.approx(unit, rel=1e-6)
    assert "signed count = weight / 0.0125" in spiking["millivolts"]
    brain = brain_from_checkpoint(counted)
    assert np.abs(brain.counts).sum() == np.abs(counts).sum()
