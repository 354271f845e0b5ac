"""Checks of the spiking brain with controls: a battery of experiments, each against
degree-preserving shuffles of the brain and class-matched random stimulus sets.

A *battery* is a text file, one check a line (``#`` comments and blank lines skipped)::

    NAME: excite QUERY ; read QUERY ; expect increase
    NAME: excite QUERY ; silence QUERY ; read QUERY ; expect decrease
    NAME: excite QUERY ; read QUERY ; expect above 20

``excite`` is the stimulus (Poisson input at ``rate``), ``silence`` (optional) the neurons
whose outgoing synapses are zeroed, ``read`` the neurons whose mean rate is read out, and
``expect`` one of ``increase``, ``decrease``, ``above HZ``, ``below HZ``. Queries are the
selection language of ``flyviz select`` (``type:``, ``superclass:``, ``side:``, ``id:``,
``body:ROOT,...``; bare numbers are root ids), as ``flyviz screen`` takes them.

The *statistic* of a check is, in Hz: without ``silence``, the read neurons' mean rate
under the stimulus (the model is silent without input, so this is its change from rest);
with ``silence``, the change of that rate when the silenced set is silenced. It *holds*
when it lies on the expected side (``> 0``, ``< 0``, ``> HZ``, ``< HZ``).

Its controls, all with the same Poisson input (common random numbers, as a screen's runs):

* ``shuffles`` degree-preserving shuffles of the brain
  (:func:`flyviz.analysis.nulls.degree_rewire`: every neuron keeps its in- and out-degree
  and each synapse its presynaptic neuron and signed count, so Dale's law), the same
  check run on each;
* ``random_sets`` class-matched random stimulus sets: the stimulus (or, with ``silence``,
  the silenced set) replaced by as many neurons of each class (``superclass``, or
  ``cell_type`` with ``match``) as it has, drawn from outside the set and the read neurons
  (and, for a silenced set, outside the stimulus).

Each gives a permutation p-value ``(1 + #controls at least as extreme) / (1 + n)`` in the
expected direction; a check's p is the larger of the two (it must beat both), and Holm's
correction runs over the battery. A check *passes* when it holds and its Holm-adjusted p is
at most ``alpha``. Everything is seeded: the same seed gives the same table, bit for bit.

Qt-free.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.errors import InputError
from flyviz.spiking.brain import SpikingBrain

__all__ = ["Check", "CheckError", "check_queries", "CheckResult", "CheckSettings", "EXPECTATIONS",
           "TABLE_COLUMNS", "holm", "parse_battery", "read_battery", "run_battery",
           "shuffled_brain", "write_figure", "write_table"]

#: What a check may expect.
EXPECTATIONS = ("increase", "decrease", "above", "below")
#: The labels random stimulus sets are matched on.
MATCHES = ("superclass", "cell_type", "none")
#: The table's columns, in order.
TABLE_COLUMNS = ("check", "statistic_hz", "expect", "holds", "shuffles_mean_hz",
                 "shuffles_sd_hz", "p_shuffles", "random_sets_mean_hz", "random_sets_sd_hz",
                 "p_random_sets", "p", "p_holm", "verdict")


class CheckError(InputError):
    """A battery or a check's settings are wrong (one line)."""


# ---------------------------------------------------------------- the battery
@dataclass(frozen=True)
class Check:
    """One line of a battery (see the module notes)."""

    name: str
    excite: str
    read: str
    expect: str
    threshold: float | None = None
    silence: str | None = None
    line: int = 0

    @property
    def expected(self) -> str:
        """The expectation as written (``increase``, ``above 20``)."""
        return self.expect if self.threshold is None else f"{self.expect} {self.threshold:g}"

    @property
    def higher_is_more(self) -> bool:
        """Whether a higher statistic is the more extreme one."""
        return self.expect in ("increase", "above")

    def holds(self, value: float) -> bool:
        """Whether ``value`` lies on the expected side."""
        bound = 0.0 if self.threshold is None else self.threshold
        return value > bound if self.higher_is_more else value < bound


