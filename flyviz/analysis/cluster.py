"""Run per-chunk tasks of a corpus analysis on Dask, merge their partials in a fixed tree.

The same code runs on one laptop and on a cluster:

* ``workers=N`` starts a :class:`distributed.LocalCluster` of ``N`` worker
  processes (one thread each, BLAS and OpenMP in one thread:
  :data:`WORKER_ENVIRONMENT`) for the run and closes it afterwards;
* ``scheduler="tcp://HOST:PORT"`` connects a :class:`distributed.Client` to
  a running cluster (``dask scheduler`` and ``dask worker`` on the machines);
* ``workers=0`` runs every task in this process, without Dask.

A task is a module-level function called on a worker as
``function(*args, chunk)``; it returns a *partial*: a ``dict`` of NumPy
arrays. The model is never shipped inside a task: tasks carry the model's spec
(a path or ``"demo"``) and load it with :func:`worker_model`, once per worker
process (the loaders memory-map the large arrays, so this is cheap). Tasks
report progress with :func:`report_progress`; on a cluster the reports travel
as Dask events to the client's progress bar.

Partials are merged in a fixed binary tree and each finished node is kept on
disk for ``--resume`` (:mod:`flyviz.analysis.parts`: :class:`MergeTree`,
:class:`PartialStore`, importable from here too), so 1 worker, 2 workers and a
resumed run give the same bits. At most about twice as many tasks as workers
are in flight, so client memory stays bounded.
"""

from __future__ import annotations

import contextlib
import functools
import math
import operator
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


from flyviz.analysis.parts import (Merge, MergeTree, Partial, PartialStore, check_new_run,
                                   check_parts, open_store, parts_folder)
from flyviz.analysis.quiet import (quiet_dask, raise_if_interrupted, restore_term,
                                   signals_ignored, term_as_interrupt)
from flyviz.errors import Interrupted
from flyviz.model.errors import FlyvizError, InputError

PROGRESS_TOPIC = "flyviz-progress"


class ClusterError(FlyvizError):
    """The Dask scheduler cannot be reached, or the cluster failed."""


class Chunk(Protocol):
    """What the runner needs to know about a chunk."""

    index: int

    @property
    def n_tokens(self) -> int: ...


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


class RunSettings:
    """What the settings dataclasses of corpus runs share (:class:`~flyviz.analysis.atlas.
    AtlasSettings`, :class:`~flyviz.analysis.sweep.SweepSettings`): a ``kernel`` and
    ``threads`` that never change the results, and range checks."""

    def run_key(self) -> dict[str, Any]:
        """The settings the results depend on (kernel and threads give the same bits)."""
        from dataclasses import asdict

        key = asdict(self)  # type: ignore[call-overload]
        key.pop("kernel")
        key.pop("threads")
        return key

    @staticmethod
    def check_ranges(checks: "Sequence[tuple[str, Any, int, int]]") -> None:
        """Raise :class:`InputError` for the first ``(name, value, lo, hi)`` that is not a
        whole number in range (a library caller's ``"x"`` or ``2.5`` included)."""
        from flyviz.arguments import whole_number

        for name, value, lo, hi in checks:
            whole_number(name, value, lo, hi)


# ------------------------------------------------------------------ worker side
#: Spec prefix naming a demo-brain asset folder other than the installed one.
DEMO_FOLDER_PREFIX = "demo:"


def worker_model(spec: str, dataset: str | None = None, weights_sha256: str | None = None):
    """The model of ``spec``, loaded once per process (memory-mapped where the layout allows).

    ``spec`` is anything :func:`~flyviz.model.resolve.load_model` takes, or
    ``demo:FOLDER`` for a demo-brain asset folder (``flyviz build-demo --out``);
    ``dataset`` the connectome dataset folder to join it to (``--dataset``),
    which must exist at that path on every worker. With ``weights_sha256`` (the
    client's model), a worker that loaded other weights refuses, in one line.
    """
    spec, dataset = str(spec), None if dataset is None else str(dataset)
    held = _client_models.get((spec, dataset))
    if held is not None:
        return held   # the client's own model, in its own process: its weights are the client's
    ckpt = _cached_model(spec, dataset)
    if weights_sha256 is not None and _cached_digest(spec, dataset) != weights_sha256:
        raise InputError(f"a worker loaded another model from {spec!r} (its weights differ "
                         "from the client's); give every worker the same model files")
    return ckpt


