"""Loading models for the app, off the UI thread: everything a model needs before it is shown.

A :class:`ModelBundle` is a model ready for the window: the
:class:`~flyviz.record.runner.Model` that runs it (checkpoint, tokenizer, one
engine), the positions to draw (the anatomy, or a layout computed from the
graph) and the graph lookups of the inspector. :class:`ModelController` makes
one in a background :class:`ModelLoader` thread, including the slow parts (the
engine's buffers, the transposed graph, the model's identity digests), so that
nothing the user does waits for them; only the newest request counts when
several overlap.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QThread, Signal

from flyviz.app.base.background import join_thread, wait_qthread
from flyviz.app.brain.connectivity import Connectivity
from flyviz.app.runs.worker import engine_threads
from flyviz.model.checkpoint import Anatomy, Checkpoint
from flyviz.model.engine import Engine
from flyviz.model.errors import DatasetNotFoundError, FlyvizError
from flyviz.model.tokenizer import FlyTokenizer, tokenizer_for
from flyviz.record.runner import Model

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.viewer.state import ViewerState

log = logging.getLogger(__name__)

#: ``load(spec, progress) -> Checkpoint``: resolves a folder, hub id or "demo". A loader
#: that also accepts ``dataset_dir=`` is given the dataset folder the user chose, if any.
ModelLoadFunction = Callable[..., Checkpoint]


@dataclass(frozen=True)
class ModelBundle:
    """A model with everything the window needs to show and run it.

    Parameters
    ----------
    spec
        What the user asked for (folder, hub id, ``"demo"``).
    checkpoint
        The model's checkpoint.
    model
        The :class:`~flyviz.record.runner.Model` that runs it (its engine is
        owned by whoever installs the bundle: :meth:`close` releases it).
    tokenizer
        The model's tokenizer.
    anatomy
        The checkpoint's anatomy, or a layout computed from the graph.
    connectivity
        Partner lookups; :attr:`Connectivity.ready` once its transposed index is built.
    """

    spec: str
    checkpoint: Checkpoint
    model: Model
    tokenizer: FlyTokenizer
    anatomy: Anatomy
    connectivity: Connectivity

    @property
    def engine(self) -> Engine:
        """The engine every run of this model steps."""
        return self.model.engine

    @property
    def name(self) -> str:
        """The model's display name."""
        return self.checkpoint.name or self.spec

    @property
    def is_demo(self) -> bool:
        """True for the embedded demo brain (synthetic wiring)."""
        return is_demo_model(self.spec, self.checkpoint)

    def close(self) -> None:
        """Stop the engine's worker threads (for a bundle that is not installed)."""
        self.model.close()


def is_demo_model(spec: str, checkpoint: Checkpoint) -> bool:
    """True for the embedded demo brain (synthetic wiring)."""
    return spec == "demo" or checkpoint.name == "demo" or bool(checkpoint.metadata.get("demo"))


def default_model_loader(spec: str, progress: Callable[[str, float], None], *,
                         dataset_dir: str | Path | None = None) -> Checkpoint:
    """Resolve ``spec`` (folder, hub id or ``"demo"``) with :mod:`flyviz.model.resolve`,
    joined to the connectome dataset ``dataset_dir`` when one is given."""
    try:
        from flyviz.model.resolve import load_model
    except ModuleNotFoundError as exc:
        if exc.name != "flyviz.model.resolve":
            raise
        from flyviz.model.errors import ModelNotFoundError

        raise ModelNotFoundError("model loading is not available in this installation; "
                                 "reinstall flyviz") from None
    return load_model(spec, progress, dataset_dir=dataset_dir)


def prepare_bundle(spec: str, checkpoint: Checkpoint,
                   progress: Callable[[str, float], None] | None = None,
                   prepare_graph: bool = True) -> ModelBundle:
    """Tokenizer, anatomy (or layout), engine, identity and graph lookups of ``checkpoint``.

    ``prepare_graph`` builds the transposed graph now (in a loading thread);
    otherwise the caller builds it later, off the UI thread.
    """
    from flyviz.model.identity import model_identity

    report = progress or (lambda _label, _fraction: None)
    report("preparing the engine", 0.95)
    tokenizer = tokenizer_for(checkpoint)
    model = Model(checkpoint, tokenizer=tokenizer, spec=spec, threads=engine_threads())
    if checkpoint.anatomy is None or checkpoint.anatomy.n_valid == 0:
        report("computing a layout from the graph (no soma positions)", 0.96)
    # The library's choice (as export, napari and the notebook draw it): the anatomy where it
    # places any neuron, else a layout of the graph carrying the anatomy's labels.
    anatomy = model.drawing_anatomy()
    model.engine  # noqa: B018 - built here, off the UI thread, and reused by every run
    # Every recording stores the model's identity: digest the weights and graph once, now.
    model_identity(checkpoint)
    connectivity = Connectivity.of_checkpoint(checkpoint)
    if prepare_graph:
        report("indexing the graph's outputs", 0.98)
        connectivity.prepare()
    return ModelBundle(spec, checkpoint, model, tokenizer, anatomy, connectivity)