_FIELDS = ("excite", "silence", "read", "expect")
#: ``NAME: FIELD ...``: the name ends at the first colon that a field follows.
_LINE = re.compile(r"([^:]+?)\s*:\s*((?:excite|silence|read|expect)\b.*)", re.IGNORECASE)


def parse_battery(text: str, source: str = "the battery") -> list[Check]:
    """The checks of a battery's text; :class:`CheckError` naming the line that is wrong."""
    from flyviz.model.selection import parse
    from flyviz.spiking.screen import query_text

    checks: list[Check] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}, line {number}"
        match = _LINE.fullmatch(line)
        name, rest = (match.group(1).strip(), match.group(2)) if match else ("", "")
        if not name:
            raise CheckError(f"{where}: expected 'NAME: excite QUERY ; read QUERY ; expect "
                             f"increase', not {line[:60]!r}")
        if name in seen:
            raise CheckError(f"{where}: the check name {name!r} is used on line {seen[name]} "
                             "too; give each check its own name")
        fields: dict[str, str] = {}
        for part in rest.split(";"):
            part = part.strip()
            if not part:
                continue
            key, _, value = part.partition(" ")
            key, value = key.strip().lower(), value.strip()
            if key not in _FIELDS:
                raise CheckError(f"{where} ({name}): unknown field {key!r}; a check has "
                                 "excite, silence (optional), read and expect, separated by ';'")
            if key in fields:
                raise CheckError(f"{where} ({name}): {key} is given twice")
            if not value:
                raise CheckError(f"{where} ({name}): {key} has no value")
            fields[key] = value
        for key in ("excite", "read", "expect"):
            if key not in fields:
                raise CheckError(f"{where} ({name}): no '{key} ...' field")
        for key in ("excite", "silence", "read"):
            if key in fields:
                try:
                    parse(query_text(fields[key]))
                except InputError as exc:
                    raise CheckError(f"{where} ({name}), {key}: {exc}") from None
        words = fields["expect"].split()
        kind = words[0].lower()
        threshold: float | None = None
        if kind not in EXPECTATIONS or (kind in ("increase", "decrease")) != (len(words) == 1) \
                or len(words) > 2:
            raise CheckError(f"{where} ({name}): expect {fields['expect']!r} is not one of "
                             "'increase', 'decrease', 'above HZ', 'below HZ'")
        if len(words) == 2:
            try:
                threshold = float(words[1])
            except ValueError:
                threshold = math.nan
            if not math.isfinite(threshold):
                raise CheckError(f"{where} ({name}): expect {kind} needs a number of Hz, not "
                                 f"{words[1]!r}")
        seen[name] = number
        checks.append(Check(name, fields["excite"], fields["read"], kind, threshold,
                            fields.get("silence"), number))
    if not checks:
        raise CheckError(f"{source} holds no check ('NAME: excite QUERY ; read QUERY ; "
                         "expect increase')")
    return checks


def read_battery(path: str | Path) -> list[Check]:
    """The checks of a battery file (see :func:`parse_battery`); one line when it cannot be
    read."""
    from flyviz.fileio import open_regular, os_error, shipped_example_hint

    p = Path(path).expanduser()
    if not p.exists():
        raise CheckError(f"battery file not found: {p}{shipped_example_hint(p)}")
    try:
        with open_regular(p, "rb", "battery file") as handle:
            text = handle.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckError(f"the battery {p} is not UTF-8 text (undecodable byte at offset "
                         f"{exc.start})") from None
    except OSError as exc:
        raise os_error(exc, p, "read") from None
    return parse_battery(text, p.name)


