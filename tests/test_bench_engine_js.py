"""``flyviz bench --engine-js``: the reference engine timed beside flyviz's, in one run."""

from __future__ import annotations

import json
import shutil
import tempfile

import pytest

from flyviz.cli import main
from flyviz.model.synthetic import make_random_checkpoint
from flyviz.model.writers import write_fly_llm_hf

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")

# A stand-in for engine.js with its interface: it checks that the export it is given has
# the shapes of the model (so the driver handed over the real files) and counts its steps.
FAKE_ENGINE = """
export class FlyEngine {
  constructor({ params, graph, config }) {
    const n = config.neurons;
    if (params.head_a.length !== config.readout_rank * n) throw new Error("head_a size");
    if (graph.offsets.length !== n + 1) throw new Error("offsets size");
    if (graph.source.length !== graph.weight.length) throw new Error("edge arrays differ");
    if (graph.offsets[n] !== graph.weight.length) throw new Error("offsets end");
    this.vocabulary = config.vocabulary;
    this.edges = graph.weight.length;
  }
  step(token) {
    if (!(token >= 3 && token < this.vocabulary)) throw new Error(`token ${token}`);
    let total = 0;
    for (let e = 0; e < this.edges; e += 1) total += e % 7;
    return total;
  }
}
"""


def _model(tmp_path, rank=8):
    ckpt = make_random_checkpoint(neurons=700, edges=9_000, d_embed=8, readout_rank=rank,
                                  vocabulary=300, seed=4)
    write_fly_llm_hf(ckpt, tmp_path / "m")
    return ckpt, tmp_path / "m"


def _bench(capsys, *argv):
    code = main(["bench", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@needs_node
def test_engine_js_is_timed_in_the_same_rounds(capsys, tmp_path, monkeypatch):
    (tmp_path / "engine.js").write_text(FAKE_ENGINE, encoding="utf-8")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the export is written
    _, model = _model(tmp_path)
    code, out, err = _bench(capsys, str(model), "--steps", "6", "--threads", "1", "--json",
                            "--engine-js", str(tmp_path / "engine.js"))
    assert code == 0, err
    (engine,) = json.loads(out)["engines"]
    assert engine["steps"] == 6
    assert engine["engine_js_ms"] > 0 and engine["engine_js_ms_p10"] <= engine["engine_js_ms"]
    assert engine["engine_js_speedup"] == pytest.approx(engine["engine_js_ms"] / engine["step_ms"])
    # The export is gone afterwards.
    assert not list(scratch.iterdir())
    code, out, _ = _bench(capsys, str(model), "--steps", "3", "--threads", "1",
                          "--engine-js", str(tmp_path / "engine.js"))
    assert code == 0 and "engine.js" in out and "x faster" in out


@needs_node
def test_engine_js_that_fails_is_one_error_line(capsys, tmp_path):
    (tmp_path / "broken.js").write_text("export class FlyEngine { constructor() { throw new "
                                        "Error('no model here'); } }", encoding="utf-8")
    _, model = _model(tmp_path)
    code, _, err = _bench(capsys, str(model), "--steps", "2", "--threads", "1",
                          "--engine-js", str(tmp_path / "broken.js"))
    assert code == 2
    assert err.strip().splitlines()[-1] == ("flyviz: error: engine.js stopped before ready: "
                                           "Error: no model here")
    assert "Traceback" not in err


def test_bad_engine_js_requests_are_one_error_line(capsys, tmp_path):
    ckpt, model = _model(tmp_path)
    dense = make_random_checkpoint(neurons=300, edges=3_000, d_embed=8, readout_rank=None,
                                   vocabulary=300, seed=4)
    write_fly_llm_hf(dense, tmp_path / "dense")
    (tmp_path / "engine.js").write_text(FAKE_ENGINE, encoding="utf-8")
    cases = [((str(model), "--engine-js", str(tmp_path / "nowhere.js")), "no such file"),
             ((str(model), "--engine-js", str(tmp_path)), "not a regular file"),
             ((str(model), "--batch", "4", "--engine-js", str(tmp_path / "engine.js")),
              "not with --batch")]
    if shutil.which("node") is not None:
        cases.append(((str(tmp_path / "dense"), "--engine-js", str(tmp_path / "engine.js")),
                      "a dense readout"))
    for argv, fragment in cases:
        code, _, err = _bench(capsys, *argv, "--steps", "2", "--threads", "1")
        last = err.strip().splitlines()[-1]
        assert code == 2 and last.startswith("flyviz: error:") and fragment in last, err
        assert "Traceback" not in err


@needs_node
def test_the_reference_engine_runs_under_the_bench(capsys, tmp_path, shared_dir):
    _, model = _model(tmp_path)
    code, out, err = _bench(capsys, str(model), "--steps", "4", "--threads", "1", "--json",
                            "--engine-js", str(shared_dir / "reference" / "engine.js"))
    assert code == 0, err
    (engine,) = json.loads(out)["engines"]
    assert engine["engine_js_ms"] > 0
