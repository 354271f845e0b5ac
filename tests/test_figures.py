"""``flyviz figure``: each kind is written from a recording; bad requests are one line."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from flyviz import cli
from flyviz.errors import InputError, MissingDependencyError
from flyviz.figures import FigureOptions, _colour, write_figure

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A small labelled model in a folder, a run of it and a comparison, both saved."""
    from flyviz.app._testing import make_app_checkpoint
    from flyviz.model.interventions import Silence
    from flyviz.model.resolve import load_model
    from flyviz.model.writers import write_connectome_dataset, write_recital_web
    from flyviz.record.compare import Comparison
    from flyviz.record.run import GenerationSettings
    from flyviz.record.runner import Model

    root = tmp_path_factory.mktemp("figures")
    made = make_app_checkpoint(root / "made", name="figure-brain")
    write_recital_web(made, root / "model")
    write_connectome_dataset(made, root / "dataset")
    checkpoint = load_model(str(root / "model"), dataset_dir=root / "dataset")
    model = Model(checkpoint, spec=str(root / "model"))
    settings = GenerationSettings(max_new_tokens=12)
    run = model.record("Tom and his dog", settings)
    run_path = run.save(root / "run.flyrec")
    comparison = Comparison.for_checkpoint(checkpoint, [Silence("superclass:cb_sensory")])
    try:
        compared_path = comparison.record("Tom and his dog", settings,
                                          spec=str(root / "model")).save(root / "compared.flyrec")
    finally:
        comparison.close()
    yield {"root": root, "model": model, "run": run, "run_path": run_path,
           "compared_path": compared_path}
    model.close()


def _cli(capsys, *argv):
    argv = [str(a) for a in argv]
    if argv[0] == "figure" and len(argv) > 1 and "--model" not in argv:
        folder = Path(argv[1]).parent
        argv += ["--model", str(folder / "model"), "--dataset", str(folder / "dataset")]
    try:
        code = cli.main(argv)
    except SystemExit as stop:            # argparse's usage errors
        code = stop.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _png(path):
    import imageio.v3 as iio

    return iio.imread(path)


@pytest.mark.parametrize("kind", ["raster", "celltypes", "trajectory"])
def test_each_kind_is_written_from_the_command_line(kind, saved, capsys, tmp_path):
    out = tmp_path / f"{kind}.png"
    code, _, err = _cli(capsys, "figure", saved["run_path"], "--kind", kind, "--out", out,
                        "--size", "800x500")
    assert code == 0, err
    image = _png(out)
    assert image.shape[:2] == (500, 800)
    assert f"wrote {out}" in err
    # Not blank: the data area holds many distinct colours.
    assert len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 50


def test_svg_and_pdf_follow_the_suffix(saved, capsys, tmp_path):
    for suffix, magic in ((".svg", b"<?xml"), (".pdf", b"%PDF")):
        out = tmp_path / f"raster{suffix}"
        code, _, err = _cli(capsys, "figure", saved["run_path"], "--kind", "raster",
                            "--sort", "similarity", "--out", out)
        assert code == 0, err
        assert out.read_bytes()[:5].startswith(magic)


def test_the_raster_shows_the_pooled_states_in_flyviz_colours(saved, tmp_path):
    """The raster's image is the max-|x| pooling of the states, coloured as the app does."""
    from matplotlib.figure import Figure

    from flyviz.analysis.population import RasterPooler, anatomy_order
    from flyviz.figures import _raster

    model, run = saved["model"], saved["run"]
    figure = Figure(figsize=(8, 5), dpi=100)
    _raster(figure, run, model, FigureOptions(kind="raster", size=(800, 500)))
    shown = figure.axes[0].images[0].get_array()
    order = anatomy_order(model.anatomy.superclass, model.anatomy.cell_type)
    pooler = RasterPooler(order, max(50, int(500 * 0.8)))
    states = run.states().astype(np.float32)
    pooled = pooler.pool(states)
    limit = float(np.percentile(np.abs(pooled), 99.5))
    np.testing.assert_allclose(np.asarray(shown), _colour(pooled, "signed", limit), atol=1e-6)


def test_a_comparison_raster_has_three_panels_and_celltypes_default_to_dx(saved, capsys,
                                                                         tmp_path):
    from matplotlib.figure import Figure

    from flyviz.figures import _raster
    from flyviz.record.recording import Recording

    compared = Recording.load(saved["compared_path"])
    assert compared.baseline is not None
    figure = Figure(figsize=(8, 5), dpi=100)
    _raster(figure, compared, saved["model"], FigureOptions(kind="raster", size=(800, 500)))
    titles = [axes.get_title() for axes in figure.axes if axes.images]
    assert titles == ["untouched", "intervened", "Δx (intervened − untouched)"]
    # The untouched and intervened panels share one colour range (their bars end alike);
    # Δx has its own.
    bars = [axes for axes in figure.axes if not axes.images and axes.get_ylabel()]
    tops = [bar.get_ylim()[1] for bar in bars]
    assert len(tops) == 3 and tops[0] == tops[1], tops
    panels = [axes for axes in figure.axes if axes.images]
    untouched = np.asarray(compared.baseline.states(), np.float32)
    intervened = np.asarray(compared.states(), np.float32)[:len(untouched)]
    assert not np.array_equal(untouched, intervened) and len(panels) == 3
    out = tmp_path / "dx.png"
    code, _, err = _cli(capsys, "figure", saved["compared_path"], "--kind", "celltypes", "--by",
                        "superclass", "--out", out)
    assert code == 0, err
    code, _, err = _cli(capsys, "figure", saved["run_path"], "--kind", "celltypes",
                        "--quantity", "dx", "--out", out)
    assert code == 2 and "needs a comparison recording" in err