# ---------------------------------------------------------------- settings
@dataclass(frozen=True)
class CheckSettings:
    """How a battery runs.

    Attributes
    ----------
    shuffles, random_sets
        Degree-preserving shuffles of the brain and class-matched random stimulus sets per
        check (99 each resolve p down to 0.01).
    rate, trials, duration_s, seed, w_syn
        As a screen's (:class:`~flyviz.spiking.screen.ScreenSettings`).
    match
        The label random sets are matched on: ``superclass``, ``cell_type`` or ``none``.
    alpha
        A check passes at a Holm-adjusted p of at most this.
    """

    shuffles: int = 99
    random_sets: int = 99
    rate: float = 150.0
    trials: int = 1
    duration_s: float = 0.25
    seed: int = 0
    w_syn: float | None = None
    match: str = "superclass"
    alpha: float = 0.05

    def screen(self, mode: str) -> Any:
        """The :class:`~flyviz.spiking.screen.ScreenSettings` of one run."""
        from flyviz.spiking.screen import ScreenSettings

        return ScreenSettings(mode=mode, rate=self.rate, trials=self.trials,
                              duration_s=self.duration_s, seed=self.seed, w_syn=self.w_syn)

    def validate(self) -> "CheckSettings":
        """Raise :class:`CheckError` for a value out of range; return ``self``."""
        from flyviz.arguments import whole_number

        try:
            whole_number("--shuffles", self.shuffles, 0, 100_000)
            whole_number("--random-sets", self.random_sets, 0, 100_000)
            self.screen("activate").validate()
        except InputError as exc:
            raise CheckError(str(exc)) from None
        if self.shuffles + self.random_sets == 0:
            raise CheckError("a check needs controls: give --shuffles or --random-sets above 0")
        if self.match not in MATCHES:
            raise CheckError(f"--match {self.match!r} must be one of {', '.join(MATCHES)}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) \
                or not 0 < self.alpha < 1:
            raise CheckError(f"--alpha {self.alpha!r} must be a number between 0 and 1")
        return self


# ---------------------------------------------------------------- the controls
def shuffled_brain(brain: SpikingBrain, seed: int) -> SpikingBrain:
    """A degree-preserving shuffle of ``brain``: every neuron keeps its in- and out-degree,
    each synapse its presynaptic neuron and signed count (so each neuron's outgoing signs);
    the targets are rewired (:func:`flyviz.analysis.nulls.degree_rewire`)."""
    from flyviz.analysis.nulls import degree_rewire

    n = brain.neurons
    indptr = np.asarray(brain.indptr, np.int64)
    source = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5EED]))
    target, _ = degree_rewire(n, source, np.asarray(brain.post, np.int64), rng)
    return replace(brain, name=f"{brain.name} (degree shuffle {seed})",
                   post=target.astype(np.asarray(brain.post).dtype), _id_order=None,
                   _grouped=None)


def _labels(brain: SpikingBrain, match: str) -> np.ndarray | None:
    values = None if match == "none" else getattr(brain, match)
    if values is None:
        return None
    return np.asarray(values, dtype=object).astype(str)


def random_set(members: np.ndarray, labels: np.ndarray | None, exclude: np.ndarray,
               n: int, rng: np.random.Generator) -> np.ndarray:
    """As many neurons of each label as ``members`` has, drawn without replacement from the
    neurons outside ``exclude`` (from all of that label where too few are left)."""
    outside = np.ones(n, bool)
    outside[exclude] = False
    if labels is None:
        pool = np.flatnonzero(outside)
        if pool.size < members.size:
            pool = np.arange(n)
        return np.sort(rng.choice(pool, members.size, replace=False))
    chosen = []
    names, counts = np.unique(labels[members], return_counts=True)
    for name, count in zip(names.tolist(), counts.tolist()):
        same = labels == name
        pool = np.flatnonzero(same & outside)
        if pool.size < count:
            pool = np.flatnonzero(same)
        chosen.append(rng.choice(pool, count, replace=False))
    return np.sort(np.concatenate(chosen)).astype(np.int64)


# ---------------------------------------------------------------- running
@dataclass(frozen=True)
class _Resolved:
    check: Check
    excite: np.ndarray
    silence: np.ndarray | None
    read: np.ndarray


