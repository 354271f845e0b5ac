"""The corpus commands run with ``--workers 0`` load the model once.

Their tasks run in the client's own process there; they loaded the model again from its
spec (``cluster.worker_model``), twice the load time and memory of a big model.
"""

from __future__ import annotations

import json

import pytest

from flyviz import cli

_TEXT = ("The cat sat on the mat.\n\nA dog ran far away from the big red ball.\n\n"
         "The girl went home and the boy saw a cat.\n")


def _argv(command: str, world: dict) -> list[str]:
    """``command``'s arguments on ``world``, run in this process (``--workers 0``)."""
    root, model = world["root"], [world["spec"], "--dataset", world["dataset"]]
    if command == "sweep":
        return ["sweep", *model, "--by", "side", "--text", str(world["text"]), "--out",
                str(root / "s.csv"), "--workers", "0", "--context", "24", "--batch", "3"]
    if command == "importance":
        return ["importance", *model, "--by", "side", "--text", str(world["text"]), "--out",
                str(root / "i.csv"), "--workers", "0", "--context", "24"]
    if command == "patch":
        return ["patch", *model, "--clean", "the cat saw a dog and", "--corrupt",
                "the dog saw a cat and", "--answer", " the", "--by", "side", "--positions",
                "1:3", "--window", "2", "--out", str(root / "p.csv"), "--workers", "0"]
    if command == "atlas":
        return ["atlas", *model, "--corpus", str(world["text"]), "--out",
                str(root / "once.atlas"), "--workers", "0", "--compact", "--batch", "2",
                "--top-k", "2"]
    if command == "circuit":
        from test_analysis_circuit import planted_entries

        task = root / "task.jsonl"
        task.write_text("".join(json.dumps(e) + "\n" for e in planted_entries()), "utf-8")
        return ["circuit", *model, "--task", str(task), "--workers", "0", "--json"]
    assert command == "dynamics"
    return ["dynamics", *model, "--prompt", "the cat saw a big red ball", "--eigenvalues",
            "3", "--nulls", "degree-sign:1", "--workers", "0", "--json"]


@pytest.mark.parametrize("command", ["atlas", "sweep", "patch", "importance", "circuit",
                                     "dynamics"])
def test_a_run_in_this_process_loads_the_model_once(command, capsys, small_world,
                                                    monkeypatch):
    from flyviz.model import resolve

    # A model of its own per command: one loaded before is held by the workers' cache.
    world = small_world(f"loads-{command}", neurons=131, edges=1500, seed=5, anatomy=True,
                        logit_scale=0.1, text=_TEXT)
    loads: list[str] = []
    real = resolve.load_model

    def counted(spec, *args, **kwargs):
        loads.append(str(spec))
        return real(spec, *args, **kwargs)

    monkeypatch.setattr(resolve, "load_model", counted)
    code = cli.main(_argv(command, world))
    err = capsys.readouterr().err
    assert code == 0, err
    assert len(loads) == 1, loads
