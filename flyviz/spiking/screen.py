"""Screens of the spiking brain: many neuron sets, each activated or silenced, one run each.

The authors' experiments (Shiu et al. 2024) run the same model many times over: each of a
list of neuron sets excited with Poisson input (an *activation* screen), or one stimulus
(the sugar GRNs) with each set silenced in turn (a *silencing* screen). A screen here is

* a list of named neuron sets (:class:`NeuronSet`; a query of the selection language, as
  :func:`flyviz.spiking.run.select` takes it, or root ids), read from a sets file
  (:func:`read_sets_file`, one ``NAME: QUERY`` a line, as ``flyviz sweep --by FILE``) or
  made from a query (:func:`each_neuron`: one set per neuron it selects);
* :class:`ScreenSettings`: the mode (``activate``: each set excited at ``rate``;
  ``silence``: the base stimulus ``excite`` with each set silenced), trials, duration,
  seed and ``w_syn``.

:func:`run_screen` runs the sets as tasks (in this process, or on Dask through
:func:`flyviz.analysis.cluster.run_each`, as the lesion map and the atlas run; tasks carry
the brain's spec and load it once per worker) plus the *baseline*: the base stimulus with
nothing silenced (a silencing screen) or nothing excited (an activation screen: the model
has no spontaneous activity, so every rate is 0). Every run uses the same seed: in a
silencing screen each run gets the very same Poisson input as the baseline, so a change is
the silencing's, not the noise's; and a set's rates are exactly those of
``flyviz.spiking.simulate`` with that seed, whatever the number of workers.

A silencing screen answers without running them the sets none of whose neurons fires in the
baseline: silencing cuts only a neuron's outgoing synapses, which carry nothing from a neuron
that never spikes, and every run gets the baseline's Poisson input, so such a set's run *is*
the baseline's, bit for bit. A whole-brain screen of single neurons then runs only the few
that fire. Each set's *effect* is the change of one neuron's rate (``target``) or of the
mean rate of every neuron, with a p-value over the trials (each trial of a set and of the
baseline share their input: a paired test, :func:`paired_p_value`) and a
Benjamini–Hochberg q-value across the sets (:func:`benjamini_hochberg`). With ``pairs=N``
every pair of the ``N`` sets of largest effect is then run as one set (redundancy is not
predictable from the wiring); the pairs, chosen from the single sets' effects, are a
Benjamini–Hochberg family of their own (:meth:`ScreenResult.effects`).

With ``out`` the results go to a folder (:class:`ScreenFolder`)::

    OUT/screen.json       the settings and the brain's digest (what a rerun must match), and
                          what the last run did (``last_run``: sets, pairs, runs, sets
                          answered from the baseline)
    OUT/baseline.csv      the baseline's rate of every neuron (root_id, rate_hz) and the
                          spikes in each trial of those that fired (trial_counts)
    OUT/sets/NAME-*.csv   the same per set run (a set answered from the baseline has none)
    OUT/summary.csv       one row per set: size, neurons fired, mean rate, neurons changed,
                          the largest change and its neuron; single or pair; run or answered
                          from the baseline; effect, p-value, q-value (over the rows of
                          its kind: the single sets one family, the pairs another)

each a checksummed table (:mod:`flyviz.analysis.table_file`) written through a temporary
file, so a run stopped at any point (Ctrl+C) leaves only whole files. Running the same
screen into the same folder again skips the sets already there (and writes the same
summary, bit for bit); other settings in that folder are refused in one line.

Qt-free.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.analysis import cluster
from flyviz.analysis.table_file import read_table_file, write_table_file
from flyviz.errors import InputError, SelectionError
from flyviz.spiking.brain import SpikingBrain
from flyviz.spiking.engine import LIFParams
from flyviz.spiking.run import (check_input_size, check_rate, check_run_size, select,
                                simulate)

__all__ = ["BASELINE", "EXCITE_OPTION", "MODES", "NeuronSet", "ScreenError", "ScreenFolder",
           "ScreenResult", "MAX_PAIRS", "ScreenSettings", "SetTask", "StimulusWords",
           "base_stimulus", "benjamini_hochberg", "brain_digest",
           "check_pairs",
           "each_neuron", "pair_sets", "paired_p_value", "parse_sets", "read_set_rates",
           "query_text", "read_set_run", "read_sets_file", "read_summary", "resolve_sets",
           "run_screen", "screen_task", "trial_counts", "worker_brain"]

#: The two kinds of screen.
MODES = ("activate", "silence")
#: The summary's name for the baseline run.
BASELINE = "(baseline)"
#: The ``format`` of a screen folder's ``screen.json`` and summary.
FORMAT = "flyviz-screen"
FORMAT_VERSION = 2
#: ``screen.json``'s entry saying what the last run did (not part of the key).
OUTCOME = "last_run"
SET_FORMAT = "flyviz-screen-set"
SUMMARY_PREFIX = "# flyviz-screen "
SET_PREFIX = "# flyviz-screen-set "
_PARQUET_KEY = b"flyviz_screen"
#: The summary's columns, in order.
SUMMARY_COLUMNS = ("set", "query", "neurons", "fired", "mean_rate_hz", "changed",
                   "largest_change_hz", "largest_change_root_id", "kind", "first", "second",
                   "answered", "effect_hz", "p_value", "q_value")


class ScreenError(InputError):
    """A screen's sets, settings or folder are wrong (one line)."""


# ---------------------------------------------------------------- the sets
@dataclass(frozen=True)
class NeuronSet:
    """One set of a screen: its name, the query it was given as, its model indices."""

    name: str
    query: str
    members: np.ndarray = field(compare=False)

    @property
    def size(self) -> int:
        """Number of neurons."""
        return int(self.members.size)

    def digest(self) -> str:
        """SHA-256 of the members (what a finished set's file is checked against)."""
        return hashlib.sha256(np.ascontiguousarray(self.members, np.int64).tobytes()).hexdigest()


_ROOT_IDS = re.compile(r"[0-9][0-9,\s]*")


def query_text(query: str) -> str:
    """A query as :func:`select` takes it: bare numbers (``720575940624963786, ...``) are root
    ids, the rest the selection language."""
    text = query.strip()
    if _ROOT_IDS.fullmatch(text):
        return "body:" + ",".join(text.replace(",", " ").split())
    return text


def parse_sets(text: str, source: str = "the sets") -> list[tuple[str, str]]:
    """``(name, query)`` of each ``NAME: QUERY`` line of ``text`` (blank lines and ``#``
    comments skipped; a tab may stand for the colon). Raises :class:`ScreenError` naming the
    line that is not one, a repeated name, a name starting with ``(``, or no set at all."""
    from flyviz.model.selection import parse

    found: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}, line {number}"
        sep = "\t" if "\t" in line and (":" not in line or line.index("\t") < line.index(":")) \
            else ":"
        name, colon, query = line.partition(sep)
        name, query = name.strip(), query.strip()
        if not colon or not name:
            raise ScreenError(f"{where}: expected 'NAME: QUERY', e.g. 'sugar: type:GRN*', not "
                              f"{line[:60]!r}")
        if not query:
            raise ScreenError(f"{where}: the set {name!r} is empty (no query after the name)")
        if name.startswith("("):
            raise ScreenError(f"{where}: a set name may not start with '(' ({BASELINE} is the "
                              "baseline's)")
        if name in seen:
            raise ScreenError(f"{where}: the set name {name!r} is used on line {seen[name]} "
                              "too; give each set its own name")
        try:
            parse(query_text(query))
        except SelectionError as exc:
            raise ScreenError(f"{where} ({name}): {exc}") from None
        seen[name] = number
        found.append((name, query))
    if not found:
        raise ScreenError(f"{source} holds no 'NAME: QUERY' line")
    return found