def test_the_brain_figure_is_the_offscreen_view(saved, capsys, tmp_path):
    out = tmp_path / "brain.png"
    code, _, err = _cli(capsys, "figure", saved["run_path"], "--kind", "brain", "--token", "3",
                        "--out", out, "--size", "800x500")
    assert code == 0, err
    image = _png(out)[..., :3].astype(int)
    assert image.shape[:2] == (500, 800)
    dark = (image.sum(axis=2) < 90).mean()
    assert dark > 0.3                        # the black brain view fills much of the figure
    code, _, err = _cli(capsys, "figure", saved["run_path"], "--kind", "brain", "--token", "999",
                        "--out", out)
    assert code == 2 and "outside the recording" in err


def test_a_comparison_brain_draws_the_untouched_run_the_intervened_run_and_dx(saved, capsys,
                                                                             tmp_path):
    """The brain figure of a comparison drew only the intervened run, unlabelled."""
    from matplotlib.figure import Figure

    from flyviz.figures import _brain
    from flyviz.record.recording import Recording

    compared = Recording.load(saved["compared_path"])
    figure = Figure(figsize=(12, 5), dpi=100, layout="constrained")
    _brain(figure, compared, saved["model"], FigureOptions(kind="brain", size=(1200, 500),
                                                           token=3))
    panels = [axes for axes in figure.axes if axes.images]
    assert [axes.get_title() for axes in panels] == [
        "untouched", "intervened", "Δx (intervened − untouched)"]
    assert figure.get_suptitle().startswith("token 3 of 0–")
    untouched, intervened, delta = (np.asarray(axes.images[0].get_array(), int)
                                    for axes in panels)
    # Silencing cb_sensory changed the picture, and Δx is a picture of its own.
    assert not np.array_equal(untouched, intervened)
    assert not np.array_equal(delta, intervened) and not np.array_equal(delta, untouched)
    # Δx lights the neurons the intervention changed, in the difference colours (the
    # states' lit neurons are not all where Δx's are).
    lit = [(image.sum(axis=2) > 60) for image in (untouched, intervened, delta)]
    assert lit[2].any() and not np.array_equal(lit[2], lit[1])
    # One colour range for the two runs (their bars end alike); Δx has its own caption.
    bars = [axes for axes in figure.axes if not axes.images and axes.get_ylabel()]
    assert [bar.get_ylabel() for bar in bars][2].startswith("Δx")
    assert len(bars) == 3 and bars[0].get_ylim() == bars[1].get_ylim()
    out = tmp_path / "compared-brain.png"
    code, _, err = _cli(capsys, "figure", saved["compared_path"], "--kind", "brain", "--out",
                        out, "--size", "1200x500")
    assert code == 0, err
    assert _png(out).shape[:2] == (500, 1200)


def test_bad_requests_are_one_line_before_any_work(saved, capsys, tmp_path):
    rec = saved["run_path"]
    cases = [
        (("--kind", "violin", "--out", tmp_path / "a.png"), "invalid choice"),
        (("--kind", "raster", "--out", tmp_path / "a.gif"), "is written as"),
        (("--kind", "raster", "--out", tmp_path / "missing" / "a.png"), "does not exist"),
        (("--kind", "raster", "--out", tmp_path / "a.png", "--size", "10x10"), "between 320x240"),
        (("--kind", "raster", "--out", tmp_path / "a.png", "--size", "big"), "must look like"),
    ]
    for extra, message in cases:
        code, out, err = _cli(capsys, "figure", rec, *extra)
        assert code == 2 and message in err, (extra, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    code, _, err = _cli(capsys, "figure", tmp_path / "none.flyrec", "--kind", "raster", "--out",
                        tmp_path / "a.png")
    assert code == 2 and len(err.strip().splitlines()) == 1
    # A folder no one may create files in (root included).
    code, _, err = _cli(capsys, "figure", rec, "--kind", "raster", "--out",
                        "/proc/flyviz-figure.png")
    assert code == 2 and "cannot write" in err and len(err.strip().splitlines()) == 1


def test_without_matplotlib_the_figure_is_one_line(saved, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'flyviz\[figures\]'"):
        write_figure(saved["run"], tmp_path / "a.png", model=saved["model"])
    assert not (tmp_path / "a.png").exists()


def test_options_are_checked():
    with pytest.raises(InputError, match="unknown figure kind"):
        FigureOptions(kind="pie").checked()
    with pytest.raises(InputError, match="unknown sort"):
        FigureOptions(sort="random").checked()


def test_the_token_options_counting_and_the_titles_are_both_told(capsys):
    """``--token 11`` of a 40-token run is titled "token 11 of 0–39" (counted from 0, as the
    app's timeline and the movies count, beside the run's first and last indices): the help
    says so."""
    code, out, _ = _cli(capsys, "figure", "--help")
    assert code == 0
    assert "--token 11 of a run of 40 tokens is titled 'token 11 of 0–39'" in " ".join(out.split())