def _resolve(brain: SpikingBrain, check: Check) -> _Resolved:
    from flyviz.spiking.run import select
    from flyviz.spiking.screen import query_text

    found: dict[str, np.ndarray | None] = {}
    for key in ("excite", "silence", "read"):
        query = getattr(check, key)
        if query is None:
            found[key] = None
            continue
        try:
            members = np.unique(np.asarray(select(brain, query_text(query)), np.int64))
        except InputError as exc:
            raise CheckError(f"check {check.name!r}, {key}: {exc}") from None
        if members.size == 0:
            raise CheckError(f"check {check.name!r}: {key} {query} selects no neuron of "
                             f"{brain.name}")
        found[key] = members
    excite, read = found["excite"], found["read"]
    assert excite is not None and read is not None  # parse_battery requires both
    return _Resolved(check, excite, found["silence"], read)


def check_queries(brain: SpikingBrain, checks: Sequence[Check]) -> None:
    """Raise :class:`CheckError` (naming the check) for a query that fails or selects nothing
    on ``brain``: what :func:`run_battery` refuses before any run."""
    for c in checks:
        _resolve(brain, c)


def _statistic(brain: SpikingBrain, settings: CheckSettings, excite: np.ndarray,
               silence: np.ndarray | None, read: np.ndarray,
               reference: float | None = None) -> tuple[float, float]:
    """``(statistic, reference)``: the read neurons' mean rate under ``excite`` (minus the
    rate with nothing silenced, ``reference``, computed when not given, where ``silence``
    is given)."""
    from flyviz.spiking.screen import run_set

    if silence is None:
        rates = run_set(brain, settings.screen("activate"), np.empty(0, np.int64), excite,
                        threads=1)["rates"]
        return float(np.mean(rates[read])), 0.0
    screen = settings.screen("silence")
    if reference is None:
        rates = run_set(brain, screen, excite, None, threads=1)["rates"]
        reference = float(np.mean(rates[read]))
    rates = run_set(brain, screen, excite, silence, threads=1)["rates"]
    return float(np.mean(rates[read])) - reference, reference


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of ``p_values`` (the family-wise error over them)."""
    p = np.asarray(p_values, np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(p[i])))
        adjusted[i] = running
    return adjusted.tolist()


@dataclass
class CheckResult:
    """One check of a battery, run with its controls."""

    check: Check
    statistic: float
    shuffles: list[float]
    random_sets: list[float]
    p_shuffles: float | None
    p_random_sets: float | None
    p: float
    p_holm: float = math.nan
    alpha: float = 0.05

    @property
    def holds(self) -> bool:
        """The statistic lies on the expected side."""
        return self.check.holds(self.statistic)

    @property
    def verdict(self) -> str:
        """``pass``, ``fail`` (the wrong side) or ``not significant``."""
        if not self.holds:
            return "fail"
        return "pass" if self.p_holm <= self.alpha else "not significant"

    def row(self) -> dict[str, Any]:
        """The table's row (:data:`TABLE_COLUMNS`)."""
        def spread(values: list[float]) -> tuple[float | None, float | None]:
            if not values:
                return None, None
            sd = float(np.std(values, ddof=1)) if len(values) > 1 else None
            return float(np.mean(values)), sd

        sm, ss = spread(self.shuffles)
        rm, rs = spread(self.random_sets)
        return {"check": self.check.name, "statistic_hz": self.statistic,
                "expect": self.check.expected, "holds": self.holds,
                "shuffles_mean_hz": sm, "shuffles_sd_hz": ss, "p_shuffles": self.p_shuffles,
                "random_sets_mean_hz": rm, "random_sets_sd_hz": rs,
                "p_random_sets": self.p_random_sets, "p": self.p, "p_holm": self.p_holm,
                "verdict": self.verdict}


