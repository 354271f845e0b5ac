"""Shared fixtures: a tiny checkpoint, a tokenizer, the shared reference folder.

Other test modules rely on these names; keep them stable:

``tiny_checkpoint``
    A small random :class:`~flyviz.model.checkpoint.Checkpoint` (odd sizes)
    with anatomy and a ``tokenizer_path``, its vocabulary matching the tokenizer.
``tokenizer_path``
    A byte-level BPE tokenizer like the Fly LLM's, trained by
    :mod:`flyviz.model.synthetic`: the same in every clone, so that no test
    but the reference-material ones depends on whether ``../shared`` exists.
``real_tokenizer_path``
    The real Fly LLM tokenizer from the shared reference folder, or a skip.
``shared_dir``
    The reference folder (``../shared`` beside the repository), or a skip.
``demo_cache``
    A flyviz cache folder for the demo brain, shared by the tests that load it there.
``interrupt_after``
    Makes a function raise KeyboardInterrupt after some calls (``--resume`` tests).
``small_world``
    Makes a small model in a folder, loaded, with a text and its corpus (the ``world``
    fixtures of the analysis and hostile-input tests).
``dask_workers``, ``module_dask_workers``
    A local Dask cluster that several runs of a test (or a module) share, scaled to the
    worker processes each asks for (:class:`LocalDaskWorkers`).
``window``, ``app_checkpoint``
    The app tests' main window and model (tests/app_conftest.py, a plugin of this file).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# The app tests' Qt fixtures (``app_checkpoint``, ``window``) for every module; their helper
# functions are imported from ``app_conftest`` by name. ``cpu_report``: ``--cpu-report``.
pytest_plugins = ["app_conftest", "cpu_report"]

#: The shared reference folder next to the repository (absent in a user's clone).
SHARED_DIR = Path(__file__).resolve().parents[2] / "shared"


#: Fixtures that need the shared reference folder: their tests are marked ``reference``.
REFERENCE_FIXTURES = frozenset({"shared_dir", "real_tokenizer_path"})

#: At most this many pytest-xdist workers for ``-n auto`` (each has its own virtual screen,
#: and the Dask tests start two worker processes of their own).
MAX_TEST_WORKERS = 4


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests that need ``../shared`` as ``reference`` (``-m reference`` runs only
    them: CI runs them in the checkout that has the folder), and put the files first that hold
    a ``slow`` test (see :func:`slow_files_first`)."""
    for item in items:
        if REFERENCE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.reference)
    items[:] = slow_files_first(items)


