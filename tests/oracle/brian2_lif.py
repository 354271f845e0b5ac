"""Brian2's side of the spiking tests: small brains in the authors' layout, run in Brian2.

Run it in its own venv (Brian2 2.9 imports with numpy < 2.3 only; flyviz's venv has 2.4)::

    python3 -m venv /tmp/brian2-venv
    /tmp/brian2-venv/bin/pip install brian2 'numpy<2.3' pandas pyarrow
    /tmp/brian2-venv/bin/python tests/oracle/brian2_lif.py

It rewrites ``tests/oracle/spiking/``: for each brain a folder with ``Completeness_783.csv`` and
``Connectivity_783.parquet`` (the authors' columns), the input tables, and Brian2's spikes
(``*.parquet``: ``t, trial, flywire_id, exp_name``), plus ``versions.json`` (the versions that
made them and the propagator constants Brian2 computed). The model is the authors' ``model.py``
(``create_model``, ``poi``, ``silence``) with their ``default_params``; Brian2's numpy target
is used, whose arithmetic is plain IEEE float64 (the Cython target compiles with
``-ffast-math``, which may round differently in the last bit).

Experiments per brain:

``replay``
    Explicit input events (``input_spikes.csv``) replayed as Poisson events: a
    ``SpikeGeneratorGroup`` with one-to-one synapses ``v += w_syn * f_poi`` and no delay, which
    act in the ``synapses`` slot as ``PoissonInput`` does; the targets have ``rfc = 0``.
``replay_silenced``
    The same with three of the driven neurons (``silenced.txt``) silenced: they still fire,
    their synapses carry nothing.
``poisson``
    ``PoissonInput`` (rate 150 Hz) on the neurons of ``excited.txt``, 30 trials of 1 s (the
    trials side by side as 30 unconnected copies of the brain in one network).
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent / "spiking"
TRIALS = 30


def make_brain(folder: Path, n: int, degree: float, seed: int) -> dict:
    """A small random brain written in the authors' layout (root ids like FlyWire's)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    root_ids = np.sort(rng.choice(10**14, n, replace=False)) + 720575940600000000
    rng.shuffle(root_ids)
    pd.DataFrame({"Completed": True}, index=pd.Index(root_ids, name="")).to_csv(
        folder / "Completeness_783.csv")
    out_degree = np.minimum(rng.pareto(1.5, n) * degree / 2 + 1, n - 1).astype(int)
    pre, post = [], []
    for i in range(n):
        targets = rng.choice(np.delete(np.arange(n), i), out_degree[i], replace=False)
        pre.extend([i] * len(targets))
        post.extend(targets.tolist())
    pre_a, post_a = np.array(pre), np.array(post)
    count = np.minimum(rng.zipf(1.6, pre_a.size), 300)
    sign = np.where(rng.random(n) < 0.75, 1, -1)[pre_a]
    con = pd.DataFrame({
        "Presynaptic_ID": root_ids[pre_a], "Postsynaptic_ID": root_ids[post_a],
        "Presynaptic_Index": pre_a, "Postsynaptic_Index": post_a,
        "Connectivity": count, "Excitatory": sign, "Excitatory x Connectivity": sign * count})
    con = con.sample(frac=1.0, random_state=seed).reset_index(drop=True)  # table order matters
    con.to_parquet(folder / "Connectivity_783.parquet")
    return {"root_ids": root_ids, "n": n}


def build_model(comp: Path, con: Path, params: dict, copies: int = 1):
    """The authors' ``create_model``, with ``copies`` unconnected copies side by side."""
    from brian2 import NeuronGroup, Synapses, mV

    df_comp = pd.read_csv(comp, index_col=0)
    df_con = pd.read_parquet(con)
    n = len(df_comp)
    neu = NeuronGroup(N=n * copies, model=params["eqs"], method="linear",
                      threshold=params["eq_th"], reset=params["eq_rst"], refractory="rfc",
                      name="default_neurons", namespace=params)
    neu.v = params["v_0"]
    neu.g = 0
    neu.rfc = params["t_rfc"]
    syn = Synapses(neu, neu, "w : volt", on_pre="g += w", delay=params["t_dly"],
                   name="default_synapses")
    i_pre = df_con["Presynaptic_Index"].values
    i_post = df_con["Postsynaptic_Index"].values
    syn.connect(i=np.concatenate([i_pre + c * n for c in range(copies)]),
                j=np.concatenate([i_post + c * n for c in range(copies)]))
    w = df_con["Excitatory x Connectivity"].values * params["w_syn"]
    syn.w = np.tile(np.asarray(w / mV), copies) * mV
    return neu, syn, n


def default_params() -> dict:
    """The authors' ``default_params`` (model.py), without the unused ``w = 0`` of the reset."""
    from textwrap import dedent

    from brian2 import Hz, mV, ms

    return {
        "t_run": 1000 * ms, "n_run": 30, "v_0": -52 * mV, "v_rst": -52 * mV,
        "v_th": -45 * mV, "t_mbr": 20 * ms, "tau": 5 * ms, "t_rfc": 2.2 * ms,
        "t_dly": 1.8 * ms, "w_syn": .275 * mV, "r_poi": 150 * Hz, "f_poi": 250,
        "eqs": dedent("""
            dv/dt = (v_0 - v + g) / t_mbr : volt (unless refractory)
            dg/dt = -g / tau               : volt (unless refractory)
            rfc                            : second
            """),
        "eq_th": "v > v_th",
        "eq_rst": "v = v_rst; g = 0 * mV",
    }


