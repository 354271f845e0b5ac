"""The kinds of model register through the ``flyviz.kinds`` entry points (flyviz.kinds).

Each test writes a small distribution under ``tmp_path`` (a module and a ``*.dist-info``
folder with its entry points), puts it on ``sys.path`` and reads the group again: the
built-in kinds are found once each whatever other metadata declares them, a third party's
kind and its colour layer join the registries, and a broken entry point is said once,
naming its distribution, without stopping flyviz.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

from flyviz.kinds import (LANGUAGE, ModelKind, kind_named, kind_of_recording, register_kind,
                          registered_kinds, reload_kinds)
from flyviz.record.recording import Recording


def write_distribution(root: Path, name: str, entry_points: dict[str, str],
                       module: str = "", source: str = "") -> Path:
    """A distribution ``name`` under ``root``: ``module.py`` holding ``source`` and a
    dist-info whose ``flyviz.kinds`` group holds ``entry_points``; returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    if module:
        (root / f"{module}.py").write_text(source, encoding="utf-8")
    info = root / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
                                   encoding="utf-8")
    lines = "".join(f"{key} = {value}\n" for key, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[flyviz.kinds]\n{lines}", encoding="utf-8")
    return root


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch):
    """Put folders on ``sys.path`` for one test; the registry is read again after it."""
    added: list[str] = []

    def add(root: Path) -> None:
        monkeypatch.syspath_prepend(str(root))
        added.append(str(root))

    yield add
    for root in added:
        while root in sys.path:
            sys.path.remove(root)
    for name in [m for m in sys.modules if m.startswith("flyviz_test_")]:
        del sys.modules[name]
    reload_kinds()


TINY_KIND = '''
from typing import ClassVar
from flyviz.kinds import ModelKind, TimeAxis
from flyviz.render.style import ColourLayer
from flyviz.viewer.layers import LayerKind


def _ones():
    return ColourLayer.static("tiny:ones", [1.0, 1.0], label="ones")


class TinyKind(ModelKind):
    key: ClassVar[str] = "tiny"
    title: ClassVar[str] = "tiny model"
    time_axis: ClassVar[TimeAxis] = TimeAxis("tick", "tick")

    def colour_layers(self):
        return (LayerKind("tiny:ones", "&Ones", "every neuron at one", _ones),)
'''


def test_the_built_in_kinds_are_registered_once_through_the_entry_points(tmp_path, on_path):
    # Stale or doubled metadata (an older flyviz's dist-info, a source checkout on the path)
    # declares the same built-ins again: each is still found once, and nothing is said.
    on_path(write_distribution(tmp_path / "old", "flyviz-old-copy", {
        "language": "flyviz.kinds.language:LANGUAGE",
        "spiking": "flyviz.kinds.spiking:SpikingKind"}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kinds = reload_kinds()
    assert list(kinds)[:2] == ["language", "spiking"]
    assert list(kinds).count("language") == 1 and kinds["language"] is LANGUAGE
    from flyviz.kinds.spiking import SPIKING

    assert kinds["spiking"] is SPIKING


def test_a_package_outside_flyviz_adds_a_kind_and_its_colour_layer(tmp_path, on_path):
    on_path(write_distribution(tmp_path / "tiny", "flyviz-test-tiny",
                               {"tiny": "flyviz_test_tiny:TinyKind"},
                               "flyviz_test_tiny", TINY_KIND))
    assert "tiny" not in registered_kinds()
    kinds = reload_kinds()
    assert "tiny" in kinds and isinstance(kinds["tiny"], ModelKind)
    assert kind_named("tiny") is kinds["tiny"]
    recording = Recording(2, {"kind": "tiny"})
    assert kind_of_recording(recording) is kinds["tiny"]
    from flyviz.viewer.layers import LAYERS
    from flyviz.viewer.state import ViewerState

    assert LAYERS["tiny:ones"].title == "&Ones"
    # A state showing one of its models offers its layer, and withdraws it for another kind.
    state = ViewerState()
    state.set_model(None, neurons=2, kind=kinds["tiny"])
    assert state.colour_layers["tiny:ones"].available
    state.colour_by = "tiny:ones"
    assert list(state.values(0)) == [1.0, 1.0]
    state.set_model(None, neurons=2, kind=LANGUAGE)
    assert not state.colour_layers["tiny:ones"].available and state.colour_by == "state"


def test_a_broken_entry_point_is_said_once_naming_its_distribution(tmp_path, on_path):
    on_path(write_distribution(tmp_path / "broken", "flyviz-test-broken", {
        "crash": "flyviz_test_broken:KIND",
        "notakind": "flyviz_test_broken:NOT_A_KIND",
        "missing": "flyviz_test_nowhere:KIND"},
        "flyviz_test_broken", "NOT_A_KIND = 3\nraise RuntimeError('the author broke it')\n"))
    with pytest.warns(RuntimeWarning) as said:
        kinds = reload_kinds()
    lines = [str(w.message) for w in said]
    assert len(lines) == 3, lines
    assert all("flyviz-test-broken" in line and "goes on without it" in line for line in lines)
    assert any("the author broke it" in line for line in lines)
    assert {"language", "spiking"} <= set(kinds)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # once: asking again says nothing
        assert registered_kinds() == kinds
        assert kind_of_recording(Recording(2)) is LANGUAGE


def test_a_kind_with_a_key_taken_is_left_out_with_a_warning(tmp_path, on_path):
    source = TINY_KIND.replace('"tiny"', '"language"')
    on_path(write_distribution(tmp_path / "clash", "flyviz-test-clash",
                               {"clash": "flyviz_test_clash:TinyKind"}, "flyviz_test_clash", source))
    with pytest.warns(RuntimeWarning, match="flyviz-test-clash.*has the key of"):
        kinds = reload_kinds()
    assert kinds["language"] is LANGUAGE


def test_a_recording_of_a_kind_not_installed_is_shown_without_its_model():
    kind = kind_of_recording(Recording(3, {"kind": "someone-elses"}))
    assert kind.key == "someone-elses" and kind != LANGUAGE
    model, why = kind.recording_model(Recording(3, {"kind": "someone-elses"}))
    assert model is None and "not installed" in why


def test_register_kind_adds_a_scripts_own_kind(on_path):
    class ScriptKind(ModelKind):
        key = "script"

    kind = register_kind(ScriptKind())
    assert kind_named("script") is kind
    with pytest.raises(ValueError, match="registered already"):
        register_kind(ScriptKind())
    with pytest.raises(ValueError, match="with a key"):
        register_kind(ModelKind())


def test_the_kinds_api_refuses_in_one_input_error_line_that_is_still_a_value_error(on_path):
    from flyviz.errors import InputError

    cases = [(lambda: kind_named("nope"), "unknown model kind 'nope'; the kinds are language"),
             (lambda: kind_named(None), "unknown model kind None"),
             (lambda: register_kind(5), "with a key, not 5 \\(int\\)"),
             (lambda: register_kind(ModelKind), "with a key, not <class"),
             (lambda: register_kind(LANGUAGE.__class__()), "'language' is registered already")]
    for call, said in cases:
        with pytest.raises(InputError, match=said) as caught:
            call()
        assert isinstance(caught.value, ValueError)     # what these calls raised before
        assert "\n" not in str(caught.value)


def test_kind_of_recording_of_something_else_says_what_it_takes():
    from flyviz.errors import InputError

    for wrong in (None, "run.flyrec", 5):
        with pytest.raises(InputError, match="kind_of_recording takes a flyviz Recording"):
            kind_of_recording(wrong)
