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

With ``out`` the results go to a folder (:class:`ScreenFolder`)::

    OUT/screen.json       the settings and the brain's digest (what a rerun must match)
    OUT/baseline.csv      the baseline's rate of every neuron (root_id, rate_hz)
    OUT/sets/NAME-*.csv   per set, the rate of every neuron (mean Hz over the trials)
    OUT/summary.csv       one row per set: size, neurons fired, mean rate, neurons changed,
                          the largest change and its neuron

each a checksummed table (:mod:`flyviz.analysis.table_file`) written through a temporary
file, so a run stopped at any point (Ctrl+C) leaves only whole files. Running the same
screen into the same folder again skips the sets already there (and writes the same
summary, bit for bit); other settings in that folder are refused in one line.

Qt-free.
"""

from __future__ import annotations

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
from flyviz.spiking.run import check_rate, check_run_size, select, simulate

__all__ = ["BASELINE", "MODES", "NeuronSet", "ScreenError", "ScreenFolder", "ScreenResult",
           "ScreenSettings", "SetTask", "brain_digest", "each_neuron", "parse_sets",
           "read_set_rates", "read_sets_file", "read_summary", "resolve_sets", "run_screen",
           "screen_task"]

#: The two kinds of screen.
MODES = ("activate", "silence")
#: The summary's name for the baseline run.
BASELINE = "(baseline)"
#: The ``format`` of a screen folder's ``screen.json`` and summary.
FORMAT = "flyviz-screen"
FORMAT_VERSION = 1
SET_FORMAT = "flyviz-screen-set"
SUMMARY_PREFIX = "# flyviz-screen "
SET_PREFIX = "# flyviz-screen-set "
_PARQUET_KEY = b"flyviz_screen"
#: The summary's columns, in order.
SUMMARY_COLUMNS = ("set", "query", "neurons", "fired", "mean_rate_hz", "changed",
                   "largest_change_hz", "largest_change_root_id")


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


def _query_text(query: str) -> str:
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
            parse(_query_text(query))
        except SelectionError as exc:
            raise ScreenError(f"{where} ({name}): {exc}") from None
        seen[name] = number
        found.append((name, query))
    if not found:
        raise ScreenError(f"{source} holds no 'NAME: QUERY' line")
    return found


def read_sets_file(path: str | Path) -> list[tuple[str, str]]:
    """The sets of a sets file (see :func:`parse_sets`); one line when it cannot be read."""
    from flyviz.fileio import open_regular, os_error

    p = Path(path).expanduser()
    if not p.exists():
        raise ScreenError(f"sets file not found: {p}")
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
            members = select(brain, _query_text(query))
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
        members = select(brain, _query_text(query))
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


def base_stimulus(brain: SpikingBrain, settings: ScreenSettings) -> np.ndarray:
    """The neurons excited in every run of a silencing screen (none in an activation one)."""
    if settings.mode == "activate":
        return np.empty(0, np.int64)
    if settings.excite is not None and settings.excite.strip():
        try:
            excite = select(brain, _query_text(settings.excite))
        except InputError as exc:
            raise ScreenError(f"--excite: {exc}") from None
        if len(excite) == 0:
            raise ScreenError(f"--excite {settings.excite} selects no neuron of {brain.name}")
        return np.unique(np.asarray(excite, np.int64))
    if brain.default_excite is None:
        raise ScreenError("a silencing screen needs a stimulus: give --excite QUERY")
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
            members: np.ndarray | None, threads: int | None = None) -> np.ndarray:
    """``(n,)`` rate of every neuron (Hz, mean over the trials) of one run of the screen:
    ``members`` excited (activate) or silenced (silence); ``None``: the baseline."""
    if settings.mode == "activate":
        excite = np.empty(0, np.int64) if members is None else members
        silence = None
    else:
        excite, silence = base, members
    run = simulate(brain, excite=excite, silence=silence, duration_s=settings.duration_s,
                   trials=settings.trials, seed=settings.seed, params=settings.params(brain),
                   threads=threads)
    return np.asarray(run.rates(), np.float64)


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
        return {"rates": run_set(self.brain, self.settings, self.base, item.members,
                                 self.threads)}


_worker_brains: dict[str, SpikingBrain] = {}


def screen_task(spec: dict[str, Any], digest: str, settings: dict[str, Any], base: np.ndarray,
                item: SetTask) -> cluster.Partial:
    """One task on a Dask worker: the brain is loaded from ``spec`` (once per process) and
    must be the client's (``digest``)."""
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
    return {"rates": run_set(brain, ScreenSettings(**settings), base, item.members, threads=1)}


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
        from flyviz.fileio import check_name_lengths

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
            return
        parent = p.parent
        import os

        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise ScreenError(f"cannot write --out {p}: {parent} is not a writable folder")

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
            if held != self.key:
                changed = _differences(held, self.key)
                raise ScreenError(f"{self.folder} holds a screen with another "
                                  f"{', '.join(changed)}; run with the same options to "
                                  "continue it, or give another --out")
            return
        try:
            (self.folder / "sets").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise os_error(exc, self.folder, "write") from None
        write_text_atomically(self.manifest, json.dumps(self.key, indent=1, sort_keys=True)
                              + "\n")

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

    def finished(self, item: SetTask, neuron_set: NeuronSet | None) -> np.ndarray | None:
        """The stored rates of ``item``, or ``None`` when it is not done (or its file is
        damaged: noted, and computed again).

        Raises
        ------
        ScreenError
            When the file holds the set of that name under another query or neurons.
        """
        path = self.path_of(item)
        if not path.is_file():
            return None
        try:
            info, rates = read_set_rates(path)
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
        return rates

    def save(self, item: SetTask, neuron_set: NeuronSet | None, brain: SpikingBrain,
             rates: np.ndarray) -> None:
        """Write ``item``'s rates (through a temporary file)."""
        write_table_file(self.path_of(item),
                         {"root_id": np.asarray(brain.root_ids, np.int64),
                          "rate_hz": np.asarray(rates, np.float64)},
                         self._info(item, neuron_set), "csv", csv_prefix=SET_PREFIX,
                         parquet_key=_PARQUET_KEY, what="screen set")

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