def run_replay(folder: Path, events: pd.DataFrame, silenced: list[int], duration_ms: float,
               root_ids: np.ndarray, name: str) -> pd.DataFrame:
    from brian2 import Network, SpikeGeneratorGroup, SpikeMonitor, Synapses, mV, ms, start_scope

    start_scope()
    params = default_params()
    neu, syn, n = build_model(folder / "Completeness_783.csv",
                              folder / "Connectivity_783.parquet", params)
    index = {int(r): i for i, r in enumerate(root_ids)}
    targets = sorted({index[int(r)] for r in events["flywire_id"]})
    local = {t: k for k, t in enumerate(targets)}
    gen = SpikeGeneratorGroup(len(targets),
                              [local[index[int(r)]] for r in events["flywire_id"]],
                              events["t"].values * 1000 * ms)
    drive = Synapses(gen, neu, on_pre="v += w_poi", namespace={
        "w_poi": params["w_syn"] * params["f_poi"]})
    drive.connect(i=np.arange(len(targets)), j=np.array(targets))
    for t in targets:
        neu[t].rfc = 0 * ms
    for k in silenced:
        syn.w[f" {k} == i"] = 0 * mV
    mon = SpikeMonitor(neu)
    net = Network(neu, syn, gen, drive, mon)
    net.run(duration_ms * ms)
    return pd.DataFrame({"t": np.asarray(mon.t / (1000 * ms)), "trial": 0,
                         "flywire_id": root_ids[np.asarray(mon.i)], "exp_name": name})


def run_poisson(folder: Path, excited: list[int], duration_ms: float, root_ids: np.ndarray,
                name: str) -> pd.DataFrame:
    from brian2 import Network, PoissonInput, SpikeMonitor, ms, seed, start_scope

    start_scope()
    seed(28)
    params = default_params()
    neu, syn, n = build_model(folder / "Completeness_783.csv",
                              folder / "Connectivity_783.parquet", params, copies=TRIALS)
    inputs = []
    for c in range(TRIALS):
        for i in excited:
            inputs.append(PoissonInput(target=neu[c * n + i:c * n + i + 1], target_var="v",
                                       N=1, rate=params["r_poi"],
                                       weight=params["w_syn"] * params["f_poi"]))
            neu[c * n + i].rfc = 0 * ms
    mon = SpikeMonitor(neu)
    net = Network(neu, syn, mon, *inputs)
    net.run(duration_ms * ms)
    index = np.asarray(mon.i)
    return pd.DataFrame({"t": np.asarray(mon.t / (1000 * ms)), "trial": index // n,
                         "flywire_id": root_ids[index % n], "exp_name": name})


def main() -> None:
    import brian2
    from brian2 import prefs

    prefs.codegen.target = "numpy"
    HERE.mkdir(parents=True, exist_ok=True)
    brains = {"small": (400, 20.0, 1), "dense": (150, 40.0, 2)}
    for label, (n, degree, seed) in brains.items():
        folder = HERE / label
        info = make_brain(folder, n, degree, seed)
        rng = np.random.default_rng(100 + seed)
        root_ids = info["root_ids"]
        driven = rng.choice(n, 8, replace=False)
        rows = []
        for j in driven:  # about 120 Hz each, at most one event per tick and neuron
            ticks = np.flatnonzero(rng.random(5000) < 0.012)
            rows.append(pd.DataFrame({"t": ticks * 0.0001, "flywire_id": root_ids[j]}))
        events = pd.concat(rows).sort_values(["t", "flywire_id"]).reset_index(drop=True)
        events.to_csv(folder / "input_spikes.csv", index=False)
        silenced = [int(i) for i in driven[:3]]  # they fire: silencing them shows
        (folder / "silenced.txt").write_text("".join(f"{root_ids[i]}\n" for i in silenced))
        excited = sorted(int(i) for i in rng.choice(n, 10, replace=False))
        (folder / "excited.txt").write_text("".join(f"{root_ids[i]}\n" for i in excited))
        run_replay(folder, events, [], 500, root_ids, "replay").to_parquet(
            folder / "brian2_replay.parquet")
        run_replay(folder, events, silenced, 500, root_ids, "replay_silenced").to_parquet(
            folder / "brian2_replay_silenced.parquet")
        run_poisson(folder, excited, 1000, root_ids, "poisson").to_parquet(
            folder / "brian2_poisson.parquet")
        print(label, "done", flush=True)

    from brian2 import NeuronGroup, ms, mV
    params = default_params()
    probe = NeuronGroup(1, params["eqs"], method="linear", threshold=params["eq_th"],
                        reset=params["eq_rst"], refractory="rfc", namespace=params)
    probe.rfc = 2.2 * ms
    from brian2 import Network
    Network(probe).run(0.1 * ms)
    (HERE / "versions.json").write_text(json.dumps({
        "brian2": brian2.__version__, "numpy": np.__version__, "pandas": pd.__version__,
        "python": platform.python_version(), "target": "numpy",
        "state_update": probe.state_updater.abstract_code,
        "poisson_weight_mV": float(params["w_syn"] * params["f_poi"] / mV),
        "argv": sys.argv}, indent=1) + "\n")


if __name__ == "__main__":
    main()
