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
``interrupt_after``
    Makes a function raise KeyboardInterrupt after some calls (``--resume`` tests).
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: The shared reference folder next to the repository (absent in a user's clone).
SHARED_DIR = Path(__file__).resolve().parents[2] / "shared"


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


#: A full collection (frozen objects included) once the process has grown this much since
#: the last one: each walks every object the session holds (seconds, late in the suite).
FULL_COLLECTION_GROWTH = 1 << 30
_last_full_collection_rss = [0]


@pytest.fixture(autouse=True, scope="module")
def _collect_everything_after_some_modules():
    """Once a module's fixtures are gone, collect the frozen objects too if the process has
    grown by :data:`FULL_COLLECTION_GROWTH` since the last time (cycles among objects that
    were frozen while alive are freed only so), then freeze what survives."""
    yield
    import gc

    import psutil

    rss = psutil.Process().memory_info().rss
    if rss - _last_full_collection_rss[0] < FULL_COLLECTION_GROWTH:
        return
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    _last_full_collection_rss[0] = psutil.Process().memory_info().rss


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


@pytest.fixture(scope="module")
def demo():
    """The embedded demo brain (``flyviz.load("demo")``), one per test module, closed after it."""
    import flyviz

    model = flyviz.load("demo")
    yield model
    model.close()