def read_set_rates(path: str | Path) -> tuple[dict[str, Any], np.ndarray]:
    """The metadata and the rates (``(n,)`` Hz, in model order) of one set's file."""
    p = Path(path)

    def error(text: str) -> ScreenError:
        return ScreenError(text)

    def damaged(why: str) -> ScreenError:
        return ScreenError(f"{p.name} is damaged ({why})")

    info, rows = read_table_file(p, "csv", csv_prefix=SET_PREFIX, parquet_key=_PARQUET_KEY,
                                 what="flyviz screen set", error=error, damaged=damaged)
    if not isinstance(info, dict) or info.get("format") != SET_FORMAT:
        raise error(f"{p.name} is not a flyviz screen set")
    try:
        rates = np.array([float(r["rate_hz"]) for r in rows], np.float64)
    except (KeyError, TypeError, ValueError):
        raise damaged("no rate_hz column") from None
    return info, rates


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


# ---------------------------------------------------------------- a screen
@dataclass
class ScreenResult:
    """What :func:`run_screen` returns.

    Attributes
    ----------
    sets, settings
        The screen.
    baseline
        ``(n,)`` rates of the baseline run, Hz.
    rates
        ``(sets, len(columns))`` rates of the neurons ``columns`` in each set's run, Hz.
    columns
        The neurons whose rates are kept (all by default).
    computed, resumed, workers, seconds
        Sets run now, sets found finished in the folder, workers used, wall time.
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
    computed: int = 0
    resumed: int = 0
    workers: int = 1
    seconds: float = 0.0
    folder: Path | None = None
    summary: list[dict[str, Any]] = field(default_factory=list)

    def _column(self, neuron: int) -> int:
        at = np.flatnonzero(self.columns == int(neuron))
        if at.size == 0:
            raise ScreenError(f"neuron {neuron} is not among the neurons this screen kept")
        return int(at[0])

    def rate_of(self, neuron: int) -> np.ndarray:
        """``(sets,)`` rate of ``neuron`` in each set's run, Hz."""
        return self.rates[:, self._column(neuron)]

    def change_of(self, neuron: int) -> np.ndarray:
        """``(sets,)`` change of ``neuron``'s rate from the baseline in each set's run, Hz."""
        return self.rate_of(neuron) - self.baseline[int(neuron)]

    def neuron_values(self, target: int) -> np.ndarray:
        """``(n,)`` per neuron: the change of ``target``'s rate when that neuron's set was
        run (a neuron in several sets: the largest change in size, the first of equal ones);
        NaN for a neuron in no set. What the app's screen layer colours by."""
        change = self.change_of(target)
        values = np.full(self.baseline.shape[0], np.nan)
        size = np.full(self.baseline.shape[0], -1.0)
        for s, value in zip(self.sets, change.tolist()):
            members = s.members
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