#: The models a client lends to the tasks it runs in its own process (:func:`client_model`).
_client_models: dict[tuple[str, str | None], Any] = {}


@contextlib.contextmanager
def client_model(spec: str, dataset: str | None, ckpt: Any) -> Iterator[None]:
    """While open, :func:`worker_model` of ``spec`` and ``dataset`` in this process is
    ``ckpt``, the model the client has loaded already: a run in this process
    (``--workers 0``) loads it once, not once for the client and again for its tasks.
    Dask workers, in processes of their own, still load it from ``spec``."""
    key = (str(spec), None if dataset is None else str(dataset))
    _client_models[key] = ckpt
    try:
        yield
    finally:
        _client_models.pop(key, None)


@functools.lru_cache(maxsize=2)
def _cached_digest(spec: str, dataset: str | None) -> str:
    from flyviz.model.identity import weights_digest

    return weights_digest(_cached_model(spec, dataset))


@functools.lru_cache(maxsize=2)
def _cached_model(spec: str, dataset: str | None):
    if spec.startswith(DEMO_FOLDER_PREFIX):
        from flyviz.demo.loader import load_demo

        return load_demo(asset_dir=spec[len(DEMO_FOLDER_PREFIX):])
    from flyviz.model.resolve import load_model

    return load_model(spec, dataset_dir=dataset)


_task = threading.local()


def report_progress(tokens: int) -> None:
    """Called by a running task: ``tokens`` more tokens of its chunk are done."""
    sink = getattr(_task, "sink", None)
    if sink is not None:
        sink(int(tokens))


def _run_task(function: Callable[..., Partial], args: tuple, chunk: Any, run_id: str) -> Partial:
    """Run one task on a Dask worker, sending its progress reports as events."""
    from distributed import get_worker

    worker = get_worker()
    _task.sink = lambda tokens: worker.log_event(PROGRESS_TOPIC, (run_id, chunk.index, tokens))
    try:
        return function(*args, chunk)
    finally:
        _task.sink = None


# ------------------------------------------------------------------ progress
def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def _rate(rate: float, label: str) -> str:
    """``rate`` items a second as a progress line shows it: ``12 tokens/s``, ``2.5
    tokens/s``, and below one a second the seconds per item (``2.1 s/position``), which a
    rounded rate would show as 0. No rate yet (nothing done since the start): ``?``."""
    if not math.isfinite(rate) or rate <= 0:
        return f"? {label}/s"
    if rate >= 10:
        return f"{rate:,.0f} {label}/s"
    if rate >= 1:
        return f"{rate:.1f} {label}/s"
    one = label[:-1] if label.endswith("s") and len(label) > 1 else label
    return f"{1 / rate:,.1f} s/{one}"