def read_sets_file(path: str | Path) -> list[tuple[str, str]]:
    """The sets of a sets file (see :func:`parse_sets`); one line when it cannot be read."""
    from flyviz.fileio import open_regular, os_error, shipped_example_hint

    p = Path(path).expanduser()
    if not p.exists():
        raise ScreenError(f"sets file not found: {p}{shipped_example_hint(p)}")
    try:
        with open_regular(p, "rb", "sets file") as handle:
            text = handle.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScreenError(f"the sets file {p} is not UTF-8 text (undecodable byte at offset "
                          f"{exc.start})") from None
    except OSError as exc:
        raise os_error(exc, p, "read") from None
    return parse_sets(text, p.name)


def resolve_sets(brain: SpikingBrain, named: Sequence[tuple[str, str]]) -> list[NeuronSet]:
    """Each ``(name, query)`` as the neurons it selects on ``brain``; :class:`ScreenError`
    (one line, naming the set) for a query that fails or selects nothing."""
    sets = []
    for name, query in named:
        try:
            members = select(brain, query_text(query))
        except InputError as exc:
            raise ScreenError(f"set {name!r}: {exc}") from None
        members = np.unique(np.asarray(members, np.int64))
        if members.size == 0:
            raise ScreenError(f"set {name!r} ({query}) selects no neuron of {brain.name}")
        members.setflags(write=False)
        sets.append(NeuronSet(str(name), str(query), members))
    return sets


def each_neuron(brain: SpikingBrain, query: str) -> list[NeuronSet]:
    """One set per neuron ``query`` selects (a screen of single neurons), named by root id."""
    try:
        members = select(brain, query_text(query))
    except InputError as exc:
        raise ScreenError(f"{query}: {exc}") from None
    if len(members) == 0:
        raise ScreenError(f"{query} selects no neuron of {brain.name}")
    out = []
    for i in np.unique(np.asarray(members, np.int64)).tolist():
        one = np.array([i], np.int64)
        one.setflags(write=False)
        root = int(brain.root_ids[i])
        out.append(NeuronSet(str(root), f"body:{root}", one))
    return out