@dataclass
class BatteryResult:
    """What :func:`run_battery` returns."""

    results: list[CheckResult]
    settings: CheckSettings
    brain: str
    runs: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        """The table, one row per check."""
        return [r.row() for r in self.results]

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values."""
        return {"brain": self.brain, "settings": asdict(self.settings), "runs": self.runs,
                "seconds": self.seconds,
                "checks": [{**r.row(), "shuffles": r.shuffles, "random_sets": r.random_sets}
                           for r in self.results]}


def _p_value(real: float, controls: list[float], higher_is_more: bool) -> float | None:
    if not controls:
        return None
    from flyviz.analysis.nulls import compare_to_nulls

    return compare_to_nulls(real, controls, higher_is_more=higher_is_more).p


@dataclass(eq=False)
class _Task:
    """One task of a battery: the brain itself (``kind`` ``"brain"``), one shuffle (its
    ``number``) or one check's random sets (its ``number``); ``runs`` simulations."""

    index: int
    kind: str
    number: int
    runs: int

    @property
    def n_tokens(self) -> int:
        """Its share of the progress: its runs."""
        return self.runs


def _task_values(brain: SpikingBrain, checks: Sequence[Check], settings: CheckSettings,
                 task: _Task) -> dict[str, np.ndarray]:
    """What one task measures: ``{"values": ...}`` (the brain's or a shuffle's statistic per
    check; one check's statistic per random set)."""
    from flyviz.analysis.cluster import report_progress

    resolved = [_resolve(brain, c) for c in checks]
    if task.kind == "brain" or task.kind == "shuffle":
        target = brain if task.kind == "brain" else \
            shuffled_brain(brain, settings.seed * 1_000_003 + task.number)
        values = []
        for r in resolved:
            values.append(_statistic(target, settings, r.excite, r.silence, r.read)[0])
            report_progress(2 if r.silence is not None else 1)
        return {"values": np.array(values, np.float64)}
    i = task.number
    r = resolved[i]
    replaced = r.excite if r.silence is None else r.silence
    # A random silenced set never holds the stimulus itself (silencing it would stop the
    # drive, not test the set's place), nor the read neurons.
    exclude = np.union1d(replaced, r.read) if r.silence is None else \
        np.union1d(np.union1d(replaced, r.read), r.excite)
    rng = np.random.default_rng(np.random.SeedSequence([settings.seed, 0xC1A55, i]))
    labels = _labels(brain, settings.match)
    reference = None
    values = []
    for _ in range(settings.random_sets):
        drawn = random_set(replaced, labels, exclude, brain.neurons, rng)
        if r.silence is None:
            value = _statistic(brain, settings, drawn, None, r.read)[0]
        else:
            value, reference = _statistic(brain, settings, r.excite, drawn, r.read,
                                          reference=reference)
        values.append(value)
        report_progress(1)
    return {"values": np.array(values, np.float64)}


def check_task(spec: dict[str, Any], digest: str, settings: dict[str, Any],
               checks: list[dict[str, Any]], task: _Task) -> dict[str, np.ndarray]:
    """One task on a Dask worker: the brain is loaded from ``spec`` once per process
    (:func:`flyviz.spiking.screen.worker_brain`) and must be the client's (``digest``)."""
    from flyviz.spiking.screen import worker_brain

    return _task_values(worker_brain(spec, digest), [Check(**c) for c in checks],
                        CheckSettings(**settings), task)