def slow_files_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The tests, the files that hold a ``slow`` test first, then the files with the most tests
    (each file's tests in their order).

    pytest-xdist hands a worker a whole file at a time in this order (``--dist loadfile
    --no-loadscope-reorder``, pyproject.toml): a long file handed out last would leave the
    other workers idle while it runs. xdist's own order (most tests first) put the files of
    two or three long tests, the wheel's, the demo brain's windows', at the very end.
    """
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    slow = {name for name, tests in files.items()
            if any(test.get_closest_marker("slow") for test in tests)}
    order = sorted(files, key=lambda name: (name not in slow, -len(files[name])))
    return [item for name in order for item in files[name]]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per usable core and one more, at most :data:`MAX_TEST_WORKERS`.

    Many tests wait on processes of their own (a wheel's venv, Dask workers, Chromium,
    Xvfb children): the extra worker keeps the cores busy meanwhile (on the 2-core VM, three
    workers took 243 s and two 268 s, one run each on a quiet machine)."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min((cores or 1) + 1, MAX_TEST_WORKERS))


#: The options napari's viewer fixture reads (tests/test_napari_plugin.py takes that fixture
#: by name with napari's pytest plugin off: pyproject.toml's addopts).
NAPARI_FIXTURE_OPTIONS = {
    "--show-napari-viewer": "show the napari viewers the tests make",
    "--save-leaked-object-graph": "save a graph of a leaked napari viewer's references",
}


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    if not pluginmanager.has_plugin("napari"):
        for name, help_text in NAPARI_FIXTURE_OPTIONS.items():
            parser.addoption(name, action="store_true", default=False, help=help_text)


#: What watches a test process's Xvfb: it reads its standard input to the end (which comes
#: when the test process ends, however it ends: pytest-xdist kills a worker that is slow to
#: exit, and a killed process runs no atexit handler, pytest-xvfb's only way to stop its
#: server), then ends the server if it is still the one it was given (pid and start time).
_XVFB_WATCHDOG = """
import os, signal, sys
pid, started = int(sys.argv[1]), sys.argv[2]
sys.stdin.buffer.read()
try:
    with open(f"/proc/{pid}/stat") as stat:
        now = stat.read().rsplit(")", 1)[1].split()[19]
except (OSError, IndexError):
    sys.exit(0)
if now == started:
    os.kill(pid, signal.SIGTERM)
"""
_xvfb_watchdog = None


#: How many times its written timeout each of pytest-qt's waits may take
#: (``FLYVIZ_TEST_PATIENCE``). Every wait returns as soon as its condition holds: the timeout
#: only ends a broken test, and the figures in the tests were chosen on a quiet machine,
#: where a user's or CI's shared one (other work on the same cores) takes several times as
#: long.
TEST_PATIENCE = float(os.environ.get("FLYVIZ_TEST_PATIENCE", "6"))
_QT_WAITS = ("waitUntil", "waitSignal", "waitSignals", "waitCallback", "waitActive",
             "waitExposed")


def _patient_qt_waits() -> None:
    """Give pytest-qt's condition waits :data:`TEST_PATIENCE` times their timeout."""
    import functools

    try:
        from pytestqt.qtbot import QtBot
    except ImportError:
        return
    for name in _QT_WAITS:
        wait = getattr(QtBot, name, None)
        if wait is None or getattr(wait, "_patient", False):
            continue

        def patient(self, *args, _wait=wait, timeout=5000, **kwargs):
            if isinstance(timeout, (int, float)) and timeout > 0:
                timeout = int(timeout * TEST_PATIENCE)
            return _wait(self, *args, timeout=timeout, **kwargs)

        patient = functools.wraps(wait)(patient)
        patient._patient = True  # type: ignore[attr-defined]
        setattr(QtBot, name, patient)


def _tokenizers_trained_once() -> None:
    """Have :func:`flyviz.model.synthetic.make_tokenizer_json` train each ``(vocab_size,
    seed)`` once a test process.

    It trains a byte-level BPE on 3,000 generated lines (about 0.3 CPU s) and gives the same
    JSON text every time; :func:`flyviz.app._testing.make_app_checkpoint` calls it for every
    test model it writes, a module's or a test's, which made it a few CPU s of every
    window test file. The text is a string, so no caller can change the next one's.
    """
    import functools

    from flyviz.model import synthetic

    if getattr(synthetic.make_tokenizer_json, "_trained_once", False):
        return
    trained = functools.lru_cache(maxsize=None)(synthetic.make_tokenizer_json)
    trained._trained_once = True  # type: ignore[attr-defined]
    synthetic.make_tokenizer_json = trained  # type: ignore[assignment]


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Give the virtual screen pytest-xvfb started in this process (one per xdist worker) a
    watchdog that ends it when this process ends, so that no Xvfb outlives the run; and
    pytest-qt's waits their patience (:data:`TEST_PATIENCE`)."""
    global _xvfb_watchdog
    import subprocess
    import sys

    _patient_qt_waits()
    _tokenizers_trained_once()

    try:
        import pytest_xvfb
    except ImportError:
        return
    xvfb = pytest_xvfb.xvfb_instance
    display = getattr(xvfb, "_virtual_display", None)
    pid = getattr(display, "pid", None) if display is not None else None
    if not isinstance(pid, int) or not os.path.exists(f"/proc/{pid}/stat"):
        return
    with open(f"/proc/{pid}/stat") as stat:
        started = stat.read().rsplit(")", 1)[1].split()[19]
    # Its own session: a Ctrl-C to the test run's process group leaves it to do its work.
    _xvfb_watchdog = subprocess.Popen(
        [sys.executable, "-c", _XVFB_WATCHDOG, str(pid), started], stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Each phase's report on its test as ``item.rep_setup``/``rep_call``/``rep_teardown``
    (napari's viewer fixture looks at ``rep_call`` when it tears down)."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared reference folder; skips the test when it is absent."""
    if not (SHARED_DIR / "reference").is_dir():
        pytest.skip(f"reference material not found at {SHARED_DIR}")
    return SHARED_DIR


@pytest.fixture(scope="session")
def real_tokenizer_path(shared_dir: Path) -> Path:
    """The real ngxson tokenizer.json (skips without the shared folder)."""
    path = shared_dir / "reference" / "data" / "ngxson-tokenizer.json"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    return path


@pytest.fixture(scope="session")
def tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE tokenizer.json like the Fly LLM's, written for this session.

    Never the real one, even where ``../shared`` holds it: a user's clone has no
    ``../shared``, and the suite must behave the same there.
    """
    from flyviz.model.synthetic import write_tokenizer

    return write_tokenizer(tmp_path_factory.mktemp("tokenizer") / "tokenizer.json", vocab_size=512)


@pytest.fixture(scope="session")
def tokenizer_vocabulary(tokenizer_path: Path) -> int:
    """Vocabulary size of :func:`tokenizer_path`."""
    from flyviz.model.tokenizer import FlyTokenizer

    return FlyTokenizer(tokenizer_path).vocab_size


@pytest.fixture
def tiny_checkpoint(tokenizer_path: Path, tokenizer_vocabulary: int):
    """A fresh small checkpoint (523 neurons, 7,001 edges, rank-12 readout) per test."""
    from flyviz.model.checkpoint import validate_checkpoint
    from flyviz.model.synthetic import make_random_checkpoint

    return validate_checkpoint(make_random_checkpoint(
        neurons=523, edges=7001, d_embed=16, vocabulary=tokenizer_vocabulary, readout_rank=12,
        seed=11, tokenizer_path=tokenizer_path, name="tiny"))


@pytest.fixture(scope="session")
def small_world(tmp_path_factory: pytest.TempPathFactory, tokenizer_path: Path):
    """``small_world(folder, neurons=, edges=, seed=, anatomy=, ...)``: a small random model
    written to a folder (so that Dask workers can load it), loaded, and a text with its corpus.

    Parameters of the function it returns
    -------------------------------------
    folder
        Name of the new temporary folder (``root``).
    neurons, edges, seed, name
        Of :func:`~flyviz.model.synthetic.make_random_checkpoint` (``d_embed`` 16, readout
        rank 9, the vocabulary of :func:`tokenizer_path`).
    anatomy
        True: fly-wordbrain weights joined to a connectome dataset folder (as ``--dataset``
        does; ``dataset`` is its path); False: one fly-llm-hf folder without anatomy.
    logit_scale
        Multiplies the readout bias: logits of a trained model's size (a cross-entropy of a
        few nats, not dozens), so that float32 rounding stays far below 1e-6.
    text, text_name, context
        The text written to ``root / text_name`` (``text``) and its corpus of windows of
        ``context`` tokens (``corpus``); no text: neither key.

    Returns a new dict per call with ``root``, ``spec`` (the model folder), ``model``,
    ``tokenizer`` and those above.
    """
    from flyviz.analysis.corpus import build_corpus
    from flyviz.model.checkpoint import validate_checkpoint
    from flyviz.model.resolve import load_model
    from flyviz.model.synthetic import make_random_checkpoint
    from flyviz.model.tokenizer import FlyTokenizer
    from flyviz.model.writers import write_connectome_dataset, write_fly_llm_hf, write_wordbrain

    def make(folder: str, *, neurons: int, edges: int, seed: int, anatomy: bool,
             name: str = "small", logit_scale: float | None = None, text: str | None = None,
             text_name: str = "story.txt", context: int = 24) -> dict:
        import dataclasses

        import numpy as np

        root = tmp_path_factory.mktemp(folder)
        tokenizer = FlyTokenizer(tokenizer_path)
        ckpt = validate_checkpoint(make_random_checkpoint(
            neurons=neurons, edges=edges, d_embed=16, vocabulary=tokenizer.vocab_size,
            readout_rank=9, seed=seed, tokenizer_path=tokenizer_path, name=name))
        if logit_scale is not None:
            ckpt = dataclasses.replace(ckpt, head_b=np.asarray(ckpt.head_b) * np.float32(logit_scale))
        world: dict = {"root": root, "spec": str(root / "model"), "tokenizer": tokenizer}
        if anatomy:
            write_wordbrain(ckpt, root / "model", tokenizer_path=tokenizer_path)
            write_connectome_dataset(ckpt, root / "connectome")
            world["dataset"] = str(root / "connectome")
            world["model"] = load_model(world["spec"], dataset_dir=root / "connectome")
            assert world["model"].anatomy is not None
        else:
            write_fly_llm_hf(ckpt, root / "model")
            world["model"] = load_model(world["spec"])
        if text is not None:
            world["text"] = root / text_name
            world["text"].write_text(text, encoding="utf-8")
            world["corpus"] = build_corpus([world["text"]], tokenizer, context=context)
        return world

    return make


@pytest.fixture
def interrupt_after(monkeypatch: pytest.MonkeyPatch):
    """``interrupt_after(module, name, calls)``: ``module.name`` runs ``calls`` times, then
    raises KeyboardInterrupt (Ctrl+C in the middle of a corpus run); returns a function that
    puts the real one back."""

    def install(module, name: str, calls: int):
        real = getattr(module, name)
        made: list[int] = []

        def stop(*args, **kwargs):
            made.append(1)
            if len(made) > calls:
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, stop)
        return lambda: monkeypatch.setattr(module, name, real)

    return install


@pytest.fixture(autouse=True, scope="session")
def _collect_garbage_on_the_main_thread():
    """Collect garbage between tests on the main thread only, as the app does.

    Engine and export workers run in threads; an automatic collection that
    starts there and frees a Qt object from an earlier test aborts the process.
    """
    import gc

    gc.disable()
    yield
    gc.unfreeze()
    gc.enable()


#: BLAS threads per test process when pytest-xdist runs several side by side (the
#: environment variables also reach the processes the tests start).
WORKER_BLAS_THREADS = 1


@pytest.fixture(autouse=True, scope="session")
def _one_blas_thread_per_test_worker():
    """Under pytest-xdist, one BLAS/OpenMP thread per test process: as many processes as
    cores, each running BLAS on every core, fight over the cores and spin (the tiny demo
    build takes half as much CPU again with two threads as with one on two busy cores)."""
    import os

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, str(WORKER_BLAS_THREADS))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency
        yield
        return
    with threadpool_limits(limits=WORKER_BLAS_THREADS):
        yield


#: A full collection (frozen objects included) once the process has grown this much since
#: the last one: each walks every object the session holds (seconds, late in the suite).
FULL_COLLECTION_GROWTH = 1 << 30
#: A full collection that finds fewer unreachable objects than this fraction of the frozen
#: ones doubles the growth that the next one waits for: the process grows by what is alive
#: (arrays, caches), not by cycles among frozen objects, and collecting again soon would
#: walk the whole heap for nothing.
FULL_COLLECTION_FUTILE = 0.01
_last_full_collection_rss = [0]
_full_collection_growth = [FULL_COLLECTION_GROWTH]


@pytest.fixture(autouse=True, scope="module")
def _collect_everything_after_some_modules():
    """Once a module's fixtures are gone, collect the frozen objects too if the process has
    grown by :data:`FULL_COLLECTION_GROWTH` since the last time (cycles among objects that
    were frozen while alive are freed only so), then freeze what survives; the growth that
    triggers the next one doubles after each that finds next to nothing
    (:data:`FULL_COLLECTION_FUTILE`)."""
    yield
    import gc

    import psutil

    rss = psutil.Process().memory_info().rss
    if rss - _last_full_collection_rss[0] < _full_collection_growth[0]:
        return
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    found = gc.collect()
    gc.freeze()
    _last_full_collection_rss[0] = psutil.Process().memory_info().rss
    if found < FULL_COLLECTION_FUTILE * frozen:
        _full_collection_growth[0] *= 2
    else:
        _full_collection_growth[0] = FULL_COLLECTION_GROWTH


@pytest.fixture(autouse=True)
def _collect_after_each_test():
    """Collect what the test left, then freeze the survivors.

    A full collection walks every tracked object, and with Qt, vispy, Dask and
    xarray imported that is millions of them: per test it cost more than the
    tests themselves. Frozen objects are skipped, so each collection walks only
    what the test made; reference counting still frees frozen objects, and the
    module-level collection above takes the cycles among them when they add up.
    """
    yield
    import gc

    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _kinds_as_they_were():
    """Leave the registry of kinds of model as the test found it.

    The registry (and the colour layers read from it, :data:`flyviz.viewer.layers.LAYERS`)
    is one per process: a test that registers a kind, or reads the entry points again with
    a package of its own on the path, would otherwise change what every later test in its
    worker finds, and whether one fails would depend on which ran before it.
    """
    import flyviz.kinds as kinds

    kinds.registered_kinds()            # read once per process, as flyviz does
    before = kinds._REGISTRY
    yield
    if kinds._REGISTRY is not before:
        with kinds._REGISTRY_LOCK:
            kinds._REGISTRY = before
        from flyviz.viewer.layers import LAYERS

        LAYERS.forget()


#: A small brain (Brian2's own, tests/oracle/spiking) whose runs compile the spiking
#: engine's kernels.
SPIKING_WARM_UP_BRAIN = Path(__file__).resolve().parent / "oracle" / "spiking" / "small"


@pytest.fixture(scope="session")
def spiking_kernels(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The spiking engine's compiled kernels, compiled by one test worker while the others
    wait for them.

    Numba compiles them at their first call (about 7 s of CPU) and caches them beside their
    source: test workers that start the spiking tests at the same time would each compile
    them. A lock in the session's shared temporary folder lets the first compile them (with
    the runs below, which call every kernel) and the others read them from the cache.
    """
    from flyviz import spiking

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent                      # the folder all the session's workers share
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Windows
        fcntl = None
    with open(root / "spiking-kernels.lock", "w") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        brain = spiking.load_brain(SPIKING_WARM_UP_BRAIN)
        events = spiking.read_input_spikes(SPIKING_WARM_UP_BRAIN / "input_spikes.csv",
                                           brain, 1e-4)
        spiking.simulate(brain, input_events=events, duration_s=0.01)
        spiking.simulate(brain, excite=np.arange(5), rate=150.0, duration_s=0.01, trials=2,
                         seed=1)


@pytest.fixture(scope="session")
def demo_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A flyviz cache folder (``FLYVIZ_CACHE_DIR``) away from the user's, one per test
    process: the tests that load the demo brain there prepare its dataset cache (a second
    or more) once, not each; they only read it."""
    return tmp_path_factory.mktemp("demo-cache")


@pytest.fixture(scope="session")
def demo():
    """The embedded demo brain (``flyviz.load("demo")``, seconds), one per test process, closed
    at its end; the tests only read and run it."""
    import flyviz

    model = flyviz.load("demo")
    yield model
    model.close()


class LocalDaskWorkers:
    """A local Dask cluster started as ``--workers N`` starts one
    (:func:`flyviz.analysis.cluster._connect`: worker processes of one thread and one BLAS
    thread each), that runs reach with ``scheduler=`` its address.

    Several runs share it: a cluster costs seconds of CPU to start and to close, and each
    new worker process imports flyviz and loads the model again at its first task. A run
    on it spreads its tasks over its workers as one on its own cluster of that many does
    (the count comes from the scheduler either way).
    """

    def __init__(self) -> None:
        self.client: Any = None
        self.cluster: Any = None

    def workers(self) -> int:
        """The workers the scheduler has now."""
        return len(self.client.scheduler_info(n_workers=-1)["workers"])

    def scaled_to(self, n: int, timeout: float = 120.0) -> str:
        """Start the cluster with ``n`` workers, or scale it to ``n`` and wait until the
        scheduler has exactly ``n``; return the scheduler's address."""
        import time

        from flyviz.analysis import cluster

        if self.cluster is None:
            self.client, self.cluster = cluster._connect(n, None)
        elif self.workers() != n:
            with cluster._single_threaded_workers():   # as _connect starts its nannies
                self.cluster.scale(n)
            deadline = time.monotonic() + timeout
            while self.workers() != n:
                assert time.monotonic() < deadline, f"{self.workers()} workers, not {n}"
                time.sleep(0.05)
        return self.cluster.scheduler_address

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.cluster.close()


@pytest.fixture
def dask_workers():
    """``dask_workers.scaled_to(n)``: the address of a local cluster of ``n`` worker
    processes (:class:`LocalDaskWorkers`) that the test's runs share, closed after it."""
    pytest.importorskip("distributed")
    workers = LocalDaskWorkers()
    yield workers
    workers.close()


@pytest.fixture(scope="module")
def module_dask_workers():
    """:func:`dask_workers`, shared by a module's tests."""
    pytest.importorskip("distributed")
    workers = LocalDaskWorkers()
    yield workers
    workers.close()