# ---------------------------------------------------------------- settings
@dataclass(frozen=True)
class ScreenSettings:
    """How every run of a screen goes.

    Attributes
    ----------
    mode
        ``"activate"``: each set given Poisson input at ``rate`` (the authors' activation
        experiments); ``"silence"``: the base stimulus ``excite`` with each set's outgoing
        synapses zeroed.
    excite
        A silencing screen's base stimulus, a query (``None``: the brain's own set, the
        demo's 21 sensory neurons). An activation screen takes none.
    rate
        Poisson rate of the excited neurons, Hz.
    trials, duration_s, seed
        Trials per run, biological seconds per trial, the seed of every run's input.
    w_syn
        Weight of one synapse, mV (``None``: the brain's).
    """

    mode: str = "activate"
    excite: str | None = None
    rate: float = 150.0
    trials: int = 1
    duration_s: float = 1.0
    seed: int = 0
    w_syn: float | None = None

    def validate(self) -> "ScreenSettings":
        """Raise :class:`ScreenError` for a value out of range; return ``self``."""
        if self.mode not in MODES:
            raise ScreenError(f"--mode {self.mode!r} must be one of {', '.join(MODES)}")
        if self.mode == "activate" and self.excite is not None:
            raise ScreenError("--excite is a silencing screen's base stimulus; an activation "
                              "screen excites each set alone (use --mode silence)")
        for name, value in (("--rate", self.rate), ("--duration", self.duration_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not math.isfinite(value) or value < 0:
                raise ScreenError(f"{name} must be a non-negative number, not {value}")
        if self.duration_s == 0:
            raise ScreenError("--duration must be longer than 0")
        if self.rate == 0:
            # no input: nothing fires in any run, so every set's effect would be a 0 that
            # says nothing about the set
            raise ScreenError("--rate 0 Hz drives no neuron, so every set's effect would be "
                              "0; give the Poisson input's rate (default 150 Hz)")
        tick_s = LIFParams().dt_s
        if self.duration_s < tick_s:
            raise ScreenError(f"--duration {self.duration_s * 1000:g} ms is shorter than one "
                              f"tick ({tick_s * 1000:g} ms)")
        if self.w_syn is not None and not math.isfinite(self.w_syn):
            raise ScreenError(f"--w-syn must be a number, not {self.w_syn}")
        try:   # the bounds of every run (flyviz.spiking.run), before a folder is written
            check_rate(self.rate, tick_s, "--rate")
            check_run_size(self.duration_s, self.trials, self.seed,
                           ("--duration", "--trials", "--seed"))
        except InputError as exc:
            raise ScreenError(str(exc)) from None
        return self

    def params(self, brain: SpikingBrain) -> LIFParams:
        """The model's constants of every run on ``brain``."""
        return LIFParams(w_syn=brain.w_syn if self.w_syn is None else float(self.w_syn),
                         rate=float(self.rate))


@dataclass(frozen=True)
class StimulusWords:
    """How a refused stimulus names the place it was given in: the command line's
    ``--excite`` (:data:`EXCITE_OPTION`), the Screen dock's Stimulus field. Each is a
    :meth:`str.format` template.

    Attributes
    ----------
    not_a_query
        The query cannot be read; ``{why}`` says why.
    selects_none
        The query (``{query}``) selects no neuron of the brain (``{brain}``).
    missing
        No query, and the brain (``{brain}``) has no stimulus of its own.
    """

    not_a_query: str
    selects_none: str
    missing: str


#: The command line's words (``flyviz screen --excite``).
EXCITE_OPTION = StimulusWords(
    not_a_query="--excite: {why}",
    selects_none="--excite {query} selects no neuron of {brain}",
    missing="a silencing screen needs a stimulus: give --excite QUERY")


def base_stimulus(brain: SpikingBrain, settings: ScreenSettings,
                  words: StimulusWords = EXCITE_OPTION) -> np.ndarray:
    """The neurons excited in every run of a silencing screen (none in an activation one).
    A front end checks a screen with it before it starts, in its own ``words``.

    Raises
    ------
    ScreenError
        The stimulus is not a query, selects no neuron, or is not given on a brain with
        no stimulus of its own.
    """
    if settings.mode == "activate":
        return np.empty(0, np.int64)
    if settings.excite is not None and settings.excite.strip():
        try:
            excite = select(brain, query_text(settings.excite))
        except InputError as exc:
            raise ScreenError(words.not_a_query.format(why=exc)) from None
        if len(excite) == 0:
            raise ScreenError(words.selects_none.format(query=settings.excite,
                                                        brain=brain.name))
        return np.unique(np.asarray(excite, np.int64))
    if brain.default_excite is None:
        raise ScreenError(words.missing.format(brain=brain.name))
    return np.unique(np.asarray(brain.default_excite, np.int64))


# ---------------------------------------------------------------- identity
_digests: dict[int, tuple[Any, str]] = {}


def brain_digest(brain: SpikingBrain) -> str:
    """SHA-256 of the brain's neurons and synapses (root ids, rows, targets, signed counts),
    kept per brain object."""
    held = _digests.get(id(brain))
    if held is not None and held[0]() is brain:
        return held[1]
    h = hashlib.sha256()
    for array, dtype in ((brain.root_ids, np.int64), (brain.indptr, np.int64),
                         (brain.post, np.int32), (brain.counts, np.float64)):
        h.update(np.ascontiguousarray(array, dtype).tobytes())
    digest = h.hexdigest()
    _digests[id(brain)] = (weakref.ref(brain), digest)
    return digest


# ---------------------------------------------------------------- one run
@dataclass(eq=False)
class SetTask:
    """One task of a screen: item ``index`` (0 is the baseline), its set's name and
    members (``None`` for the baseline)."""

    index: int
    name: str
    members: np.ndarray | None

    @property
    def n_tokens(self) -> int:
        """Its share of the progress: one run."""
        return 1


def run_set(brain: SpikingBrain, settings: ScreenSettings, base: np.ndarray,
            members: np.ndarray | None, threads: int | None = None) -> cluster.Partial:
    """One run of the screen: ``members`` excited (activate) or silenced (silence); ``None``:
    the baseline. Returns ``{"rates": (n,) Hz, mean over the trials, "fired": (k,) the
    neurons that spiked, "counts": (trials, k) their spikes in each trial}`` (the trial
    counts give each set's p-value, :func:`paired_p_value`)."""
    if settings.mode == "activate":
        excite = np.empty(0, np.int64) if members is None else members
        silence = None
    else:
        excite, silence = base, members
    run = simulate(brain, excite=excite, silence=silence, duration_s=settings.duration_s,
                   trials=settings.trials, seed=settings.seed, params=settings.params(brain),
                   threads=threads)
    fired, counts = trial_counts(run.trial, run.neuron, run.trials, brain.neurons)
    return {"rates": np.asarray(run.rates(), np.float64), "fired": fired, "counts": counts}


def trial_counts(trial: np.ndarray, neuron: np.ndarray, trials: int,
                 neurons: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(fired, counts)``: the neurons that spiked (sorted) and ``(trials, fired)`` their
    spikes in each trial. ``neurons``: the brain's size, where known (else the largest
    neuron index plus one)."""
    trials = int(trials)
    neuron = np.asarray(neuron, np.int64)
    n = int(neurons) if neurons is not None else int(neuron.max(initial=-1)) + 1
    if trials * n <= 4 * neuron.size + (1 << 20):
        # every neuron's spikes in each trial in one counting pass, where that table is not
        # much larger than the spikes: a set of 3 trials at 5,000 excited (3.7 M spikes) in
        # 0.014 CPU s instead of the 0.29 that sorting the spikes by neuron took
        table = np.bincount(np.asarray(trial, np.int64) * n + neuron,
                            minlength=trials * n).reshape(trials, n)
        fired = np.flatnonzero(table.any(axis=0))
        return fired.astype(np.int64, copy=False), table[:, fired].astype(np.int64, copy=False)
    fired, column = np.unique(neuron, return_inverse=True)
    flat = np.asarray(trial, np.int64) * fired.size + column.reshape(-1)
    counts = np.bincount(flat, minlength=trials * fired.size)
    return fired, counts.astype(np.int64).reshape(trials, fired.size)


@dataclass(frozen=True)
class _InProcess:
    """The task function of a screen run in this process: the caller's own brain."""

    brain: SpikingBrain
    settings: ScreenSettings
    base: np.ndarray
    threads: int | None

    def __call__(self, item: SetTask) -> cluster.Partial:
        # A Ctrl+C interrupts the engine's wait for its trial threads, never a compiled
        # trial (flyviz.spiking.engine.simulate_ticks).
        return run_set(self.brain, self.settings, self.base, item.members, self.threads)


_worker_brains: dict[str, SpikingBrain] = {}


def screen_task(spec: dict[str, Any], digest: str, settings: dict[str, Any], base: np.ndarray,
                item: SetTask) -> cluster.Partial:
    """One task on a Dask worker: the brain is loaded from ``spec`` (once per process) and
    must be the client's (``digest``)."""
    brain = worker_brain(spec, digest)
    return run_set(brain, ScreenSettings(**settings), base, item.members, threads=1)


def worker_brain(spec: dict[str, Any], digest: str) -> SpikingBrain:
    """The brain ``spec`` names (as :func:`run_screen` takes it), loaded once per process
    (the last one kept); :class:`ScreenError` when it is not the client's (``digest``)."""
    from flyviz.spiking.brain import load_brain

    key = json.dumps(spec, sort_keys=True)
    brain = _worker_brains.get(key)
    if brain is None:
        brain = load_brain(spec["brain"], spec.get("connectivity"),
                           coordinates=spec.get("coordinates"),
                           classification=spec.get("classification"))
        _worker_brains.clear()
        _worker_brains[key] = brain
    if brain_digest(brain) != digest:
        raise ScreenError(f"a worker loaded another brain from {spec['brain']!r} (its synapses "
                          "differ from the client's); give every worker the same files")
    return brain


# ---------------------------------------------------------------- the folder
def _slug(name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:60] or "set"
    return f"{safe}-{hashlib.sha256(name.encode('utf-8')).hexdigest()[:8]}.csv"


class ScreenFolder:
    """A screen's output folder (see the module notes).

    Parameters
    ----------
    folder
        Where it is.
    key
        What every result in it depends on (the brain's digest, the settings); a folder
        made under another key is refused.
    """

    def __init__(self, folder: str | Path, key: dict[str, Any]) -> None:
        self.folder = Path(folder).expanduser()
        self.key = json.loads(json.dumps(key, sort_keys=True))
        self.key_digest = hashlib.sha256(json.dumps(self.key, sort_keys=True)
                                         .encode("utf-8")).hexdigest()
        self.notes: list[str] = []

    @property
    def manifest(self) -> Path:
        """``screen.json``."""
        return self.folder / "screen.json"

    @staticmethod
    def check_writable(folder: str | Path) -> None:
        """Refuse, before any work, a folder that cannot be made or written, or a folder that
        holds other things and no screen."""
        from flyviz.fileio import check_name_lengths, probe_writable

        p = Path(folder).expanduser()
        check_name_lengths(p, "--out")
        if p.exists() and not p.is_dir():
            raise ScreenError(f"--out {p} is a file; give a folder for the screen")
        if p.is_dir():
            import os

            if not os.access(p, os.W_OK | os.X_OK):
                raise ScreenError(f"cannot write --out {p}: the folder is not writable")
            if not (p / "screen.json").is_file() and any(p.iterdir()):
                raise ScreenError(f"--out {p} holds other files and no screen; give a new or "
                                  "empty folder")
            probe_writable(p, "--out", p)
            return
        parent = p.parent
        import os

        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise ScreenError(f"cannot write --out {p}: {parent} is not a writable folder")
        # os.access says yes to root everywhere, /proc included: only a file made there
        # tells, before the brain loads.
        probe_writable(parent, "--out", p)

    @staticmethod
    def check_settings(folder: str | Path, settings: ScreenSettings) -> None:
        """Refuse, before the brain is loaded, a folder holding a screen made with other
        settings (the brain itself is checked by :meth:`open`)."""
        manifest = Path(folder).expanduser() / "screen.json"
        try:
            held = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if not isinstance(held, dict):
            return
        now = {"mode": settings.mode, "excite": settings.excite, "rate": float(settings.rate),
               "trials": int(settings.trials), "duration_s": float(settings.duration_s),
               "seed": int(settings.seed)}
        if settings.w_syn is not None:
            now["w_syn"] = float(settings.w_syn)
        then = {k: held.get(k) for k in now}
        if then != now:
            raise ScreenError(f"{Path(folder).expanduser()} holds a screen with another "
                              f"{', '.join(_differences(then, now))}; run with the same "
                              "options to continue it, or give another --out")

    def open(self) -> None:
        """Make the folder (or check the one there was made under this key)."""
        from flyviz.fileio import os_error, write_text_atomically

        self.check_writable(self.folder)
        if self.manifest.is_file():
            try:
                held = json.loads(self.manifest.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                raise ScreenError(f"{self.manifest} is damaged; delete {self.folder} or give "
                                  "another --out") from None
            if not isinstance(held, dict) or held.get("format") != FORMAT:
                raise ScreenError(f"{self.manifest} is not a flyviz screen's")
            held.pop(OUTCOME, None)
            if held != self.key:
                changed = _differences(held, self.key)
                raise ScreenError(f"{self.folder} holds a screen with another "
                                  f"{', '.join(changed)}; run with the same options to "
                                  "continue it, or give another --out")
            return
        # What this call makes is taken back if the manifest cannot be written (a full
        # disk): a folder left without its screen.json would refuse the corrected rerun.
        made = [d for d in (self.folder, self.folder / "sets") if not d.exists()]
        try:
            (self.folder / "sets").mkdir(parents=True, exist_ok=True)
            write_text_atomically(self.manifest, json.dumps(self.key, indent=1, sort_keys=True)
                                  + "\n")
        except BaseException as exc:
            for folder in reversed(made):
                try:
                    folder.rmdir()
                except OSError:
                    pass
            if isinstance(exc, OSError):
                raise os_error(exc, self.folder, "write") from None
            raise

    def path_of(self, item: SetTask) -> Path:
        """Where item ``item``'s rates are (the baseline's: ``baseline.csv``)."""
        if item.members is None:
            return self.folder / "baseline.csv"
        return self.folder / "sets" / _slug(item.name)

    def _info(self, item: SetTask, neuron_set: NeuronSet | None) -> dict[str, Any]:
        info: dict[str, Any] = {"format": SET_FORMAT, "version": FORMAT_VERSION,
                                "screen_sha256": self.key_digest,
                                "set": BASELINE if neuron_set is None else neuron_set.name}
        if neuron_set is not None:
            info.update(query=neuron_set.query, neurons=neuron_set.size,
                        members_sha256=neuron_set.digest())
        return info

    def finished(self, item: SetTask, neuron_set: NeuronSet | None) -> cluster.Partial | None:
        """The stored run of ``item`` (as :func:`run_set` returns it), or ``None`` when it is
        not done (or its file is damaged: noted, and computed again).

        Raises
        ------
        ScreenError
            When the file holds the set of that name under another query or neurons.
        """
        path = self.path_of(item)
        if not path.is_file():
            return None
        try:
            info, found = read_set_run(path)
        except ScreenError as exc:
            self.notes.append(f"{exc}; it is computed again")
            return None
        expected = self._info(item, neuron_set)
        if info.get("screen_sha256") != self.key_digest:
            self.notes.append(f"{path.name} belongs to another screen; it is computed again")
            return None
        if info.get("members_sha256") != expected.get("members_sha256"):
            raise ScreenError(f"the set {item.name!r} in {self.folder} was run as "
                              f"{info.get('query')!r} ({info.get('neurons')} neurons), not as "
                              f"{expected.get('query')!r}; rename the set or give another --out")
        if found["counts"].shape[0] != int(self.key.get("trials", 0)):
            self.notes.append(f"{path.name} holds {found['counts'].shape[0]} trials, not "
                              f"{self.key.get('trials')}; it is computed again")
            return None
        return found

    def save(self, item: SetTask, neuron_set: NeuronSet | None, brain: SpikingBrain,
             run: cluster.Partial) -> None:
        """Write ``item``'s run (through a temporary file): every neuron's rate and, for
        those that fired, their spikes in each trial."""
        per_neuron = [""] * brain.neurons
        counts = np.asarray(run["counts"], np.int64)
        for column, neuron in enumerate(np.asarray(run["fired"], np.int64).tolist()):
            per_neuron[neuron] = " ".join(map(str, counts[:, column].tolist()))
        write_table_file(self.path_of(item),
                         {"root_id": np.asarray(brain.root_ids, np.int64),
                          "rate_hz": np.asarray(run["rates"], np.float64),
                          "trial_counts": per_neuron},
                         {**self._info(item, neuron_set), "trials": int(counts.shape[0])},
                         "csv", csv_prefix=SET_PREFIX, parquet_key=_PARQUET_KEY,
                         what="screen set")

    def write_outcome(self, outcome: dict[str, Any]) -> None:
        """Say in ``screen.json`` what the last run did (sets run, answered from the
        baseline, found done): beside the key, which a rerun is checked against."""
        from flyviz.fileio import write_text_atomically

        write_text_atomically(self.manifest, json.dumps({**self.key, OUTCOME: outcome},
                                                        indent=1, sort_keys=True) + "\n")

    def summary_path(self) -> Path:
        """``summary.csv``."""
        return self.folder / "summary.csv"


def _differences(held: dict[str, Any], key: dict[str, Any]) -> list[str]:
    """What differs between two keys, in the user's words (digests as what they stand for)."""
    out = []
    if held.get("brain") != key.get("brain") and "brain" in key:
        out.append("brain (its neurons or synapses differ)")
    for name in sorted(set(held) | set(key)):
        a, b = held.get(name), key.get(name)
        if a == b or name in ("brain", "excited", "excited_sha256"):
            continue
        out.append(f"{name} ({a!r} there, {b!r} now)")
    if held.get("excited_sha256") != key.get("excited_sha256") \
            and held.get("excite") == key.get("excite") and "excited_sha256" in key:
        out.append("base stimulus (its neurons differ)")
    return out


def read_set_run(path: str | Path) -> tuple[dict[str, Any], cluster.Partial]:
    """The metadata and the run of one set's file (as :func:`run_set` returns it)."""
    p = Path(path)

    def error(text: str) -> ScreenError:
        return ScreenError(text)

    def damaged(why: str) -> ScreenError:
        return ScreenError(f"{p.name} is damaged ({why})")

    info, rows = read_table_file(p, "csv", csv_prefix=SET_PREFIX, parquet_key=_PARQUET_KEY,
                                 what="flyviz screen set", error=error, damaged=damaged)
    if not isinstance(info, dict) or info.get("format") != SET_FORMAT:
        raise error(f"{p.name} is not a flyviz screen set")
    trials = info.get("trials")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise damaged("no trial count")
    try:
        rates = np.array([float(r["rate_hz"]) for r in rows], np.float64)
        fired = [i for i, r in enumerate(rows) if r["trial_counts"]]
        counts = np.zeros((trials, len(fired)), np.int64)
        for column, i in enumerate(fired):
            values = [int(c) for c in rows[i]["trial_counts"].split()]
            if len(values) != trials:
                raise damaged(f"row {i + 1} holds {len(values)} trial counts, not {trials}")
            counts[:, column] = values
    except (KeyError, TypeError, ValueError, AttributeError):
        raise damaged("no rate_hz or trial_counts column") from None
    return info, {"rates": rates, "fired": np.asarray(fired, np.int64), "counts": counts}


def read_set_rates(path: str | Path) -> tuple[dict[str, Any], np.ndarray]:
    """The metadata and the rates (``(n,)`` Hz, in model order) of one set's file."""
    info, run = read_set_run(path)
    return info, run["rates"]


def read_summary(folder: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The metadata and the rows of a screen folder's ``summary.csv``."""
    p = Path(folder).expanduser() / "summary.csv"
    if not p.is_file():
        raise ScreenError(f"no screen summary at {p}")

    def error(text: str) -> ScreenError:
        return ScreenError(text)

    return read_table_file(p, "csv", csv_prefix=SUMMARY_PREFIX, parquet_key=_PARQUET_KEY,
                           what="flyviz screen", error=error,
                           damaged=lambda why: ScreenError(f"{p.name} is damaged ({why})"))


# ---------------------------------------------------------------- statistics
def paired_p_value(with_set: np.ndarray, baseline: np.ndarray) -> float:
    """Two-sided p-value of a set's effect over the trials: the Wilcoxon signed-rank test of
    the per-trial differences ``with_set - baseline`` (each trial's run and the baseline's
    share its Poisson input, so the trials are pairs). Trials with no difference carry no
    sign and are left out; with none left the p-value is 1 (the runs are the same)."""
    difference = np.asarray(with_set, np.float64) - np.asarray(baseline, np.float64)
    difference = difference[difference != 0]
    if difference.size == 0:
        return 1.0
    return _signed_rank_p_value(difference.tobytes())


@functools.lru_cache(maxsize=4096)
def _signed_rank_p_value(difference: bytes) -> float:
    """The Wilcoxon signed-rank p-value of the float64 differences ``difference`` (their
    bytes, in trial order), kept for the same differences: with ties SciPy enumerates every
    sign flip (tenths of a second for ten trials), and a screen asks for the same one again
    and again (its summary, :meth:`ScreenResult.effects`, the pairs' choice and matrix; sets
    whose trials differ from the baseline's alike)."""
    from scipy.stats import wilcoxon

    return float(wilcoxon(np.frombuffer(difference, np.float64), zero_method="wilcox").pvalue)


def benjamini_hochberg(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (q-values) of a family of tests: a set whose
    q-value is at most ``alpha`` is a discovery at false discovery rate ``alpha``. NaN
    p-values are left out of the family and stay NaN."""
    p = np.asarray(p_values, np.float64)
    q = np.full(p.shape, np.nan)
    tested = np.flatnonzero(np.isfinite(p))
    m = tested.size
    if m == 0:
        return q
    order = tested[np.argsort(p[tested], kind="stable")]
    scaled = p[order] * m / np.arange(1, m + 1)
    q[order] = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
    return q


# ---------------------------------------------------------------- a screen
#: The summary's kinds of row.
SINGLE, PAIR = "single", "pair"
#: How a set was answered: run, or read off the baseline (a silenced set none of whose
#: neurons fires in it cannot change anything).
RUN, FROM_BASELINE = "run", "baseline"
#: The false discovery rate the command marks discoveries at.
ALPHA = 0.05


@dataclass
class ScreenResult:
    """What :func:`run_screen` returns.

    Attributes
    ----------
    sets, settings
        The screen: its single sets, then the pairs (:attr:`pair_of`).
    baseline
        ``(n,)`` rates of the baseline run, Hz.
    rates
        ``(sets, len(columns))`` rates of the neurons ``columns`` in each set's run, Hz.
    columns
        The neurons whose rates are kept (all by default).
    trial_counts, baseline_counts
        ``(sets, trials, len(columns))`` and ``(trials, len(columns))``: the kept neurons'
        spikes in each trial (what their p-values are computed from).
    trial_totals, baseline_totals
        ``(sets, trials)`` and ``(trials,)``: every neuron's spikes in each trial.
    answered
        Per set, :data:`RUN` or :data:`FROM_BASELINE`.
    pair_of
        Per set, ``None`` (a single set) or the indices of the two single sets it joins.
    top
        The single sets whose pairs were screened (the top responders), strongest first.
    computed, resumed, pruned, workers, seconds
        Runs now, runs found finished in the folder, sets answered from the baseline,
        workers used, wall time.
    folder
        The output folder, or ``None``.
    summary
        The summary's rows (:data:`SUMMARY_COLUMNS`), the baseline's first.
    """

    sets: list[NeuronSet]
    settings: ScreenSettings
    baseline: np.ndarray
    rates: np.ndarray
    columns: np.ndarray
    trial_counts: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0), np.int64))
    baseline_counts: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int64))
    trial_totals: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int64))
    baseline_totals: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    answered: list[str] = field(default_factory=list)
    pair_of: list[tuple[int, int] | None] = field(default_factory=list)
    top: list[int] = field(default_factory=list)
    computed: int = 0
    resumed: int = 0
    pruned: int = 0
    workers: int = 1
    seconds: float = 0.0
    folder: Path | None = None
    summary: list[dict[str, Any]] = field(default_factory=list)

    def _column(self, neuron: int) -> int:
        at = np.flatnonzero(self.columns == int(neuron))
        if at.size == 0:
            raise ScreenError(f"neuron {neuron} is not among the neurons this screen kept")
        return int(at[0])

    @property
    def singles(self) -> list[int]:
        """The indices of the single sets (the rest are pairs)."""
        return [i for i, pair in enumerate(self.pair_of or [None] * len(self.sets))
                if pair is None]

    def rate_of(self, neuron: int) -> np.ndarray:
        """``(sets,)`` rate of ``neuron`` in each set's run, Hz."""
        return self.rates[:, self._column(neuron)]

    def change_of(self, neuron: int) -> np.ndarray:
        """``(sets,)`` change of ``neuron``'s rate from the baseline in each set's run, Hz."""
        return self.rate_of(neuron) - self.baseline[int(neuron)]

    def effects(self, target: int | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(effect_hz, p_value, q_value)``, each ``(sets,)``: the change of ``target``'s rate
        (``None``: of the mean rate of every neuron) in each set's run, its p-value over the
        trials (:func:`paired_p_value`) and its Benjamini–Hochberg q-value.

        The single sets are one family and the pairs another: a single set's q-value is the
        one of the same screen without pairs. The pairs are chosen after the fact, from the
        singles' largest effects, so their tests are not exchangeable with the singles'; in
        one family they would raise the count of discoveries (a pair of two strong sets is
        strong by construction, and each of them lowers every single's q). Within each
        family only the sets that change the target in some trial count (a set that
        changes it in none has p and q 1)."""
        if target is None:
            n = self.baseline.shape[0]
            seconds = self.settings.duration_s * max(1, self.trial_totals.shape[1])
            effect = self.trial_totals.sum(axis=1) / (n * seconds) - \
                self.baseline_totals.sum() / (n * seconds)
            per_trial, base = self.trial_totals, self.baseline_totals
        else:
            column = self._column(target)
            effect = self.change_of(target)
            per_trial, base = self.trial_counts[:, :, column], self.baseline_counts[:, column]
        p = np.array([paired_p_value(row, base) for row in per_trial], np.float64)
        # A set whose every trial gives the baseline's count is known to do nothing (its runs
        # are the baseline's: the same input, nothing reached): no test, not in the family.
        # Counting them would let a whole-brain screen's thousands of unreached sets bury
        # every effect (m in the q-values).
        moved = (np.asarray(per_trial) != np.asarray(base)[None, :]).any(axis=1) \
            if per_trial.size else np.zeros(len(p), bool)
        q = np.ones(len(p))
        is_pair = np.array([pair is not None for pair in self.pair_of]
                           + [False] * (len(p) - len(self.pair_of)), bool)
        for family in (~is_pair, is_pair):
            tested = family & moved
            q[tested] = benjamini_hochberg(p[tested])
        return np.asarray(effect, np.float64), p, q

    def pair_matrix(self, target: int | None = None) -> tuple[list[str], np.ndarray]:
        """The names of the top responders and the ``(N, N)`` effects (Hz, as
        :meth:`effects`) of their pairs, each single set's own effect on the diagonal."""
        effect = self.effects(target)[0]
        where = {pair: i for i, pair in enumerate(self.pair_of) if pair is not None}
        size = len(self.top)
        matrix = np.full((size, size), np.nan)
        for a, first in enumerate(self.top):
            matrix[a, a] = effect[first]
            for b, second in enumerate(self.top):
                at = where.get((min(first, second), max(first, second)))
                if a != b and at is not None:
                    matrix[a, b] = effect[at]
        return [self.sets[i].name for i in self.top], matrix

    def neuron_values(self, target: int) -> np.ndarray:
        """``(n,)`` per neuron: the change of ``target``'s rate when that neuron's single set
        was run (a neuron in several sets: the largest change in size, the first of equal
        ones); NaN for a neuron in no set. What the app's screen layer colours by."""
        change = self.change_of(target)
        values = np.full(self.baseline.shape[0], np.nan)
        size = np.full(self.baseline.shape[0], -1.0)
        for i in self.singles:
            members, value = self.sets[i].members, float(change[i])
            bigger = abs(value) > size[members]
            values[members[bigger]] = value
            size[members[bigger]] = abs(value)
        return values


def _summary_row(name: str, query: str, size: int, rates: np.ndarray, baseline: np.ndarray,
                 root_ids: np.ndarray) -> dict[str, Any]:
    change = rates - baseline
    top = int(np.argmax(np.abs(change))) if change.size else 0
    moved = bool(change.size) and change[top] != 0
    return {"set": name, "query": query, "neurons": int(size),
            "fired": int((rates > 0).sum()), "mean_rate_hz": float(rates.mean()),
            "changed": int((change != 0).sum()),
            "largest_change_hz": float(change[top]) if moved else 0.0,
            "largest_change_root_id": int(root_ids[top]) if moved else 0}


def screen_key(brain: SpikingBrain, settings: ScreenSettings, base: np.ndarray
               ) -> dict[str, Any]:
    """What every result of the screen depends on: the format, the brain, the settings (the
    base stimulus as its neurons' digest too) and the model's constants."""
    params = settings.params(brain)
    return {"format": FORMAT, "version": FORMAT_VERSION,
            "brain": {"name": brain.name, "neurons": brain.neurons,
                      "synapses": brain.synapses, "sha256": brain_digest(brain)},
            "mode": settings.mode, "excite": settings.excite,
            "excited": int(base.size),
            "excited_sha256": hashlib.sha256(base.astype(np.int64).tobytes()).hexdigest(),
            "rate": float(settings.rate), "trials": int(settings.trials),
            "duration_s": float(settings.duration_s), "seed": int(settings.seed),
            "w_syn": float(params.w_syn)}


def pair_sets(sets: Sequence[NeuronSet], top: Sequence[int]
              ) -> list[tuple[NeuronSet, tuple[int, int]]]:
    """Every pair of the single sets ``top`` (indices into ``sets``) as one set: the union
    of their neurons, named ``A + B``, with the indices it joins (the smaller first)."""
    names = {s.name for s in sets}
    out = []
    for a_at, a in enumerate(top):
        for b in top[a_at + 1:]:
            first, second = (a, b) if a < b else (b, a)
            one, two = sets[first], sets[second]
            name = f"{one.name} + {two.name}"
            if name in names:
                raise ScreenError(f"the pair {name!r} has the name of a set of the screen; "
                                  "rename that set")
            members = np.union1d(one.members, two.members)
            members.setflags(write=False)
            out.append((NeuronSet(name, f"({one.query}) | ({two.query})", members),
                        (first, second)))
    return out


#: The most sets whose pairs one screen runs (``--pairs``): their pairs are
#: ``N (N - 1) / 2`` runs, 4,950 at this bound.
MAX_PAIRS = 100


def check_pairs(pairs: Any, sets: int, neurons: int) -> int:
    """``--pairs N`` as an int: 0 (no pairs), or at least 2 and at most the screen's sets
    (and the brain's neurons, and :data:`MAX_PAIRS`). Raises :class:`ScreenError` in one line."""
    if isinstance(pairs, bool) or not isinstance(pairs, (int, np.integer)):
        raise ScreenError(f"--pairs must be a whole number, not {pairs!r}")
    pairs = int(pairs)
    if pairs == 0:
        return 0
    if pairs < 2:
        raise ScreenError(f"--pairs {pairs} must be 0 (no pairs) or at least 2 (the sets "
                          "whose pairs are run)")
    if pairs > MAX_PAIRS:
        # N sets make N (N - 1) / 2 pair runs and an N x N matrix: --pairs 49393 asked for
        # 1.2 billion runs, and started them.
        raise ScreenError(f"--pairs {pairs:,} would run {pairs * (pairs - 1) // 2:,} pairs; "
                          f"give at most {MAX_PAIRS} ({MAX_PAIRS * (MAX_PAIRS - 1) // 2:,} "
                          "pairs)")
    if pairs > neurons:
        raise ScreenError(f"--pairs {pairs} is more than the brain's {neurons:,} neurons")
    if pairs > sets:
        raise ScreenError(f"--pairs {pairs} is more than the screen's {sets:,} set(s); give "
                          f"at most {sets}")
    return pairs


class _Offset:
    """A progress sink seen from one batch of runs: ``update(done)`` of the batch is
    ``offset + done`` of the whole screen."""

    def __init__(self, inner: Any, offset: int) -> None:
        self.inner = inner
        self.offset = offset

    def update(self, done: int, force: bool = False) -> None:
        self.inner.update(self.offset + done, force=force)


def run_screen(brain: SpikingBrain, sets: Sequence[NeuronSet], settings: ScreenSettings, *,
               out: str | Path | None = None, spec: dict[str, Any] | None = None,
               workers: int | None = 0, scheduler: str | None = None,
               progress: Any = None, log: Callable[[str], None] | None = None,
               columns: np.ndarray | None = None, threads: int | None = None,
               pairs: int = 0, target: int | None = None) -> ScreenResult:
    """Run every set of a screen and its baseline (see the module notes).

    In a silencing screen a set none of whose neurons fires in the baseline is not run: it
    only cuts the outgoing synapses of neurons that never spike, and every run gets the
    baseline's Poisson input, so its run is the baseline's, bit for bit (its rates, trial
    counts and summary row are the baseline's; it is counted in :attr:`ScreenResult.pruned`
    and its row says ``answered: baseline``).

    Parameters
    ----------
    brain, sets, settings
        The screen.
    out
        The output folder (``None``: nothing written, the rates only returned). Sets
        already in it are not run again.
    spec
        How a worker loads the brain: ``{"brain": SPEC, "connectivity": ...,
        "coordinates": ..., "classification": ...}`` as :func:`flyviz.spiking.load_brain`
        takes them (needed on Dask; absolute paths, every worker must see them).
    workers, scheduler
        As for :func:`flyviz.analysis.cluster.run_each`: ``workers=0`` runs in this process
        (the default), ``None`` on a local cluster of the usable cores.
    progress
        ``update(done)`` after each run (a :class:`~flyviz.analysis.cluster.ProgressBar`
        whose ``total`` is set to the runs of the screen; or a cancellable one).
    log
        Told of notes (a damaged file computed again) and the workers being ready.
    columns
        The neurons whose rates (and trial counts) the result keeps (default every one).
    threads
        Trials side by side in this process (default one per core); a worker runs one.
    pairs
        ``N``: after the single sets, run every pair of the ``N`` sets with the largest
        effect (:meth:`ScreenResult.effects` on ``target``) as one set (:func:`pair_sets`).
    target
        The neuron whose rate the effects, p-values and the choice of pairs are about
        (``None``: the mean rate of every neuron); it is kept as a column.

    Raises
    ------
    ScreenError
        Bad settings, a mismatched folder, a worker with another brain (one line).
    Interrupted
        On Ctrl+C: the sets finished are kept in ``out`` (the same call continues).
    """
    settings = settings.validate()
    if not sets:
        raise ScreenError("a screen needs at least one set")
    names = [s.name for s in sets]
    if len(set(names)) != len(names):
        raise ScreenError("every set of a screen needs its own name")
    pairs = check_pairs(pairs, len(sets), brain.neurons)
    if columns is None:
        columns = np.arange(brain.neurons, dtype=np.int64)
    columns = np.asarray(columns, np.int64)
    if target is not None:
        if not 0 <= int(target) < brain.neurons:
            raise ScreenError(f"the target must be a neuron of {brain.name}")
        if not (columns == int(target)).any():
            columns = np.append(columns, int(target))
    if columns.size and (columns.min() < 0 or columns.max() >= brain.neurons):
        raise ScreenError(f"columns must be neurons of {brain.name}")
    cluster.check_where(workers, scheduler)
    local = workers == 0 and scheduler is None
    if not local and spec is None:
        raise ScreenError("a screen on Dask needs the brain's spec (how the workers load it)")
    started = time.perf_counter()
    base = base_stimulus(brain, settings)
    base.setflags(write=False)
    # The most neurons one run excites (the base, or the largest set; a pair two sets):
    # a run whose input cannot be held is refused before the folder is made.
    largest = sorted((s.size for s in sets), reverse=True)[:2 if pairs else 1]
    try:
        check_input_size(base.size if settings.mode == "silence" else sum(largest),
                         settings.rate, settings.duration_s, settings.trials)
    except InputError as exc:
        raise ScreenError(str(exc)) from None
    folder = ScreenFolder(out, screen_key(brain, settings, base)) if out is not None else None
    if folder is not None:
        folder.open()
    all_sets: list[NeuronSet] = list(sets)
    pair_of: list[tuple[int, int] | None] = [None] * len(sets)
    n_pairs = pairs * (pairs - 1) // 2
    total_runs = 1 + len(sets) + n_pairs
    trials = int(settings.trials)
    # Per set, kept as soon as the baseline is known (runs that finish before it wait), so
    # a screen of many sets on a large brain never holds every set's rates at once.
    kept: list[np.ndarray | None] = []
    counts_kept: list[np.ndarray | None] = []
    totals: list[np.ndarray | None] = []
    rows_of: dict[int, dict[str, Any]] = {}
    answered: dict[int, str] = {}
    held: dict[str, Any] = {"baseline": None, "done": 0, "computed": 0, "resumed": 0,
                            "pruned": 0, "workers": 1}
    waiting: dict[int, cluster.Partial] = {}

    def grow() -> None:
        while len(kept) < len(all_sets):
            kept.append(None)
            counts_kept.append(None)
            totals.append(None)

    def column_counts(run: cluster.Partial) -> np.ndarray:
        fired = np.asarray(run["fired"], np.int64)
        out_counts = np.zeros((trials, columns.size), np.int64)
        at = np.searchsorted(fired, columns)
        hit = (at < fired.size) & (fired[np.minimum(at, max(fired.size - 1, 0))] == columns) \
            if fired.size else np.zeros(columns.size, bool)
        out_counts[:, hit] = np.asarray(run["counts"], np.int64)[:, at[hit]]
        return out_counts

    def take(index: int, run: cluster.Partial) -> None:
        held["done"] += 1
        if index == 0:
            held["baseline"] = run
            for other in sorted(waiting):
                take_set(other, waiting.pop(other))
        elif held["baseline"] is None:
            waiting[index] = run
        else:
            take_set(index, run)

    def take_set(index: int, run: cluster.Partial) -> None:
        s = all_sets[index - 1]
        rates = np.asarray(run["rates"], np.float64)
        kept[index - 1] = rates[columns]
        counts_kept[index - 1] = column_counts(run)
        totals[index - 1] = np.asarray(run["counts"], np.int64).sum(axis=1)
        rows_of[index] = _summary_row(s.name, s.query, s.size, rates,
                                      held["baseline"]["rates"], brain.root_ids)

    of_item: dict[int, NeuronSet | None] = {0: None}

    def prunable(item: SetTask) -> bool:
        baseline = held["baseline"]
        return settings.mode == "silence" and item.members is not None and \
            baseline is not None and not (baseline["rates"][item.members] > 0).any()

    def deliver(item: SetTask, partial: cluster.Partial) -> None:
        run = {"rates": np.asarray(partial["rates"], np.float64),
               "fired": np.asarray(partial["fired"], np.int64),
               "counts": np.asarray(partial["counts"], np.int64).reshape(trials, -1)}
        if folder is not None:
            folder.save(item, of_item[item.index], brain, run)
        answered[item.index] = RUN
        take(item.index, run)

    function: Callable[..., cluster.Partial]
    args: tuple[Any, ...]
    if local:
        function, args = _InProcess(brain, settings, base, threads), ()
    else:
        function = screen_task
        args = (spec, brain_digest(brain), asdict(settings), base)
    if progress is not None and hasattr(progress, "total"):
        progress.total = max(1, total_runs)

    def run_items(batch: list[SetTask], here: bool = False) -> None:
        """Take each item from the folder or the baseline where it can be, run the rest
        (``here``: in this process, whatever the workers)."""
        pending = []
        for item in batch:
            found = folder.finished(item, of_item[item.index]) if folder is not None else None
            if found is not None:
                if found["rates"].shape != (brain.neurons,):
                    raise ScreenError(f"{folder.path_of(item) if folder else item.name} holds "
                                      f"{found['rates'].shape[0]} rates, not one per neuron "
                                      f"of {brain.name}")
                held["resumed"] += 1
                answered[item.index] = RUN
                take(item.index, found)
            elif prunable(item):
                held["pruned"] += 1
                answered[item.index] = FROM_BASELINE
                take(item.index, held["baseline"])
            else:
                pending.append(item)
        if folder is not None and log is not None:
            for note in folder.notes:
                log(f"note: {note}")
            folder.notes.clear()
        if progress is not None and hasattr(progress, "total"):
            # a set answered from the baseline is no run: the bar counts the runs
            progress.total = max(1, total_runs - held["pruned"])
        if not pending:
            return
        sink: Any = None if progress is None else \
            _Offset(progress, held["done"] - held["pruned"])
        held["computed"] += len(pending)
        if here:
            cluster.run_each(_InProcess(brain, settings, base, threads), (), pending, deliver,
                             workers=0, progress=sink, log=log)
            return
        held["workers"] = max(held["workers"], cluster.run_each(
            function, args, pending, deliver, workers=workers, scheduler=scheduler,
            progress=sink, log=log))

    def what_is_kept() -> str:
        what = f"the baseline and {len(sets)} sets" + (f" and {n_pairs} pairs" if pairs else "")
        if held["pruned"]:
            what += f"; {held['pruned']} answered from the baseline"
        return f"{held['done'] - held['pruned']} of {total_runs - held['pruned']} runs ({what})"

    singles = [SetTask(i + 1, s.name, s.members) for i, s in enumerate(sets)]
    of_item.update({i + 1: s for i, s in enumerate(sets)})
    grow()
    try:
        baseline_item = SetTask(0, BASELINE, None)
        if settings.mode == "silence":
            # the baseline first, here (one run is not worth starting a cluster for; its
            # rates are the same anywhere): it answers the sets it can
            run_items([baseline_item], here=True)
            run_items(singles)
        else:
            run_items([baseline_item] + singles)
        top: list[int] = []
        if pairs:
            partial = _result(brain, all_sets, settings, held, kept, counts_kept, totals,
                              columns, answered, pair_of, [])
            strength = np.abs(partial.effects(target)[0])
            top = [int(i) for i in np.argsort(-strength, kind="stable")[:pairs]]
            joined = pair_sets(sets, top)
            first = len(all_sets)
            for k, (pair_set, which) in enumerate(joined):
                all_sets.append(pair_set)
                pair_of.append(which)
                of_item[first + k + 1] = pair_set
            grow()
            run_items([SetTask(first + k + 1, ps.name, ps.members)
                       for k, (ps, _) in enumerate(joined)])
    except KeyboardInterrupt:
        if folder is None:
            raise cluster.Interrupted("interrupted; nothing of the screen is kept") from None
        raise cluster.Interrupted(
            f"interrupted: {what_is_kept()} are saved in {folder.folder}; run the same "
            "command again to continue") from None
    result = _result(brain, all_sets, settings, held, kept, counts_kept, totals, columns,
                     answered, pair_of, top)
    baseline_rates = held["baseline"]["rates"]
    effect, p_value, q_value = result.effects(target)
    rows = [{**_summary_row(BASELINE, "" if settings.excite is None else settings.excite,
                            int(base.size) if settings.mode == "silence" else 0,
                            baseline_rates, baseline_rates, brain.root_ids),
             "kind": BASELINE, "first": "", "second": "", "answered": RUN,
             "effect_hz": 0.0, "p_value": float("nan"), "q_value": float("nan")}]
    for i in range(len(all_sets)):
        pair = pair_of[i]
        rows.append({**rows_of[i + 1], "kind": SINGLE if pair is None else PAIR,
                     "first": "" if pair is None else all_sets[pair[0]].name,
                     "second": "" if pair is None else all_sets[pair[1]].name,
                     "answered": answered[i + 1], "effect_hz": float(effect[i]),
                     "p_value": float(p_value[i]), "q_value": float(q_value[i])})
    result.summary = rows
    if folder is not None:
        effect_on = "mean rate" if target is None else int(brain.root_ids[int(target)])
        outcome = {"sets": len(sets), "pairs": n_pairs, "pairs_of_top": pairs,
                   "runs": total_runs - held["pruned"],
                   "answered_from_baseline": held["pruned"], "effect_on": effect_on,
                   "q_families": "single sets; pairs" if pairs else "single sets"}
        write_table_file(folder.summary_path(), {c: [r[c] for r in rows] for c in SUMMARY_COLUMNS},
                         {**folder.key, **outcome}, "csv", csv_prefix=SUMMARY_PREFIX,
                         parquet_key=_PARQUET_KEY, what="screen")
        folder.write_outcome(outcome)
    result.seconds = time.perf_counter() - started
    result.folder = None if folder is None else folder.folder
    return result


def _result(brain: SpikingBrain, all_sets: list[NeuronSet], settings: ScreenSettings,
            held: dict[str, Any], kept: list[Any], counts_kept: list[Any], totals: list[Any],
            columns: np.ndarray, answered: dict[int, str],
            pair_of: list[tuple[int, int] | None], top: list[int]) -> ScreenResult:
    """The :class:`ScreenResult` of the runs taken so far (every set's, by now)."""
    baseline = held["baseline"]
    trials = int(settings.trials)
    base_counts = np.zeros((trials, columns.size), np.int64)
    fired = np.asarray(baseline["fired"], np.int64)
    lookup = {int(f): c for c, f in enumerate(fired.tolist())}
    for c, neuron in enumerate(columns.tolist()):
        if neuron in lookup:
            base_counts[:, c] = np.asarray(baseline["counts"])[:, lookup[neuron]]
    n = len(all_sets)
    return ScreenResult(
        list(all_sets), settings, np.asarray(baseline["rates"], np.float64),
        np.array(kept[:n]).reshape(n, columns.size), columns,
        trial_counts=np.array(counts_kept[:n]).reshape(n, trials, columns.size),
        baseline_counts=base_counts,
        trial_totals=np.array(totals[:n]).reshape(n, trials),
        baseline_totals=np.asarray(baseline["counts"], np.int64).sum(axis=1),
        answered=[answered[i + 1] for i in range(n)], pair_of=list(pair_of[:n]), top=top,
        computed=held["computed"], resumed=held["resumed"], pruned=held["pruned"],
        workers=held["workers"])