def run_battery(brain: SpikingBrain, checks: Sequence[Check], settings: CheckSettings, *,
                spec: dict[str, Any] | None = None, workers: int | None = 0,
                scheduler: str | None = None, progress: Any = None,
                log: Callable[[str], None] | None = None) -> BatteryResult:
    """Run every check on ``brain``, on the shuffles and with the random sets.

    Parameters
    ----------
    brain
        The spiking brain.
    checks
        The battery (:func:`read_battery`).
    settings
        How it runs.
    spec
        How a Dask worker loads the brain (as :func:`flyviz.spiking.screen.run_screen`
        takes it; needed unless ``workers=0`` and no scheduler).
    workers, scheduler
        As for :func:`flyviz.analysis.cluster.run_each`: ``workers=0`` (the default) runs
        in this process. The table is the same wherever the tasks run.
    progress
        ``update(done)`` over the simulations (a
        :class:`~flyviz.analysis.cluster.ProgressBar`; its ``total`` is set here).
    log
        Told when the workers are ready.

    Raises
    ------
    CheckError
        A query that fails or selects nothing on ``brain`` (naming the check), bad settings.
    """
    from flyviz.analysis import cluster

    settings = settings.validate()
    checks = list(checks)
    started = time.perf_counter()
    resolved = [_resolve(brain, c) for c in checks]  # every query checked before any run
    per_brain = sum(2 if r.silence is not None else 1 for r in resolved)
    tasks = [_Task(0, "brain", 0, per_brain)]
    tasks += [_Task(1 + s, "shuffle", s, per_brain) for s in range(settings.shuffles)]
    if settings.random_sets:
        tasks += [_Task(1 + settings.shuffles + i, "random", i,
                        settings.random_sets + (1 if r.silence is not None else 0))
                  for i, r in enumerate(resolved)]
    if progress is not None and hasattr(progress, "total"):
        progress.total = max(1, sum(t.runs for t in tasks))
    found: dict[int, np.ndarray] = {}

    def deliver(task: _Task, partial: dict[str, np.ndarray]) -> None:
        found[task.index] = np.asarray(partial["values"], np.float64)

    cluster.check_where(workers, scheduler)
    if workers == 0 and scheduler is None:
        def function(task: _Task) -> dict[str, np.ndarray]:
            return _task_values(brain, checks, settings, task)
        cluster.run_each(function, (), tasks, deliver, workers=0, progress=progress, log=log)
    else:
        if spec is None:
            raise CheckError("a battery on Dask needs the brain's spec (how the workers load "
                             "it)")
        from flyviz.spiking.screen import brain_digest

        cluster.run_each(check_task, (spec, brain_digest(brain), asdict(settings),
                                      [asdict(c) for c in checks]),
                         tasks, deliver, workers=workers, scheduler=scheduler,
                         progress=progress, log=log)
    real = found[0]
    results = []
    for i, r in enumerate(resolved):
        higher = r.check.higher_is_more
        shuffles = [float(found[1 + s][i]) for s in range(settings.shuffles)]
        randomised = [float(v) for v in found[1 + settings.shuffles + i]] \
            if settings.random_sets else []
        p_shuffles = _p_value(float(real[i]), shuffles, higher)
        p_random = _p_value(float(real[i]), randomised, higher)
        p = max(v for v in (p_shuffles, p_random) if v is not None)
        results.append(CheckResult(r.check, float(real[i]), shuffles, randomised, p_shuffles,
                                   p_random, p, alpha=settings.alpha))
    for result, adjusted in zip(results, holm([r.p for r in results])):
        result.p_holm = adjusted
    return BatteryResult(results, settings, brain.name, runs=sum(t.runs for t in tasks),
                         seconds=time.perf_counter() - started)


# ---------------------------------------------------------------- output
def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def table_text(result: BatteryResult) -> str:
    """The table as CSV text (a ``#`` line with the settings first)."""
    buffer = io.StringIO()
    buffer.write("# flyviz-check " + json.dumps({"brain": result.brain,
                                                  "settings": asdict(result.settings)},
                                                 sort_keys=True) + "\n")
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(TABLE_COLUMNS)
    for row in result.rows():
        writer.writerow([_cell(row[c]) for c in TABLE_COLUMNS])
    return buffer.getvalue()


def write_table(result: BatteryResult, path: str | Path) -> Path:
    """Write :func:`table_text` to ``path`` (through a temporary file)."""
    from flyviz.fileio import write_text_atomically

    write_text_atomically(path, table_text(result))
    return Path(path)