def run_screen(brain: SpikingBrain, sets: Sequence[NeuronSet], settings: ScreenSettings, *,
               out: str | Path | None = None, spec: dict[str, Any] | None = None,
               workers: int | None = 0, scheduler: str | None = None,
               progress: Any = None, log: Callable[[str], None] | None = None,
               columns: np.ndarray | None = None, threads: int | None = None
               ) -> ScreenResult:
    """Run every set of a screen and its baseline (see the module notes).

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
        over ``len(sets) + 1`` runs, less those already done; or a cancellable one).
    log
        Told of notes (a damaged file computed again) and the workers being ready.
    columns
        The neurons whose rates the result keeps (default every one).
    threads
        Trials side by side in this process (default one per core); a worker runs one.

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
    if columns is None:
        columns = np.arange(brain.neurons, dtype=np.int64)
    columns = np.asarray(columns, np.int64)
    if columns.size and (columns.min() < 0 or columns.max() >= brain.neurons):
        raise ScreenError(f"columns must be neurons of {brain.name}")
    cluster.check_workers(workers)
    local = workers == 0 and scheduler is None
    if not local and spec is None:
        raise ScreenError("a screen on Dask needs the brain's spec (how the workers load it)")
    started = time.perf_counter()
    base = base_stimulus(brain, settings)
    base.setflags(write=False)
    folder = ScreenFolder(out, screen_key(brain, settings, base)) if out is not None else None
    if folder is not None:
        folder.open()
    items = [SetTask(0, BASELINE, None)] + [SetTask(i + 1, s.name, s.members)
                                              for i, s in enumerate(sets)]
    of_item: dict[int, NeuronSet | None] = {0: None, **{i + 1: s for i, s in enumerate(sets)}}
    kept = np.zeros((len(sets), columns.size))
    # Each run's rates become its summary row and its kept columns as soon as the baseline
    # is known (runs that finish before it wait), so a screen of many sets on a large brain
    # never holds every set's rates at once.
    held: dict[str, Any] = {"baseline": None, "done": 0}
    rows_of: dict[int, dict[str, Any]] = {}
    waiting: dict[int, np.ndarray] = {}

    def take(index: int, rates: np.ndarray) -> None:
        held["done"] += 1
        if index == 0:
            held["baseline"] = rates
            for other in sorted(waiting):
                take_set(other, waiting.pop(other))
        elif held["baseline"] is None:
            waiting[index] = rates
        else:
            take_set(index, rates)

    def take_set(index: int, rates: np.ndarray) -> None:
        s = sets[index - 1]
        kept[index - 1] = rates[columns]
        rows_of[index] = _summary_row(s.name, s.query, s.size, rates, held["baseline"],
                                      brain.root_ids)

    pending = []
    for item in items:
        found = folder.finished(item, of_item[item.index]) if folder is not None else None
        if found is None:
            pending.append(item)
            continue
        if found.shape != (brain.neurons,):
            raise ScreenError(f"{folder.path_of(item) if folder else item.name} holds "
                              f"{found.shape[0]} rates, not one per neuron of {brain.name}")
        take(item.index, found)
    if folder is not None and log is not None:
        for note in folder.notes:
            log(f"note: {note}")

    def deliver(item: SetTask, partial: cluster.Partial) -> None:
        rates = np.asarray(partial["rates"], np.float64)
        if folder is not None:
            folder.save(item, of_item[item.index], brain, rates)
        take(item.index, rates)

    if progress is not None and hasattr(progress, "total"):
        progress.total = max(1, len(pending))
    function: Callable[..., cluster.Partial]
    args: tuple[Any, ...]
    if local:
        function, args = _InProcess(brain, settings, base, threads), ()
    else:
        function = screen_task
        args = (spec, brain_digest(brain), asdict(settings), base)
    try:
        used = cluster.run_each(function, args, pending, deliver, workers=workers,
                                scheduler=scheduler, progress=progress, log=log)
    except KeyboardInterrupt:
        if folder is None:
            raise cluster.Interrupted("interrupted; nothing of the screen is kept") from None
        raise cluster.Interrupted(
            f"interrupted: {held['done']} of {len(items)} runs (the baseline and {len(sets)} "
            f"sets) are saved in {folder.folder}; run the same command again to continue"
        ) from None
    baseline = held["baseline"]
    rows = [_summary_row(BASELINE, "" if settings.excite is None else settings.excite,
                         int(base.size) if settings.mode == "silence" else 0, baseline,
                         baseline, brain.root_ids)]
    rows += [rows_of[i + 1] for i in range(len(sets))]
    if folder is not None:
        write_table_file(folder.summary_path(), {c: [r[c] for r in rows] for c in SUMMARY_COLUMNS},
                         {**folder.key, "sets": len(sets)}, "csv", csv_prefix=SUMMARY_PREFIX,
                         parquet_key=_PARQUET_KEY, what="screen")
    return ScreenResult(list(sets), settings, baseline, kept, columns,
                        computed=len(pending), resumed=len(items) - len(pending), workers=used,
                        seconds=time.perf_counter() - started,
                        folder=None if folder is None else folder.folder, summary=rows)
