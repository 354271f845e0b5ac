"""Hostile input, part 3 (issue 31, root causes 7 to 11): questions that cannot be measured,
another model's states, the app's arguments, wrong library argument types, and smaller
messages. Each case is one ``flyviz: error:`` line and exit 2 on the command line, or one
flyviz exception with a one-line message in the library, before any long work.
"""

from __future__ import annotations

import dataclasses
import os
import warnings

import numpy as np
import pytest
from cli_checks import cli_run, one_error_line

import flyviz
from flyviz import cli
from flyviz.analysis import cluster
from flyviz.analysis.parts import PartialStore
from flyviz.arguments import choice, span, whole_number
from flyviz.errors import FlyvizError, InputError, RecordingError

GROUPS = "first: id:0-99\nsecond: id:100-199\nthird: id:200-396\n"
GROUP_DICT = {"first": "id:0-99", "rest": "id:100-396"}
CLEAN, CORRUPT, ANSWER = "the cat sat", "the dog sat", " the"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, tokenizer_path):
    """A tiny model in a folder; 'other', its graph with other weights; 'third', another
    graph of the same size; a recording of each; a text, a groups file, a Parquet lesion
    map, a per-neuron estimate and an atlas of the model."""
    from flyviz.analysis.atlas import AtlasSettings, build_atlas
    from flyviz.analysis.corpus import build_corpus
    from flyviz.analysis.sweep import SweepSettings, run_sweep, sweep_groups
    from flyviz.model.checkpoint import validate_checkpoint
    from flyviz.model.resolve import load_model
    from flyviz.model.synthetic import _WORDS, make_random_checkpoint
    from flyviz.model.tokenizer import FlyTokenizer
    from flyviz.model.writers import write_fly_llm_hf

    root = tmp_path_factory.mktemp("hostile3")
    vocab = FlyTokenizer(tokenizer_path).vocab_size

    def random_model(seed: int, name: str):
        return validate_checkpoint(make_random_checkpoint(
            neurons=397, edges=6001, d_embed=16, vocabulary=vocab, readout_rank=9, seed=seed,
            tokenizer_path=tokenizer_path, name=name))

    ckpt = random_model(5, "model")
    other = dataclasses.replace(ckpt, name="other", head_b=np.roll(ckpt.head_b, 1, axis=0))
    for made in (ckpt, other, random_model(6, "third")):
        write_fly_llm_hf(made, root / made.name)
    spec = str(root / "model")
    for name in ("model", "other", "third"):
        assert cli.main(["generate", str(root / name), "--prompt", "the cat", "--max-new-tokens",
                         "2", "--record", str(root / f"{name}.flyrec")]) == 0
    rng = np.random.default_rng(2)
    text = root / "text.txt"
    text.write_text("\n\n".join(" ".join(rng.choice(_WORDS, rng.integers(3, 12))).capitalize()
                                + "." for _ in range(40)) + "\n", encoding="utf-8")
    groups = root / "groups.txt"
    groups.write_text(GROUPS, encoding="utf-8")
    model = load_model(spec)
    corpus = build_corpus([text], FlyTokenizer(tokenizer_path), context=24)
    lesions = root / "lesions.parquet"
    run_sweep(spec, model, corpus, sweep_groups(model, groups), lesions,
              SweepSettings(streams=4, context=24, chunk_tokens=200), by=str(groups), workers=0)
    estimate = root / "estimate.csv"
    flyviz.importance(spec, text, by=GROUP_DICT, context=24, out=estimate)
    atlas = root / "model.atlas"
    build_atlas(spec, model, corpus, atlas, AtlasSettings(top_k=4, streams=5, context=24,
                                                          chunk_tokens=100, min_token_count=2,
                                                          samples_per_band=2), workers=0)
    return {"root": root, "spec": spec, "model": model, "text": text, "groups": groups,
            "lesions": lesions, "neurons": root / "estimate.neurons.csv", "atlas": atlas}


@pytest.fixture(scope="module")
def loaded(hostile):
    """The model as flyviz.load gives it (its engines reused by the library calls)."""
    model = flyviz.load(hostile["spec"])
    yield model
    model.close()