def printed_table(result: BatteryResult) -> str:
    """The table for a terminal."""
    rows = result.rows()
    width = max(len("check"), *(len(r["check"]) for r in rows))
    lines = [f"{'check':<{width}}  {'statistic':>10}  {'expect':<12} {'shuffles':>16} "
             f"{'p':>6}  {'random sets':>16} {'p':>6}  {'p_holm':>7}  verdict"]

    def spread(mean: float | None, sd: float | None) -> str:
        if mean is None:
            return "-"
        return f"{mean:.2f} ± {sd:.2f}" if sd is not None else f"{mean:.2f}"

    def pv(value: float | None) -> str:
        return "-" if value is None else f"{value:.3g}"

    for r in rows:
        lines.append(f"{r['check']:<{width}}  {r['statistic_hz']:>8.2f} Hz  {r['expect']:<12} "
                     f"{spread(r['shuffles_mean_hz'], r['shuffles_sd_hz']):>16} "
                     f"{pv(r['p_shuffles']):>6}  "
                     f"{spread(r['random_sets_mean_hz'], r['random_sets_sd_hz']):>16} "
                     f"{pv(r['p_random_sets']):>6}  {r['p_holm']:>7.3g}  {r['verdict']}")
    s = result.settings
    lines.append(f"\n{len(rows)} check(s) on {result.brain}: {s.shuffles} degree-preserving "
                 f"shuffle(s), {s.random_sets} random set(s) matched on {s.match} each; "
                 f"{result.runs} runs of {s.duration_s:g} s x {s.trials} trial(s), seed "
                 f"{s.seed}, {result.seconds:.1f} s. Holm over the battery, alpha {s.alpha:g}.")
    return "\n".join(lines)


def write_figure(result: BatteryResult, path: str | Path) -> Path:
    """One row per check: the statistic on the brain (a diamond) beside its controls (the
    shuffles and the random sets as dots), the expected side shaded, the verdict named."""
    import os

    from flyviz.extras import require
    from flyviz.figures import check_output

    out = check_output(path)
    require("figures", "flyviz check --figure")
    from matplotlib.figure import Figure

    rows = len(result.results)
    figure = Figure(figsize=(8, 1.0 + 0.6 * rows), dpi=120, layout="constrained")
    axes = figure.add_subplot(1, 1, 1)
    rng = np.random.default_rng(0)  # the dots' vertical jitter only
    for y, r in enumerate(result.results):
        for values, offset, colour, label in ((r.shuffles, -0.15, "#7f7f7f", "shuffles"),
                                               (r.random_sets, 0.15, "#1f77b4", "random sets")):
            if values:
                axes.scatter(values, y + offset + rng.uniform(-0.06, 0.06, len(values)), s=8,
                             color=colour, alpha=0.6, label=label if y == 0 else None)
        colour = {"pass": "#2ca02c", "fail": "#d62728"}.get(r.verdict, "#ff7f0e")
        axes.scatter([r.statistic], [y], marker="D", s=60, color=colour, zorder=3,
                     label="brain" if y == 0 else None)
        axes.annotate(f"{r.verdict}, p_holm {r.p_holm:.3g}", (1.0, y), xycoords=("axes fraction",
                      "data"), xytext=(6, 0), textcoords="offset points", va="center",
                      fontsize=8, annotation_clip=False)
    axes.set_yticks(range(rows), [r.check.name for r in result.results])
    axes.invert_yaxis()
    axes.set_xlabel("statistic (Hz): the read neurons' rate, or its change when silenced")
    axes.axvline(0.0, color="black", linewidth=0.5)
    axes.set_title(f"{result.brain}: checks against degree-preserving shuffles and "
                   f"class-matched random sets", fontsize=9)
    axes.legend(loc="lower right", fontsize=7)
    partial = out.with_name(f".{out.name}.partial{out.suffix}")
    try:
        figure.savefig(partial, format=out.suffix[1:].lower())
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return out

