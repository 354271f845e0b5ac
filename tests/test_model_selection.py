"""The selection query language on a labelled test model: exact sets, and one-line refusals."""

from __future__ import annotations

import dataclasses
import fnmatch
import json

import numpy as np
import pytest

from flyviz.cli import main
from flyviz.model.checkpoint import Anatomy, validate_checkpoint
from flyviz.model.selection import (SelectionError, neuron_index, parse, select)
from flyviz.model.synthetic import make_random_checkpoint
from flyviz.model.writers import write_connectome_dataset, write_recital_web

N = 151
TYPES = ["KCab", "KCg-m", "KCa'b'-ap1", "MBON01", "MBON02", "MBON11", "LHPV6q1", "", "T4a",
         "PAM(b)"]
SUPER = ["cb_intrinsic", "cb_sensory", "visual_projection", "ascending_neuron",
         "descending_neuron"]
SIDES = ["left", "right", "center", "L", "R"]  # "L"/"R" as some datasets spell them


@pytest.fixture(scope="module")
def labelled(tokenizer_vocabulary):
    """A 151-neuron model whose labels, signs and inputs the tests know independently."""
    ck = make_random_checkpoint(neurons=N, edges=2003, d_embed=8, readout_rank=5, seed=3,
                                vocabulary=tokenizer_vocabulary)
    i = np.arange(N)
    superclass = [SUPER[k % 5] for k in i]
    cell_type = [TYPES[(3 * k) % len(TYPES)] for k in i]
    side = [SIDES[(k // 2) % len(SIDES)] for k in i]
    body = 720575940600000000 + 7 * i
    # Dale's law: every neuron's outgoing synapses share its sign (every third inhibitory);
    # neurons 0..4 have only zero-weight outgoing synapses, so they have no sign.
    indices = np.asarray(ck.w_indices)
    sign = np.where(i % 3 == 0, -1.0, 1.0).astype(np.float32)
    sign[:5] = 0.0
    values = np.abs(np.asarray(ck.w_values)) * sign[indices]
    anatomy = Anatomy(positions=ck.anatomy.positions, valid=ck.anatomy.valid, kind="synthetic",
                      body_id=body, superclass=superclass, side=side, cell_type=cell_type)
    ck = dataclasses.replace(ck, w_values=values.astype(np.float32), anatomy=anatomy,
                             name="labelled")
    truth = {
        "superclass": superclass, "type": cell_type, "body": body,
        "side": [{"L": "left", "R": "right"}.get(s, s) for s in side],
        "sign": [int(sign[k]) for k in i],
        "input": set(np.asarray(ck.in_index).tolist()),
    }
    return ck, truth


def _expect(truth, predicate):
    return [k for k in range(N) if predicate(k)]


def _cases(truth):
    t = truth
    body = t["body"]
    return [
        ("all", lambda k: True),
        ("input", lambda k: k in t["input"]),
        ("id:3,17,100-109", lambda k: k in (3, 17) or 100 <= k <= 109),
        ("id: 7", lambda k: k == 7),
        (f"body:{body[4]},{body[90]}", lambda k: k in (4, 90)),
        (f"body:{body[10]}-{body[12]}", lambda k: 10 <= k <= 12),
        ("superclass:cb_sensory", lambda k: t["superclass"][k] == "cb_sensory"),
        ("superclass:CB_Sensory,visual_projection",
         lambda k: t["superclass"][k] in ("cb_sensory", "visual_projection")),
        ("type:KC*", lambda k: fnmatch.fnmatchcase(t["type"][k], "KC*")),
        ("type:MBON0?", lambda k: t["type"][k] in ("MBON01", "MBON02")),
        ("type:MBON[!0]*", lambda k: t["type"][k] == "MBON11"),
        ("type:\"PAM(b)\"", lambda k: t["type"][k] == "PAM(b)"),
        ("type:KCa'b'-ap1", lambda k: t["type"][k] == "KCa'b'-ap1"),
        ("type:*", lambda k: t["type"][k] != ""),
        ("side:left", lambda k: t["side"][k] == "left"),
        ("side:r,center", lambda k: t["side"][k] in ("right", "center")),
        ("sign:excitatory", lambda k: t["sign"][k] == 1),
        ("sign:inhibitory", lambda k: t["sign"][k] == -1),
        ("!sign:excitatory & !sign:inhibitory", lambda k: t["sign"][k] == 0),
        ("superclass:cb_intrinsic & side:left",
         lambda k: t["superclass"][k] == "cb_intrinsic" and t["side"][k] == "left"),
        ("type:KC* | type:MBON*", lambda k: t["type"][k].startswith(("KC", "MBON"))),
        ("!input", lambda k: k not in t["input"]),
        ("!!input", lambda k: k in t["input"]),
        ("sign:inhibitory & (superclass:cb_sensory | type:MBON*) & !side:center",
         lambda k: t["sign"][k] == -1 and (t["superclass"][k] == "cb_sensory"
                                            or t["type"][k].startswith("MBON"))
         and t["side"][k] != "center"),
        # & binds tighter than |, ! tighter than &.
        ("side:left | side:right & sign:inhibitory",
         lambda k: t["side"][k] == "left" or (t["side"][k] == "right" and t["sign"][k] == -1)),
        ("!side:left & input", lambda k: t["side"][k] != "left" and k in t["input"]),
        ("(superclass:cb_sensory|superclass:cb_intrinsic)&!(id:0-75)",
         lambda k: t["superclass"][k] in ("cb_sensory", "cb_intrinsic") and k > 75),
    ]


def test_every_term_and_operator_selects_exactly_the_right_neurons(labelled):
    ck, truth = labelled
    index = neuron_index(ck)
    assert neuron_index(ck) is index  # built once per checkpoint
    for query, predicate in _cases(truth):
        expected = _expect(truth, predicate)
        assert expected, query  # every case selects something
        got = index.select(query)
        assert got.tolist() == expected, query
        assert index.count(query) == len(expected)
        # Printing the tree and parsing it again selects the same neurons.
        assert index.select(str(parse(query))).tolist() == expected, query
    assert select(ck, "sign:inhibitory").tolist() == _expect(truth, lambda k: truth["sign"][k] == -1)


def test_breakdown_counts_by_superclass(labelled):
    ck, truth = labelled
    index = neuron_index(ck)
    chosen = index.select("side:left")
    expected = {}
    for k in chosen:
        expected[truth["superclass"][k]] = expected.get(truth["superclass"][k], 0) + 1
    got = index.breakdown(chosen)
    assert got == expected
    assert list(got.values()) == sorted(got.values(), reverse=True)


@pytest.mark.parametrize("query, fragments", [
    ("", ["query is empty"]),
    ("   ", ["query is empty"]),
    ("supercalss:cb_sensory", ["unknown term 'supercalss:'", "did you mean 'superclass'"]),
    ("inptu", ["unknown term 'inptu'", "did you mean 'input'"]),
    ("superclass:intrinsic", ["unknown superclass 'intrinsic'", "cb_intrinsic"]),
    ("type:MBON9*", ["matches no cell type", "closest types:", "MBON"]),
    ("type:KCb", ["matches no cell type", "KCab"]),
    ("side:up", ["unknown side 'up'", "left, right, center"]),
    ("sign:positive", ["unknown sign", "excitatory, inhibitory"]),
    ("id:1-x", ["not a number or a range"]),
    ("id:9-3", ["runs backwards"]),
    ("id:151", ["outside 0..150"]),
    ("body:5", ["body id 5 is not a neuron"]),
    ("superclass:", ["needs a value"]),
    ("superclass", ["needs a value"]),
    ("input:3", ["'input' takes no value"]),
    ("input &", ["expected a term", "at the end"]),
    ("& input", ["expected a term before '&'"]),
    ("(input", ["'(' at character 1 is never closed"]),
    ("input)", ["unexpected ')'"]),
    ("input all", ["unexpected 'a'", "join terms with & or |"]),
    ("type:\"KC", ["quoted value is not closed"]),
    ("superclass:cb_sensory & superclass:visual_projection", ["selects no neurons"]),
    ("input & !input", ["selects no neurons"]),
])
def test_bad_queries_are_refused_with_one_line(labelled, query, fragments):
    ck, _ = labelled
    with pytest.raises(SelectionError) as info:
        neuron_index(ck).select(query)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_models_without_labels_say_which_terms_work(labelled):
    ck, truth = labelled
    bare = dataclasses.replace(ck, anatomy=None)
    index = neuron_index(bare)
    assert index.select("input").tolist() == sorted(truth["input"])
    for query in ("superclass:cb_sensory", "type:KC*", "side:left", "body:1"):
        with pytest.raises(SelectionError, match="has no .* labels; select by id:, sign:"):
            index.select(query)


def test_a_missing_label_names_the_terms_this_model_does_support(labelled):
    """Without populations the demo brain said 'select by id:, sign:, input or all
    instead', though its superclass:, type: and side: labels work."""
    ck, _ = labelled
    index = neuron_index(ck)
    with pytest.raises(SelectionError) as info:
        index.select("population:sugar")
    assert str(info.value) == ("labelled has no population labels; select by id:, body:, "
                               "superclass:, type:, side:, sign:, input or all instead")
    for term in ("superclass:cb_sensory", "type:KC*", "side:left"):
        assert index.count(term) > 0   # what it names works
    bare = neuron_index(dataclasses.replace(ck, anatomy=None))
    with pytest.raises(SelectionError, match="select by id:, sign:, input or all instead$"):
        bare.select("type:KC*")


@pytest.mark.parametrize("query, fragment", [
    ("type:kc*", "cell types are case-sensitive: type:KC* matches"),
    ("type:kcab", "cell types are case-sensitive: type:KCab matches 1 cell type"),
])
def test_a_type_that_matches_only_in_another_case_says_so(labelled, query, fragment):
    """'type:sn26*' was answered with other names, not that 'SN26*' matches."""
    ck, _ = labelled
    with pytest.raises(SelectionError) as info:
        neuron_index(ck).select(query)
    assert "matches no cell type" in str(info.value) and fragment in str(info.value)
    spelling = fragment.split("type:")[1].split()[0]
    assert neuron_index(ck).count(f"type:{spelling}") > 0


@pytest.fixture
def labelled_folder(labelled, tmp_path):
    ck, _ = labelled
    write_recital_web(validate_checkpoint(ck), tmp_path / "model")
    write_connectome_dataset(ck, tmp_path / "dataset")
    return tmp_path / "model"


def test_select_command_prints_counts_and_indices(capsys, labelled, labelled_folder):
    ck, truth = labelled
    query = "sign:inhibitory & !side:center"
    expected = _expect(truth, lambda k: truth["sign"][k] == -1 and truth["side"][k] != "center")
    assert main(["select", str(labelled_folder), query, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["indices"] == expected and result["selected"] == len(expected)
    assert result["neurons"] == N
    assert sum(result["by_superclass"].values()) == len(expected)
    assert main(["select", str(labelled_folder), query]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{query} selects {len(expected)} of {N} neurons")
    for name, count in result["by_superclass"].items():
        assert any(line.split() == [name, str(count)] for line in text.splitlines())


@pytest.mark.parametrize("query, fragment", [
    ("type:XYZ", "matches no cell type"),
    ("superclass:cb_sensory & (input", "never closed"),
    ("input & !input", "selects no neurons"),
])
def test_select_command_refuses_bad_queries_with_exit_2(capsys, labelled_folder, query, fragment):
    assert main(["select", str(labelled_folder), query]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flyviz: error:") and fragment in err


def test_a_query_that_is_not_text_is_one_line(labelled):
    ck, _ = labelled
    for query in (5, None, ["input"]):
        with pytest.raises(SelectionError, match="a query must be text \\(a str\\)"):
            neuron_index(ck).select(query)
    # A parsed tree is still taken as it is.
    assert neuron_index(ck).count(parse("input")) == neuron_index(ck).count("input")