class ProgressBar:
    """A self-overwriting progress line on stderr: tokens, tokens/s, time left.

    In a log (no terminal) it prints a line at most every ``log_every`` seconds, and only
    where the count (or the total) has changed since the line before: a forced update (a
    batch's end, :meth:`close`) of a count already written adds nothing.
    """

    def __init__(self, total: int, label: str = "tokens", stream=None,
                 log_every: float = 10.0) -> None:
        self.total = max(1, int(total))
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.log_every = log_every
        self.started = time.perf_counter()
        self.initial: int | None = None
        self._last_print = 0.0
        self._written: tuple[int, int, str] | None = None  # (done, total, note): a log's last
        self.done = 0
        #: Shown after the time left: work within a slow item (``5,230 J.v products``); in a
        #: log a changed note is news too, so a long item still writes a line now and then.
        self.note = ""

    def line(self, done: int) -> str:
        """The text shown for ``done`` tokens."""
        elapsed = time.perf_counter() - self.started
        if self.initial is None:
            self.initial = done
        fresh = done - self.initial
        rate = fresh / elapsed if elapsed > 0 else 0.0
        left = (self.total - done) / rate if rate > 0 else float("nan")
        width = 24
        filled = int(width * done / self.total)
        bar = "#" * filled + "-" * (width - filled)
        eta = _duration(left) if math.isfinite(left) else "?"
        return (f"[{bar}] {done / self.total:6.1%}  {done:,}/{self.total:,} {self.label}  "
                f"{_rate(rate, self.label)}  {eta} left" + (f"  {self.note}" if self.note else ""))

    def update(self, done: int, force: bool = False) -> None:
        """Show ``done`` tokens (at most every 0.2 s on a terminal)."""
        self.done = done
        now = time.perf_counter()
        interval = 0.2 if self.tty else self.log_every
        # a log keeps every line: one that says what the line before said is noise (a
        # terminal redraws its one line, so there a repeat costs nothing)
        repeat = not self.tty and self._written == (done, self.total, self.note)
        if repeat or (not force and now - self._last_print < interval):
            if self.initial is None:
                self.initial = done
            return
        self._last_print = now
        self._written = (done, self.total, self.note)
        text = self.line(done)
        if self.tty:
            self.stream.write("\r" + text.ljust(100)[:120])
            _OPEN_LINES[id(self.stream)] = self
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the line."""
        self.update(self.done, force=True)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
            _OPEN_LINES.pop(id(self.stream), None)


#: Per stream (by id), the terminal progress bar whose line is open (no newline yet).
_OPEN_LINES: dict[int, ProgressBar] = {}


def say(line: str, stream: Any = None) -> None:
    """Print a status line (on stderr by default) on a line of its own: a progress bar's
    open line on that terminal is ended first and drawn again below it."""
    stream = stream if stream is not None else sys.stderr
    bar = _OPEN_LINES.pop(id(stream), None)
    if bar is not None:
        stream.write("\n")
    print(line, file=stream, flush=True)
    if bar is not None:
        bar.update(bar.done, force=True)


def command_log(command: str) -> Callable[[str], None]:
    """The status lines of ``flyviz COMMAND`` (``flyviz atlas: 2 local Dask worker(s) ready``),
    each on a line of its own beside a progress bar (:func:`say`)."""
    def log(line: str) -> None:
        say(f"flyviz {command}: {line}")
    return log


# ----------------------------------------------------------------------- runs
@dataclass
class RunResult:
    """What :func:`run_tree` returns."""

    partial: Partial
    tokens: int
    seconds: float
    resumed_chunks: int
    workers: int
    #: Seconds from the cluster being ready (or the start, in process) to the last merge.
    compute_seconds: float = 0.0


#: Seconds to keep trying to reach a ``--scheduler`` before giving up (Dask retries a refused
#: connection until then; a scheduler on a busy network may take a few seconds to answer).
SCHEDULER_CONNECT_TIMEOUT_S = 5.0


def _check_handshake(address: str) -> None:
    """Raise :class:`ClusterError` unless a Dask scheduler at ``address`` completes Dask's
    handshake within :data:`SCHEDULER_CONNECT_TIMEOUT_S`.

    A ``Client``'s timeout covers only the TCP connect: a service that accepts and then says
    nothing (the dashboard's HTTP port, 8787 beside the scheduler's 8786) kept it waiting for
    the handshake forever, and one that answers in another protocol had its first bytes read
    as a frame length ("out of memory"). The probe runs on its own thread and event loop, so
    a caller's running loop (a notebook's) is not in the way.
    """
    import asyncio
    import concurrent.futures

    from distributed.comm import connect

    async def probe() -> None:
        # connect()'s own timeout ends a refused or silent connect (an OSError, left to the
        # Client's message); the longer deadline here ends only a handshake that never comes.
        comm = await asyncio.wait_for(connect(address, timeout=SCHEDULER_CONNECT_TIMEOUT_S),
                                      2 * SCHEDULER_CONNECT_TIMEOUT_S)
        await comm.close()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            pool.submit(asyncio.run, probe()).result()
        except (TimeoutError, MemoryError, ValueError, EOFError) as exc:
            # Something listens there but does not speak Dask's protocol.
            why = "no handshake within " \
                f"{2 * SCHEDULER_CONNECT_TIMEOUT_S:g} s" if isinstance(exc, TimeoutError) else \
                "it answered in another protocol"
            raise ClusterError(f"{address} did not answer as a Dask scheduler ({why}); give "
                               "the scheduler's address (tcp://HOST:8786 by default, not the "
                               "dashboard's port), or leave out --scheduler") from None
        except OSError:
            return  # nothing listens there at all: the Client says so, as before


def _connect(workers: int | None, scheduler: str | None):
    """A Client (and the LocalCluster it owns, if any)."""
    require_dask("running on Dask")
    from distributed import Client, LocalCluster
    if scheduler:
        address = scheduler_address(scheduler)
        _check_handshake(address)
        try:
            client = Client(address, timeout=f"{SCHEDULER_CONNECT_TIMEOUT_S}s", set_as_default=False)
        except (OSError, TimeoutError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ClusterError(f"cannot reach the Dask scheduler at {address} ({reason[:120]}); "
                               "start one with 'dask scheduler' and workers with 'dask worker "
                               f"{address}', or leave out --scheduler") from None
        except ValueError as exc:
            raise ClusterError(f"--scheduler {scheduler!r} is not a scheduler address "
                               f"({exc}); give tcp://HOST:PORT") from None
        return client, None
    import logging

    n = usable_cores() if workers is None else int(workers)
    try:
        with quiet_dask(), signals_ignored(), _single_threaded_workers():
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                   dashboard_address=":0", silence_logs=logging.CRITICAL)
    except (RuntimeError, OSError) as exc:
        # A worker process that cannot start (too little memory, a main script that runs
        # again in the child) surfaces as "Nanny failed to start": one line, and the way out.
        cause = exc.__cause__ or exc
        reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        raise ClusterError(f"could not start {n} local Dask worker process(es) ({reason[:120]}); "
                           "use --workers 0 to compute in this process") from None
    client = Client(cluster, set_as_default=False)
    from flyviz.analysis._worker_plugin import QuietWorkerSignals

    try:
        # Ctrl+C in a terminal reaches the whole process group: the workers leave it to
        # this process, which closes them (else each prints its KeyboardInterrupt).
        client.register_plugin(QuietWorkerSignals(), name="flyviz-quiet-signals")
    except Exception:  # pragma: no cover - an older distributed: tracebacks, nothing worse
        pass
    return client, cluster


#: Set in every local worker process before it starts: one BLAS/OpenMP thread each. N
#: workers on N cores each running BLAS on N threads would fight over the cores (and the
#: engine's steps keep BLAS in one thread anyway); distributed sets these by default, but
#: a user's Dask configuration may not.
WORKER_ENVIRONMENT = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                      "MKL_NUM_THREADS": "1"}


def _single_threaded_workers():
    """Dask's configuration with :data:`WORKER_ENVIRONMENT` in the nannies' environment set
    before a worker process is spawned (read when a nanny is made)."""
    import dask

    key = "distributed.nanny.pre-spawn-environ"
    return dask.config.set({key: {**(dask.config.get(key, default={}) or {}),
                                  **WORKER_ENVIRONMENT}})


_ADDRESS = r"(?:tcp|tls|ucx|ws|wss|inproc)://[A-Za-z0-9_.\-\[\]:%]+"


def scheduler_address(scheduler: str) -> str:
    """``--scheduler`` as a full address (``tcp://`` added), checked for form before any
    Client exists (a Client that fails to parse its address prints a traceback later).

    Raises
    ------
    ClusterError
        When it is not ``[PROTOCOL://]HOST:PORT``.
    """
    import re

    address = scheduler.strip()
    if "://" not in address:
        address = "tcp://" + address
    match = re.fullmatch(_ADDRESS, address)
    port = address.rsplit(":", 1)[-1] if match else ""
    if match is None or (not address.startswith("inproc://")
                         and not (port.isdigit() and 0 < int(port) < 65536)):
        raise ClusterError(f"--scheduler {scheduler!r} is not a scheduler address; give "
                           "tcp://HOST:PORT, e.g. tcp://10.0.0.5:8786")
    return address


#: The most worker processes a run may ask for (as ``--workers`` allows).
MAX_WORKERS = 1024


#: Where ``--workers 0`` (no scheduler) ran its tasks: a command's summary says this, not
#: "1 worker(s)", which would suggest a Dask worker.
IN_THIS_PROCESS = "in this process"


def where_it_ran(workers_used: int, workers: int | None, scheduler: str | None = None) -> str:
    """Where a command's tasks ran, for its summary line: :data:`IN_THIS_PROCESS` for
    ``--workers 0`` without ``--scheduler``, else ``"N worker(s)"`` (``workers_used``, the
    workers the run had).

    Examples
    --------
    >>> where_it_ran(1, 0), where_it_ran(2, None), where_it_ran(3, None, "tcp://host:8786")
    ('in this process', '2 worker(s)', '3 worker(s)')
    """
    if workers == 0 and not scheduler:
        return IN_THIS_PROCESS
    return f"{workers_used} worker(s)"


def check_workers(workers: Any, name: str = "workers") -> None:
    """Raise :class:`~flyviz.errors.InputError` unless ``workers`` is ``None`` (the usable
    cores) or a whole number from 0 (in this process) to :data:`MAX_WORKERS`: a negative
    count would start no worker, and the run would wait for one forever."""
    from flyviz.errors import InputError

    if workers is None:
        return
    try:
        count = None if isinstance(workers, bool) else operator.index(workers)
    except TypeError:
        count = None
    if count is None or not 0 <= count <= MAX_WORKERS:
        raise InputError(f"{name}={workers!r} must be a whole number from 0 (compute in this "
                         f"process) to {MAX_WORKERS}, or None (the usable cores)")


def check_where(workers: Any, scheduler: str | None) -> None:
    """Check where a run is to compute: :func:`check_workers`, and a scheduler address that
    is not blank (``""``: a notebook's unset variable). A blank one is no address, and read
    as "no scheduler" it ran the work on a local cluster, not the one meant (of no workers,
    with ``workers=0``); ``None`` is the way to say none.

    Raises
    ------
    InputError
        For ``workers`` (:func:`check_workers`).
    ClusterError
        For a blank ``scheduler``.
    """
    check_workers(workers)
    if scheduler is not None and not str(scheduler).strip():
        raise ClusterError("the scheduler address is empty: give a Dask scheduler's address, "
                           "e.g. tcp://10.0.0.5:8786, or scheduler=None to run on this machine")


def require_dask(feature: str, workers: int | None = None,
                 scheduler: str | None = None) -> None:
    """Raise :class:`~flyviz.errors.MissingDependencyError` (one line, naming
    ``flyviz[atlas]``) when a run on ``workers``/``scheduler`` needs Dask and it is not
    installed; ``workers=0`` without a scheduler runs in this process and needs none."""
    from flyviz.extras import require

    if workers == 0 and not scheduler:
        return
    require("dask", feature, hint="or compute in this process with --workers 0")


def check_scheduler(scheduler: str) -> None:
    """Raise :class:`ClusterError` now if the scheduler cannot be reached (before any work)."""
    with quiet_dask():
        client, _ = _connect(None, scheduler)
        client.close()


def run_tree(function: Callable[..., Partial], args: tuple, chunks: Sequence[Chunk],
             merge: Merge, *, workers: int | None = None, scheduler: str | None = None,
             store: PartialStore | None = None, resume: bool = False,
             progress: ProgressBar | None = None,
             log: Callable[[str], None] | None = None) -> RunResult:
    """Run ``function(*args, chunk)`` for every chunk and merge the partials in the fixed tree.

    Parameters
    ----------
    function, args
        A module-level function (importable on the workers) and its leading
        arguments (small: a spec, settings); the chunk comes last.
    chunks
        The work, in order (chunk ``i`` is leaf ``i``).
    merge
        Merges two partials (left = lower chunks).
    workers, scheduler
        See the module documentation (``workers=None``: the usable cores).
    store, resume
        Keep finished nodes on disk; continue from them with ``resume``.
    progress
        A progress bar over the chunks' tokens.
    log
        ``log(line)`` for status lines (the workers are ready) and notes (damaged
        part files dropped on resume).

    Raises
    ------
    Interrupted
        On Ctrl+C or SIGTERM, after the cluster is closed (stored nodes are
        kept; a run that finished none leaves no store behind).
    ClusterError
        When the scheduler cannot be reached.
    MissingDependencyError
        Before anything is written, when Dask is needed and not installed.
    """
    check_where(workers, scheduler)
    require_dask("running on Dask", workers, scheduler)
    tree = MergeTree(len(chunks), merge, store)
    covered: set[int] = set()
    if store is not None:
        if resume:
            store.check_resumable()
            covered = tree.restore(log)
        else:
            store.create()
    pending = [c for c in chunks if c.index not in covered]
    resumed_tokens = sum(c.n_tokens for c in chunks if c.index in covered)
    done_tokens = {c.index: 0 for c in pending}
    started = time.perf_counter()

    def show(force: bool = False) -> None:
        if progress is not None:
            progress.update(resumed_tokens + sum(done_tokens.values()), force=force)

    show(force=True)
    if covered:
        tree.restored_pending()
    used_workers = 0
    ready = [started]
    previous_term = term_as_interrupt()
    try:
        if workers == 0 and scheduler is None:
            used_workers = 1
            for chunk in pending:
                raise_if_interrupted()

                def sink(tokens: int, index: int = chunk.index) -> None:
                    done_tokens[index] += tokens
                    show()
                _task.sink = sink
                try:
                    partial = function(*args, chunk)
                finally:
                    _task.sink = None
                done_tokens[chunk.index] = chunk.n_tokens
                tree.add((0, chunk.index), partial)
                show()
        elif pending:
            used_workers = _run_on_dask(function, args, pending,
                                        lambda chunk, partial: tree.add((0, chunk.index), partial),
                                        done_tokens, show, workers, scheduler, ready, log)
    except KeyboardInterrupt:
        # What the tree holds, not what progress counted: a chunk whose last token was
        # reported but whose partial had not arrived yet is not saved.
        saved = tree.saved_chunks()
        if store is not None and not store.nodes():
            store.remove()  # nothing finished: nothing to resume, no OUT.parts left behind
            raise Interrupted("interrupted before any chunk was finished; nothing is saved"
                              ) from None
        if store is None:  # nothing was kept on disk: nothing to resume
            raise Interrupted("interrupted; nothing of this run is saved") from None
        raise Interrupted(f"interrupted: {saved} of {len(chunks)} chunks are saved in "
                          f"{store.folder}; run the same command with --resume to continue"
                          ) from None
    except BaseException:
        if store is not None and not store.nodes():
            store.remove()  # nothing finished: nothing to resume
        raise
    finally:
        restore_term(previous_term)
    show(force=True)
    finished = time.perf_counter()
    return RunResult(partial=tree.result(), tokens=sum(c.n_tokens for c in chunks),
                     seconds=finished - started, resumed_chunks=len(covered),
                     workers=used_workers, compute_seconds=finished - ready[-1])


def run_each(function: Callable[..., Partial], args: tuple, items: Sequence[Chunk],
             deliver: Callable[[Any, Partial], None], *, workers: int | None = None,
             scheduler: str | None = None, progress: ProgressBar | None = None,
             log: Callable[[str], None] | None = None) -> int:
    """Run ``function(*args, item)`` for every item and hand each result to ``deliver``.

    What :func:`run_tree` does, for work whose items stand alone (a screen's neuron sets):
    no merge; ``deliver(item, partial)`` is called in this process, on this thread, as
    each task finishes (in this process: in order; on Dask: as they come), so the caller
    keeps every result (a file per item) the moment it exists.

    Parameters
    ----------
    function, args, items, workers, scheduler, progress, log
        As for :func:`run_tree` (an item's ``n_tokens`` is its share of the progress).
    deliver
        Takes each finished item and its partial.

    Returns
    -------
    int
        The workers used (1 in this process).

    Raises
    ------
    KeyboardInterrupt
        On Ctrl+C or SIGTERM, after the cluster is closed (what was delivered stays
        delivered); the caller says what is kept.
    ClusterError, MissingDependencyError
        As for :func:`run_tree`.
    """
    check_where(workers, scheduler)
    require_dask("running on Dask", workers, scheduler)
    done_tokens = {item.index: 0 for item in items}

    def show(force: bool = False) -> None:
        if progress is not None:
            progress.update(sum(done_tokens.values()), force=force)

    show(force=True)
    used = 1
    previous_term = term_as_interrupt()
    try:
        if workers == 0 and scheduler is None:
            for item in items:
                raise_if_interrupted()

                def sink(tokens: int, index: int = item.index) -> None:
                    done_tokens[index] += tokens
                    show()
                _task.sink = sink
                try:
                    partial = function(*args, item)
                finally:
                    _task.sink = None
                done_tokens[item.index] = item.n_tokens
                deliver(item, partial)
                show()
        elif items:
            used = _run_on_dask(function, args, list(items), deliver, done_tokens, show,
                                workers, scheduler, [time.perf_counter()], log)
    finally:
        restore_term(previous_term)
    show(force=True)
    return used


def _run_on_dask(function, args, pending, deliver: Callable[[Any, Partial], None],
                 done_tokens: dict[int, int], show: Callable[..., None], workers: int | None,
                 scheduler: str | None, ready: list[float],
                 log: Callable[[str], None] | None = None) -> int:
    """The Dask part of :func:`run_tree` and :func:`run_each`: ``deliver(chunk, partial)``
    for each finished task; returns the number of workers used and appends the time the
    cluster was ready to ``ready``."""
    with quiet_dask():
        return _run_quietly_on_dask(function, args, pending, deliver, done_tokens, show,
                                    workers, scheduler, ready, log)


def _run_quietly_on_dask(function, args, pending, deliver: Callable[[Any, Partial], None],
                         done_tokens: dict[int, int],
                         show: Callable[..., None], workers: int | None, scheduler: str | None,
                         ready: list[float], log: Callable[[str], None] | None) -> int:
    import uuid

    from distributed import wait

    client, cluster = _connect(workers, scheduler)
    run_id = uuid.uuid4().hex
    futures: dict[Any, Any] = {}
    try:
        def on_event(event: Any) -> None:
            _, message = event
            rid, index, tokens = message
            if rid == run_id and index in done_tokens:
                done_tokens[index] = min(done_tokens[index] + int(tokens),
                                         next(c.n_tokens for c in pending if c.index == index))

        client.subscribe_topic(PROGRESS_TOPIC, on_event)
        try:
            info = client.scheduler_info(n_workers=-1)  # all workers, not the first few
        except TypeError:  # older distributed lists them all anyway
            info = client.scheduler_info()
        n_workers = max(1, len(info.get("workers", {})))
        ready.append(time.perf_counter())
        if log is not None:  # from here on Ctrl+C stops the run (see flyviz.analysis.quiet)
            where = f"at {scheduler_address(scheduler)}" if scheduler else "local"
            log(f"{n_workers} {where} Dask worker(s) ready")
        window = 2 * n_workers
        queue = list(pending)
        while queue or futures:
            raise_if_interrupted()
            while queue and len(futures) < window:
                chunk = queue.pop(0)
                future = client.submit(_run_task, function, args, chunk, run_id,
                                       key=f"flyviz-chunk-{chunk.index}-{run_id}", pure=False)
                futures[future] = chunk
            try:
                with client.as_current():
                    finished = wait(list(futures), timeout=0.5,
                                    return_when="FIRST_COMPLETED").done
            except TimeoutError:  # none finished within the half second: refresh the bar
                finished = set()
            for future in sorted(finished, key=lambda f: futures[f].index):
                chunk = futures.pop(future)
                try:
                    partial = future.result()
                except Exception as exc:
                    if isinstance(exc, FlyvizError):
                        raise
                    raise ClusterError(f"a task of chunk {chunk.index} failed on the cluster: "
                                       f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                                       ) from None
                future.release()
                done_tokens[chunk.index] = chunk.n_tokens
                deliver(chunk, partial)
            show()
        return n_workers
    finally:
        for future in futures:
            future.cancel()
        try:
            client.unsubscribe_topic(PROGRESS_TOPIC)
        except Exception:
            pass
        client.close()
        if cluster is not None:
            cluster.close()


__all__ = ["Chunk", "ClusterError", "DEMO_FOLDER_PREFIX", "IN_THIS_PROCESS", "Interrupted",
           "Merge", "MergeTree",
           "PROGRESS_TOPIC", "Partial", "PartialStore", "ProgressBar", "RunResult", "RunSettings",
           "check_new_run", "check_parts", "check_scheduler", "command_log", "open_store", "parts_folder",
           "report_progress", "say",
           "require_dask", "run_each", "run_tree", "scheduler_address", "usable_cores", "WORKER_ENVIRONMENT",
           "client_model", "where_it_ran", "worker_model"]