def _one_flyviz_error(call, *expected: str) -> FlyvizError:
    with pytest.raises(FlyvizError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message and message, message
    for text in expected:
        assert text in message, message
    return caught.value


# ------------------------------------------------ 7. questions that cannot be measured
UNMEASURABLE = {
    "the same prompt": ([], CLEAN, "are the same tokens"),
    "versus the answer": (["--versus", ANSWER], CORRUPT, "is the answer itself"),
}


@pytest.mark.parametrize("case", sorted(UNMEASURABLE))
def test_patch_refuses_a_question_it_cannot_measure(capsys, hostile, tmp_path, case):
    extra, corrupt, expected = UNMEASURABLE[case]
    out = tmp_path / "trace.csv"
    code, stdout, err = cli_run(capsys, "patch", hostile["spec"], "--clean", CLEAN, "--corrupt",
                             corrupt, "--answer", ANSWER, *extra, "--by", str(hostile["groups"]),
                             "--out", str(out), "--figure", str(tmp_path / "t.png"),
                             "--workers", "0")
    one_error_line(code, err, expected)
    assert stdout == "" and list(tmp_path.iterdir()) == []  # no grey heatmap, no parts


def test_causal_trace_refuses_the_same_questions(loaded):
    _one_flyviz_error(lambda: flyviz.causal_trace(loaded, CLEAN, CLEAN, ANSWER, by=GROUP_DICT),
                      "same tokens")
    _one_flyviz_error(lambda: flyviz.causal_trace(loaded, CLEAN, CORRUPT, ANSWER,
                                                  versus=ANSWER, by=GROUP_DICT), "answer itself")


def test_an_answer_the_corrupted_run_already_predicts_needs_versus(loaded):
    from flyviz.analysis.causal import encode_prompts, references

    ckpt, tokenizer = loaded.checkpoint, loaded.tokenizer
    prompts = encode_prompts(tokenizer, ckpt.config.bos_token_id, CLEAN, CORRUPT, ANSWER)
    top = references(ckpt, prompts)[1].versus  # the corrupted run's most likely token
    answer = tokenizer.token_text(top)
    assert tokenizer.encode(answer) == [top]
    _one_flyviz_error(lambda: flyviz.causal_trace(loaded, CLEAN, CORRUPT, answer, by=GROUP_DICT),
                      "most likely next token is the answer itself", "--versus")


def test_positions_never_wrap_to_the_prompts_end(loaded):
    error = _one_flyviz_error(lambda: flyviz.causal_trace(loaded, CLEAN, CORRUPT, ANSWER,
                                                          by=GROUP_DICT, positions=(-3, 2)),
                              "positions (-3, 2)", "not from the end")
    assert isinstance(error, InputError)


def test_a_trace_that_is_accepted_is_measured_in_every_cell(loaded):
    """The class: whatever the library accepts, every cell's normalised values are numbers
    (a NaN cell is a question that should have been refused)."""
    trace = flyviz.causal_trace(loaded, CLEAN, CORRUPT, ANSWER, by=GROUP_DICT, positions=[1, 4])
    assert len(trace.rows) == 3 * len(GROUP_DICT)
    assert all(np.isfinite(c.p_normalised) and np.isfinite(c.logit_diff_normalised)
               for c in trace.rows)


# ------------------------------------------------------ 8. another model's states
@pytest.mark.parametrize("command", ["generate", "compare"])
@pytest.mark.parametrize("source, differs", [("other", "weights differ"),
                                             ("third", "different graph")])
def test_a_patch_source_from_another_model_is_refused(capsys, hostile, command, source,
                                                      differs):
    recording = hostile["root"] / f"{source}.flyrec"
    code, stdout, err = cli_run(capsys, command, hostile["spec"], "--prompt", "the cat",
                             "--max-new-tokens", "2", "--patch", "all", "--source",
                             str(recording))
    one_error_line(code, err, f"the patch's source (recording {source}.flyrec)", differs,
              "record the source run with model")
    assert stdout == ""


def test_a_patch_source_from_the_same_model_runs(capsys, hostile):
    code, stdout, err = cli_run(capsys, "generate", hostile["spec"], "--prompt", "the cat",
                             "--max-new-tokens", "2", "--patch", "all", "--source",
                             str(hostile["root"] / "model.flyrec"))
    assert code == 0 and stdout, err


def test_every_way_to_patch_from_a_recording_checks_its_model(hostile, loaded):
    """The class: the library's own path (a Recording given as a patch's source) makes the
    check that trace --recording makes."""
    from flyviz.model.patching import Patch
    from flyviz.record.recording import Recording

    other = Recording.load(hostile["root"] / "other.flyrec")
    patch = Patch("all", source=other)
    error = _one_flyviz_error(lambda: flyviz.run(loaded, "the cat", max_new_tokens=1,
                                                 interventions=[patch]), "weights differ")
    assert isinstance(error, RecordingError)
    with pytest.raises(RecordingError, match="weights differ"):  # trace makes the same check
        flyviz.trace(loaded, other)
    own = Recording.load(hostile["root"] / "model.flyrec")
    assert len(flyviz.run(loaded, "the cat", max_new_tokens=1,
                          interventions=[Patch("all", source=own)])) > 0


# ------------------------------------------------------ 9. the app's arguments
@pytest.fixture
def no_window(monkeypatch):
    """Fail the test if gui gets as far as making its main window."""
    from flyviz.app.window import main_window

    def refuse(*args, **kwargs):
        raise AssertionError("gui opened its window despite a bad argument")

    monkeypatch.setattr(main_window, "MainWindow", refuse)


def _flip_inside(data: bytes, text: bytes) -> bytes:
    """``data`` with the high bit of the second byte of ``text`` set (invalid UTF-8 there)."""
    at = data.index(text) + 1
    flipped = bytearray(data)
    flipped[at] ^= 0x80
    return bytes(flipped)


def _gui_cases(hostile, tmp_path) -> dict[str, tuple[list[str], str]]:
    lesions = tmp_path / "flipped.parquet"
    lesions.write_bytes(_flip_inside(hostile["lesions"].read_bytes(), b"third"))
    mesh = tmp_path / "huge.obj"
    mesh.write_text("v 0 0 0\nv 1e39 0 0\nv 0 1 0\nf 1 2 3\n", encoding="utf-8")
    atlas = tmp_path / "damaged.atlas"
    import shutil

    shutil.copytree(hostile["atlas"], atlas)
    chunk = next(p for p in sorted((atlas / "mean").iterdir()) if not p.name.startswith("."))
    chunk.write_bytes(chunk.read_bytes()[:-3])
    return {
        "prompt not UTF-8": (["--prompt", "a\udcff"], "--prompt is not valid UTF-8"),
        "lesion map, one bit flipped": (["--lesion-map", str(lesions)],
                                        "flipped.parquet is damaged"),
        "mesh beyond float32": (["--mesh", str(mesh)], "beyond float32"),
        "atlas damaged": (["--atlas", str(atlas)], "damaged.atlas is damaged"),
        "recording missing": (["--recording", str(tmp_path / "none.flyrec")], "none.flyrec"),
        "dataset not a folder": (["--dataset", str(mesh)], "is not a folder"),
    }


def test_gui_checks_every_argument_before_its_window(capsys, hostile, tmp_path, no_window):
    for case, (argv, expected) in _gui_cases(hostile, tmp_path).items():
        code, stdout, err = cli_run(capsys, "gui", "--model", hostile["spec"], *argv)
        assert code == 2, case
        one_error_line(code, err, expected)


def test_a_lesion_map_with_any_one_bit_flipped_is_one_line_or_reads(hostile, tmp_path):
    """The class behind the Parquet case: a sample of single-bit flips over the whole file,
    and every string byte of its group names, each reads or is one flyviz error."""
    from flyviz.app.lesion.lesion_panel import check_lesion_map

    data = hostile["lesions"].read_bytes()
    path = tmp_path / "flip.parquet"
    names = [data.index(name) + i for name in (b"first", b"second", b"third")
             for i in range(len(name))]
    bits = sorted(set(range(3, len(data) * 8, 61)) | {8 * at + 7 for at in names})
    refused = 0
    for bit in bits:
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(bytes(flipped))
        try:
            check_lesion_map(path)
        except FlyvizError as exc:
            assert "\n" not in str(exc)
            refused += 1
    assert refused > 0


# ------------------------------------------------------ 10. library arguments
def _importance(loaded, hostile, **kwargs):
    arguments = {"text": "the cat sat on the mat", "by": GROUP_DICT, "context": 24, **kwargs}
    return lambda: flyviz.importance(loaded, **arguments)


def _trace(loaded, **kwargs):
    arguments = {"by": GROUP_DICT, **kwargs}
    return lambda: flyviz.causal_trace(loaded, CLEAN, CORRUPT, ANSWER, **arguments)


LIBRARY_CASES = {
    "importance text=123": ("importance", {"text": 123}, "text must be"),
    "importance text=None": ("importance", {"text": None}, "text must be"),
    "importance by=5": ("importance", {"by": 5}, "by must be"),
    "importance by=['all']": ("importance", {"by": ["all"]}, "by must be"),
    "importance max_tokens='x'": ("importance", {"max_tokens": "x"}, "max_tokens must be"),
    "importance context=2.5": ("importance", {"context": 2.5}, "context must be"),
    "importance workers='x'": ("importance", {"workers": "x"}, "workers must be"),
    "causal_trace by=3": ("trace", {"by": 3}, "by must be"),
    "causal_trace by=None": ("trace", {"by": None}, "by=None"),
    "causal_trace positions=(5, 2)": ("trace", {"positions": (5, 2)}, "positions (5, 2)"),
    "causal_trace positions=(0, 999)": ("trace", {"positions": (0, 999)}, "positions (0, 999)"),
    "causal_trace positions=(1, 2, 3)": ("trace", {"positions": (1, 2, 3)}, "positions (1, 2, 3)"),
    "causal_trace positions=(1.5, 3)": ("trace", {"positions": (1.5, 3)}, "start of positions"),
    "causal_trace positions=5": ("trace", {"positions": 5}, "positions 5"),
    "causal_trace window='x'": ("trace", {"window": "x"}, "window must be"),
    "causal_trace batch='x'": ("trace", {"batch": "x"}, "batch must be"),
    "causal_trace batch=0": ("trace", {"batch": 0}, "batch 0 must be between 1 and"),
    "causal_trace clean=5": ("trace", {"clean": 5}, "--clean must be the prompt's text"),
    "causal_trace answer=5": ("trace", {"answer": 5}, "--answer must be one token's text"),
}


@pytest.mark.parametrize("case", sorted(LIBRARY_CASES))
def test_a_wrong_library_argument_is_one_error_naming_it(hostile, loaded, case):
    function, kwargs, expected = LIBRARY_CASES[case]
    if function == "importance":
        call = _importance(loaded, hostile, **kwargs)
    elif "clean" in kwargs or "answer" in kwargs:
        arguments = {"clean": CLEAN, "corrupt": CORRUPT, "answer": ANSWER, **kwargs}
        def call():
            return flyviz.causal_trace(loaded, arguments["clean"], arguments["corrupt"],
                                       arguments["answer"], by=GROUP_DICT)
    else:
        call = _trace(loaded, **kwargs)
    assert isinstance(_one_flyviz_error(call, expected), InputError)


def test_load_refuses_a_kernel_before_loading(hostile, monkeypatch):
    from flyviz.model import resolve

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before its kernel was checked")

    monkeypatch.setattr(resolve, "load_model", never)
    _one_flyviz_error(lambda: flyviz.load(hostile["spec"], kernel="gpu"), "kernel 'gpu'",
                      "scipy, llvm")
    _one_flyviz_error(lambda: flyviz.load(hostile["spec"], threads="x"), "threads must be")


def test_an_atlas_card_needs_a_neuron_number(hostile):
    from flyviz.analysis.atlas import Atlas

    atlas = Atlas(hostile["atlas"])
    _one_flyviz_error(lambda: atlas.card(None), "neuron must be a whole number", "None")
    _one_flyviz_error(lambda: atlas.card("3"), "neuron must be a whole number")
    _one_flyviz_error(lambda: atlas.card(397), "outside 0..396")
    assert atlas.card(np.int64(3)).neuron == 3


def test_a_damaged_per_neuron_table_is_one_error(hostile, tmp_path):
    from flyviz.analysis.importance import read_neuron_table

    good = hostile["neurons"].read_bytes()
    info, columns = read_neuron_table(hostile["neurons"])
    assert columns["neuron"].tolist() == list(range(397)) and info["format"]
    damaged = {
        "truncated.csv": good[:len(good) * 2 // 3],
        "binary.csv": bytes(range(256)) * 4,
        "header.csv": b"# not flyviz\n" + good.split(b"\n", 1)[1],
        "metadata.csv": b"# flyviz-importance {oops\n" + good.split(b"\n", 1)[1],
        "values.csv": good.replace(b"\n7,", b"\nseven,", 1),
        "empty.parquet": b"",
    }
    for name, data in damaged.items():
        path = tmp_path / name
        path.write_bytes(data)
        _one_flyviz_error(lambda path=path: read_neuron_table(path), name)
    _one_flyviz_error(lambda: read_neuron_table(tmp_path / "none.csv"), "does not exist")


def test_the_shared_checks_accept_what_they_say_and_nothing_else():
    """The class: the validators every public function calls."""
    assert whole_number("n", np.int32(3), 1, 4) == 3 and type(whole_number("n", 3)) is int
    for bad in (True, 2.0, "3", None, [3]):
        with pytest.raises(InputError, match="n must be a whole number"):
            whole_number("n", bad, 1, 4)
    with pytest.raises(InputError, match="n 5 must be between 1 and 4"):
        whole_number("n", 5, 1, 4)
    with pytest.raises(InputError, match="n 0 must be 1 or more"):
        whole_number("n", 0, 1)
    assert choice("kernel", None, ("scipy",), none="the default") is None
    for bad in ("gpu", None, 1):
        with pytest.raises(InputError, match="kernel .* is not one of scipy"):
            choice("kernel", bad, ("scipy",))
    assert span("positions", [1, 3], 0, 5) == (1, 3)
    for bad in ((3, 3), (0, 6), "1:3", (1,), (1, None)):
        with pytest.raises(InputError, match="positions"):
            span("positions", bad, 0, 5)


# ------------------------------------------------------ 11. smaller
def test_a_mesh_beyond_float32_is_one_error_without_warnings(capsys, tmp_path):
    from flyviz.analysis.outline import load_mesh

    mesh = tmp_path / "huge.obj"
    for coordinate in ("1e39", "-4e38", "1e400"):
        mesh.write_text(f"v 0 0 0\nv {coordinate} 0 0\nv 0 1 0\nf 1 2 3\n", encoding="utf-8")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a NumPy overflow warning fails the test
            _one_flyviz_error(lambda: load_mesh(mesh), "huge.obj", "beyond float32")
    mesh.write_text("v 0 0 0\nv 1e30 0 0\nv 0 1 0\nf 1 2 3\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _one_flyviz_error(lambda: load_mesh(mesh, scale=1e10), "beyond float32")
    assert capsys.readouterr().err == ""


@dataclasses.dataclass
class _Chunk:
    index: int
    n_tokens: int = 10


def _partial(chunk: _Chunk, stop_at: int = -1) -> dict[str, np.ndarray]:
    cluster.report_progress(chunk.n_tokens)  # every token reported ...
    if chunk.index == stop_at:
        raise KeyboardInterrupt  # ... and Ctrl+C before the partial is handed back
    return {"chunk": np.array([chunk.index])}


def _merge(a, b):
    return {"chunk": np.concatenate([a["chunk"], b["chunk"]])}


@pytest.mark.parametrize("stop_at", [1, 3, 4])
def test_an_interrupt_counts_the_chunks_that_are_saved(tmp_path, stop_at):
    """'N of M chunks are saved' is what --resume then finds, not what progress counted."""
    chunks = [_Chunk(i) for i in range(5)]
    store = PartialStore(tmp_path / "parts", {"run": 1})
    with pytest.raises(cluster.Interrupted) as caught:
        cluster.run_tree(lambda c: _partial(c, stop_at), (), chunks, _merge, workers=0,
                         store=store)
    assert f"{stop_at} of 5 chunks are saved" in str(caught.value)
    result = cluster.run_tree(_partial, (), chunks, _merge, workers=0, store=store, resume=True)
    assert result.resumed_chunks == stop_at
    assert result.partial["chunk"].tolist() == list(range(5))


def test_an_interrupted_run_that_keeps_nothing_does_not_offer_resume():
    """A run with nothing on disk (a circuit's null models score their runs so) says that
    nothing is kept; "run the same command with --resume" would send the user to an option
    that cannot continue it."""
    chunks = [_Chunk(i) for i in range(5)]
    with pytest.raises(cluster.Interrupted) as caught:
        cluster.run_tree(lambda c: _partial(c, 2), (), chunks, _merge, workers=0)
    assert str(caught.value) == "interrupted; nothing of this run is saved"


def test_a_command_stopped_inside_a_long_run_exits_as_ctrl_c_does(capsys, monkeypatch):
    """An interrupt that a run turns into its account of what is kept (cluster.Interrupted)
    ends any command as Ctrl+C does, exit status 130, with that account: not "error", exit
    2 (what SIGTERM gave ``circuit --nulls`` when it landed inside a null model's run)."""
    import flyviz.commands.info as info

    def stopped(args):
        raise cluster.Interrupted("interrupted; nothing of this run is saved")

    monkeypatch.setattr(info, "run", stopped)
    code = cli.main(["info", "demo"])
    err = capsys.readouterr().err
    assert code == 130
    assert err.strip().splitlines() == ["flyviz info: interrupted; nothing of this run is saved"]


BAD_TEXT = "\udcff"
TOKEN_OPTIONS = {
    "trace --target": (["trace", "{spec}", "--prompt", "the cat", "--target", BAD_TEXT],
                       "--target is not valid UTF-8"),
    "trace --versus": (["trace", "{spec}", "--prompt", "the cat", "--versus", BAD_TEXT],
                       "--versus is not valid UTF-8"),
    "patch --answer": (["patch", "{spec}", "--clean", CLEAN, "--corrupt", CORRUPT, "--answer",
                        BAD_TEXT, "--by", "{groups}", "--out", "{out}", "--workers", "0"],
                       "--answer is not valid UTF-8"),
    "patch --versus": (["patch", "{spec}", "--clean", CLEAN, "--corrupt", CORRUPT, "--answer",
                        ANSWER, "--versus", BAD_TEXT, "--by", "{groups}", "--out", "{out}",
                        "--workers", "0"], "--versus is not valid UTF-8"),
    "patch --corrupt": (["patch", "{spec}", "--clean", CLEAN, "--corrupt", "the " + BAD_TEXT,
                         "--answer", ANSWER, "--by", "{groups}", "--out", "{out}",
                         "--workers", "0"], "--corrupt is not valid UTF-8"),
    "generate --prompt": (["generate", "{spec}", "--prompt", BAD_TEXT],
                          "--prompt is not valid UTF-8"),
}


@pytest.mark.parametrize("case", sorted(TOKEN_OPTIONS))
def test_a_bad_text_is_named_by_its_own_option(capsys, hostile, tmp_path, case):
    argv, expected = TOKEN_OPTIONS[case]
    filled = [a.format(spec=hostile["spec"], groups=hostile["groups"], out=tmp_path / "t.csv")
              for a in argv]
    code, _, err = cli_run(capsys, *filled)
    one_error_line(code, err, expected)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="this system has no FIFOs (os.mkfifo)")
@pytest.mark.parametrize("argv, what", [
    (["export", "--recording", "{fifo}", "--out", "{tmp}/x.gif"], "recording"),
    (["replay", "{fifo}"], "recording"),
    (["atlas", "demo", "--corpus", "{fifo}", "--out", "{tmp}/a.atlas"], "corpus"),
])
def test_a_fifo_given_as_a_file_is_named_as_one_not_waited_on(capsys, tmp_path, argv, what):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, _, err = cli_run(capsys, *[a.format(fifo=fifo, tmp=tmp_path) for a in argv])
    one_error_line(code, err, f"cannot read {what}", "it is a FIFO, not a regular file")


@pytest.mark.parametrize("run", [cluster.run_tree, cluster.run_each])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_blank_scheduler_address_is_refused_by_the_library_too(monkeypatch, run, workers):
    """``scheduler=""`` (a notebook's unset variable) is no address: the command line refused
    it, the library started a local cluster (of no workers, with workers=0) instead of the
    one meant. One ClusterError, before any cluster or task."""
    import distributed

    def no_cluster(*args, **kwargs):
        raise AssertionError("a local cluster was started for a blank scheduler address")

    monkeypatch.setattr(distributed, "LocalCluster", no_cluster)
    ran: list[int] = []

    def task(chunk):
        ran.append(chunk.index)
        return _partial(chunk)

    merge = _merge if run is cluster.run_tree else (lambda chunk, partial: None)
    for blank in ("", "  "):
        with pytest.raises(cluster.ClusterError, match="scheduler address is empty"):
            run(task, (), [_Chunk(0), _Chunk(1)], merge, workers=workers, scheduler=blank)
    assert ran == []