class ModelLoader(QThread):
    """Loads a model off the UI thread and prepares its :class:`ModelBundle`.

    Parameters
    ----------
    spec
        The model to load.
    load
        The loading function (see :data:`ModelLoadFunction`).
    dataset
        The connectome dataset folder the user chose, or ``None`` (the loader
        looks for one).

    Signals
    -------
    progress(label, fraction)
        Forwarded from the loading function.
    loaded(bundle)
        The model is ready.
    failed(spec, message)
        One line for the user.
    dataset_needed(spec, message)
        Instead of :attr:`failed`: the model needs a connectome dataset and none was found.
    """

    progress = Signal(str, float)
    loaded = Signal(object)
    failed = Signal(str, str)
    dataset_needed = Signal(str, str)

    def __init__(self, spec: str, load: ModelLoadFunction, parent: QObject | None = None,
                 dataset: str | Path | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("flyviz-loader")
        self.spec = spec
        self.dataset = dataset
        self._load = load

    def run(self) -> None:  # noqa: D401 - QThread API
        """Load, validate and prepare; report the outcome by signal."""
        def report(label: str, fraction: float) -> None:
            self.progress.emit(str(label), float(fraction))

        try:
            if self.dataset is None:
                checkpoint = self._load(self.spec, report)
            else:
                checkpoint = self._load(self.spec, report, dataset_dir=self.dataset)
            bundle = prepare_bundle(self.spec, checkpoint, report)
        except DatasetNotFoundError as exc:
            self.dataset_needed.emit(self.spec, str(exc))
            return
        except FlyvizError as exc:
            self.failed.emit(self.spec, str(exc))
            return
        except MemoryError:
            self.failed.emit(self.spec, "out of memory while loading the model; "
                                        "close other programs or use a smaller model")
            return
        except Exception as exc:  # noqa: BLE001 - never let a loader bug take the app down
            # A bug, not a missing model: the message names the error and the log keeps
            # its traceback.
            log.exception("loading %r failed with an unexpected error", self.spec)
            self.failed.emit(self.spec, f"cannot load {self.spec!r} (an unexpected error, "
                                        f"please report it): {type(exc).__name__}: {exc}")
            return
        self.loaded.emit(bundle)


class ModelController(QObject):
    """Loads models in the background; only the newest request is reported.

    The loaded model has one owner, the viewer state (``state.model``): the controller keeps
    no model of its own. What it loaded beside a model (its spec, tokenizer, anatomy and
    graph lookups: a :class:`ModelBundle`) is offered while the state shows that model
    (:attr:`bundle`); a language model the state was given otherwise (a script's) gets a
    bundle made from it; another kind's model (a spiking brain) has none.

    Parameters
    ----------
    load
        ``load(spec, progress) -> Checkpoint``, run off the UI thread (see
        :data:`ModelLoadFunction`).
    state
        The viewer state whose model this is (:attr:`state`; a window gives its own).

    Signals
    -------
    loading(spec)
        A load started.
    progress(spec, label, fraction)
        How far the newest load is.
    loaded(bundle)
        The newest load finished; the receiver owns ``bundle.model`` (and its engine).
    failed(spec, message)
        The newest load failed; one line for the user.
    dataset_needed(spec, message)
        The newest load failed because the model needs a connectome dataset
        and none was found: the user can choose one (:meth:`load` with ``dataset``).
    graph_ready(connectivity)
        The transposed graph of a bundle made by :meth:`bundle_now` is built.
    ready(name)
        The window installed a model (:attr:`bundle`) in every view: what features
        refresh on.
    """

    loading = Signal(str)
    progress = Signal(str, str, float)
    loaded = Signal(object)
    failed = Signal(str, str)
    dataset_needed = Signal(str, str)
    graph_ready = Signal(object)
    ready = Signal(str)

    def __init__(self, load: ModelLoadFunction = default_model_loader,
                 parent: QObject | None = None, state: "ViewerState | None" = None) -> None:
        super().__init__(parent)
        self._load = load
        self._loader: ModelLoader | None = None
        self._old_loaders: list[ModelLoader] = []
        self._helpers: list[threading.Thread] = []
        self._closed = False
        if state is None:
            from flyviz.viewer.state import ViewerState

            state = ViewerState()
        #: The viewer state, the one owner of the shown model.
        self.state = state
        # What was prepared beside the model this controller loaded, and beside the last
        # language model the state was given otherwise: read only while the state shows it.
        self._installed: ModelBundle | None = None
        self._made: ModelBundle | None = None

    def install(self, bundle: ModelBundle) -> None:
        """Keep ``bundle``'s spec, tokenizer, anatomy and graph lookups for its model, which
        the caller then gives the state (``state.set_model(bundle.model, ...)``)."""
        self._installed, self._made = bundle, None

    def loaded_here(self, model: object) -> bool:
        """True when ``model`` is the one this controller loaded (:meth:`install`)."""
        return self._installed is not None and model is self._installed.model

    @property
    def bundle(self) -> ModelBundle | None:
        """The model the state shows, with its tokenizer, anatomy and connectivity: the one
        this controller loaded while it is shown, one made from a language model the state
        was given otherwise, else ``None`` (no model, or another kind's)."""
        model = self.state.model
        if model is None:
            return None
        for bundle in (self._installed, self._made):
            if bundle is not None and bundle.model is model:
                return bundle
        if not isinstance(model, Model):
            return None
        anatomy = self.state.anatomy or model.drawing_anatomy()
        made = ModelBundle(model.spec or model.name, model.checkpoint, model, model.tokenizer,
                           anatomy, Connectivity.of_checkpoint(model.checkpoint))
        self._made = made
        self.index_graph(made.connectivity)
        return made

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The shown model's checkpoint (:attr:`bundle`'s), or None."""
        bundle = self.bundle
        return None if bundle is None else bundle.checkpoint

    @property
    def busy(self) -> bool:
        """True while a load is under way."""
        return self._loader is not None and self._loader.isRunning()

    def load(self, spec: str, dataset: str | Path | None = None) -> None:
        """Start loading ``spec`` in the background, joined to ``dataset`` if given."""
        if self._loader is not None and self._loader.isRunning():
            # The earlier load finishes unseen: only the newest request counts.
            self._old_loaders.append(self._loader)
        loader = ModelLoader(spec, self._load, self, dataset=dataset)
        loader.progress.connect(self._on_progress)
        loader.loaded.connect(self._on_loaded)
        loader.failed.connect(self._on_failed)
        loader.dataset_needed.connect(self._on_dataset_needed)
        loader.finished.connect(self._forget_finished_loaders)
        self._loader = loader
        self.loading.emit(spec)
        loader.start()

    def report_failed(self, spec: str, message: str) -> None:
        """Say that ``spec``, a model another part of the window opened (a spiking brain's
        folder), did not load: as a load of this controller that fails (:attr:`failed`, the
        window's dialog and Model dock line)."""
        self.failed.emit(spec, message)

    def bundle_now(self, checkpoint: Checkpoint, spec: str | None = None) -> ModelBundle:
        """A bundle of an in-memory checkpoint, at once (scripts and tests).

        The engine is built here; the transposed graph is built by a helper
        thread, and :attr:`graph_ready` says when it is there.
        """
        bundle = prepare_bundle(spec or checkpoint.name, checkpoint, prepare_graph=False)
        self.index_graph(bundle.connectivity)
        return bundle

    def index_graph(self, connectivity: Connectivity) -> None:
        """Build ``connectivity``'s transposed index on a helper thread; :attr:`graph_ready`
        says when it is there (at once when it is already)."""
        if connectivity.ready:
            self.graph_ready.emit(connectivity)
            return

        def build() -> None:
            connectivity.prepare()
            if not self._closed:
                self.graph_ready.emit(connectivity)

        helper = threading.Thread(target=build, name="flyviz-graph-index", daemon=True)
        self._helpers = [h for h in self._helpers if h.is_alive()] + [helper]
        helper.start()

    def shutdown(self) -> None:
        """Wait for every load and helper thread; safe to call twice."""
        self._closed = True
        for loader in [self._loader, *self._old_loaders]:
            if loader is not None and loader.isRunning():
                # A load cannot be interrupted; wait for it (so no thread outlives the
                # window), at most JOIN_TIMEOUT_S.
                wait_qthread(loader, "loading a model")
        for helper in self._helpers:
            join_thread(helper, "building the graph index")
        self._helpers = []

    # ------------------------------------------------------------ loader signals
    def _forget_finished_loaders(self) -> None:
        self._old_loaders = [ld for ld in self._old_loaders if ld.isRunning()]

    def _on_progress(self, label: str, fraction: float) -> None:
        loader = self.sender()
        if loader is self._loader:
            self.progress.emit(loader.spec, label, fraction)

    def _on_failed(self, spec: str, message: str) -> None:
        if self.sender() is self._loader:
            self.failed.emit(spec, message)

    def _on_dataset_needed(self, spec: str, message: str) -> None:
        if self.sender() is self._loader:
            self.dataset_needed.emit(spec, message)

    def _on_loaded(self, bundle: ModelBundle) -> None:
        if self.sender() is not self._loader or self._closed:
            bundle.close()
            return
        self.loaded.emit(bundle)
