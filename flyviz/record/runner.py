"""The one way flyviz runs a model: resolve it, then tokenizer, engine, frames, Recording.

:class:`Model` is a loaded model ready to run: the checkpoint, its tokenizer,
its anatomy, and one :class:`~flyviz.model.engine.Engine` built on first use
and reused by every run. Each run is a generator of
:class:`~flyviz.record.frame.Frame` objects (:meth:`Model.frames`) that can be
stopped between any two tokens, optionally appending to a
:class:`~flyviz.record.recording.Recording` whose metadata
(:meth:`Model.new_recording`) holds the prompt, the settings with the seed
actually used, the model's identity and the interventions, so that the run
can be replayed. :meth:`Model.record` runs a prompt to the end into a
recording.

Everything that runs a model goes through it: ``flyviz generate``,
``flyviz export``, ``flyviz replay``, the library (:func:`flyviz.load`,
:func:`flyviz.run`) and the app's engine thread. No Qt, no vispy.

Example
-------
>>> model = Model.load("demo")                                   # doctest: +SKIP
>>> recording = model.record("Once upon a time",
...                          GenerationSettings(max_new_tokens=20))  # doctest: +SKIP
>>> for frame in model.frames("Tom and his dog"):               # doctest: +SKIP
...     if frame.is_generation and frame.probability < 0.1:
...         break                                    # stops between two tokens
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flyviz.errors import InputError
from flyviz.model.checkpoint import Anatomy, Checkpoint
from flyviz.model.engine import Engine
from flyviz.model.interventions import ResolvedInterventions, as_interventions, resolve
from flyviz.model.patching import bind_patches
from flyviz.model.tokenizer import FlyTokenizer, tokenizer_for
from flyviz.record.frame import Frame
from flyviz.record.run import GenerationSettings, encode_prompt, iter_frames, run_metadata

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.attribution import BackwardEngine
    from flyviz.record.compare import Comparison
    from flyviz.record.recording import Recording

#: Progress callback of loading: ``progress(label, fraction)``.
LoadProgress = Callable[[str, float], None]


def check_engine_options(kernel: Any, threads: Any) -> None:
    """Refuse, in one line, a ``kernel`` other than ``None`` or one of
    :data:`~flyviz.model.kernels.KERNELS`, and ``threads`` other than ``None`` or 1..1024."""
    from flyviz.arguments import choice, whole_number
    from flyviz.model.kernels import KERNELS

    choice("kernel", kernel, KERNELS, none="FLYVIZ_KERNEL, else scipy")
    if threads is not None:
        whole_number("threads", threads, 1, 1024)


class Model:
    """A loaded Fly LLM, ready to run prompts: checkpoint, tokenizer, anatomy, one engine.

    Parameters
    ----------
    checkpoint
        A validated checkpoint (:func:`flyviz.model.resolve.load_model`).
    tokenizer
        Its tokenizer; default: the one the checkpoint names
        (:func:`~flyviz.model.tokenizer.tokenizer_for`).
    spec
        How the user named the model (stored with recordings); default: the
        checkpoint's own spec (an absolute folder, a hub id or ``"demo"``).
    kernel
        Sparse kernel of the engine: ``"scipy"``, ``"llvm"`` or ``None``
        (``FLYVIZ_KERNEL``, else the default; see :mod:`flyviz.model.kernels`).
    threads
        Threads of the engine's sparse product; default: the usable cores,
        at most 4 (the app passes one fewer, to keep a core for drawing).

    Notes
    -----
    The engine is built on first use (:attr:`engine`, or :meth:`prepare` to
    pay for it up front in a thread of your choice) and reused by every run,
    so a model is meant to be run from **one thread at a time**. Starting a
    run ends the previous run's generator: it stops before its next token.
    Call :meth:`close` (or use the model as a context manager) to stop the
    engine's worker threads when done.
    """

    def __init__(self, checkpoint: Checkpoint, *, tokenizer: FlyTokenizer | None = None,
                 spec: str | None = None, kernel: str | None = None,
                 threads: int | None = None) -> None:
        check_engine_options(kernel, threads)
        self.checkpoint = checkpoint
        self.tokenizer = tokenizer if tokenizer is not None else tokenizer_for(checkpoint)
        self.spec = str(checkpoint.metadata.get("spec") or spec or checkpoint.name)
        self.kernel_request = kernel
        self.threads = threads
        self._engine: Engine | None = None
        self._backward: "BackwardEngine | None" = None
        self._engine_lock = threading.Lock()
        self._layout: Anatomy | None = None
        self._run_serial = 0
        self._comparison: "Comparison | None" = None

    @classmethod
    def load(cls, spec: str | Path, dataset: str | Path | None = None, *,
             progress: LoadProgress | None = None, kernel: str | None = None,
             threads: int | None = None) -> "Model":
        """Resolve ``spec`` (a folder, a hub repo id or ``"demo"``) and load it.

        Parameters
        ----------
        spec
            See :mod:`flyviz.model.resolve`.
        dataset
            The connectome dataset folder to join the model to (fly-wordbrain
            weights and web exports need one; for ngxson's checkpoint it adds
            soma positions). Default: one next to the model, or the hub's.
        progress
            Called as ``progress(label, fraction)`` while downloading and loading.
        kernel, threads
            As for :class:`Model`.

        Raises
        ------
        ModelNotFoundError, CheckpointError, TokenizerError
            One line saying what is missing or damaged and what to do.
        """
        from flyviz.model.resolve import load_model

        check_engine_options(kernel, threads)  # before the model loads, not at its first run
        checkpoint = load_model(str(spec), progress, dataset_dir=dataset)
        return cls(checkpoint, spec=str(spec), kernel=kernel, threads=threads)

    # ------------------------------------------------------------ the model
    @property
    def name(self) -> str:
        """The model's display name."""
        return self.checkpoint.name

    @property
    def neurons(self) -> int:
        """Number of neurons (the length of a state)."""
        return int(self.checkpoint.config.neurons)

    @property
    def anatomy(self) -> Anatomy | None:
        """The checkpoint's anatomy (soma positions and labels), or ``None``."""
        return self.checkpoint.anatomy

    def drawing_anatomy(self) -> Anatomy:
        """Positions to draw the neurons at: the checkpoint's anatomy when it has
        positions, else a layout computed from the synapse graph (once, then kept)."""
        anatomy = self.checkpoint.anatomy
        if anatomy is not None and anatomy.n_valid > 0:
            return anatomy
        if self._layout is None:
            from flyviz.model.layout import graph_layout

            self._layout = graph_layout(self.checkpoint)
        return self._layout

    @property
    def engine(self) -> Engine:
        """The engine every run steps, built on first use."""
        if self._engine is None:
            with self._engine_lock:
                if self._engine is None:
                    self._engine = Engine(self.checkpoint, self.threads,
                                          kernel=self.kernel_request)
        return self._engine

    @property
    def backward(self) -> "BackwardEngine":
        """The backward engine of every trace (``W^T`` laid out once), built on first use."""
        if self._backward is None:
            from flyviz.model.attribution import BackwardEngine

            with self._engine_lock:
                if self._backward is None:
                    self._backward = BackwardEngine(self.checkpoint, threads=self.threads,
                                                    kernel=self.kernel_request)
        return self._backward

    def comparison(self, interventions: ResolvedInterventions) -> "Comparison":
        """The untouched and the intervened engine of a comparison of this model
        (:class:`~flyviz.record.compare.Comparison`), with ``interventions``: built on the
        first comparison and kept for the next ones, which only change the intervened
        engine's interventions; :meth:`close` closes them.

        Each engine gets half of this model's threads (at least one) and overlaps its next
        ``W @ x`` with the other engine's step (``overlap=True``): stepped one after the other
        without it, the two products queued behind each other and a compared token cost three
        to four plain ones instead of two.
        """
        from flyviz.model.engine import default_threads
        from flyviz.record.compare import Comparison

        if self._comparison is None:
            threads = max(1, ((self.threads or default_threads()) + 1) // 2)
            self._comparison = Comparison.for_checkpoint(
                self.checkpoint, interventions, threads=threads, kernel=self.kernel_request,
                tokenizer=self.tokenizer, overlap=True)
        elif interventions is not self._comparison.interventions:
            self._comparison.set_interventions(interventions)
        return self._comparison

    def prepare(self) -> str:
        """Build the engine, choose its sparse kernel and lay the graph out for it now
        (otherwise the first run does it); return the kernel's name."""
        return self.engine.prepare()

    def resolve_interventions(self, interventions: Any = ()) -> ResolvedInterventions:
        """Interventions in any accepted form (objects, text such as ``"silence
        sign:inhibitory"``, see :func:`~flyviz.model.interventions.as_interventions`)
        resolved against this model: index arrays, with what each selected.

        Raises
        ------
        InputError
            For a malformed intervention, a bad or empty selection.
        """
        return resolve(self.checkpoint, as_interventions(interventions))

    # ------------------------------------------------------------ running
    def new_recording(self, prompt: str, settings: GenerationSettings,
                      interventions: ResolvedInterventions | None = None, *,
                      states_dtype: str = "float16") -> "Recording":
        """An empty :class:`~flyviz.record.recording.Recording` for a run of ``prompt``,
        with its metadata (see ``docs/recording-format.md``).

        ``settings`` must be validated (:meth:`GenerationSettings.validate`) so
        that the stored seed is the one the run uses.
        """
        from flyviz.record.recording import Recording

        return Recording(self.neurons, run_metadata(self.checkpoint, prompt, settings, self.spec,
                                                    interventions or None),
                         states_dtype=states_dtype)

    def frames(self, prompt: str, settings: GenerationSettings | None = None, *,
               interventions: Any = (), prompt_ids: Sequence[int] | None = None,
               recording: "Recording | None" = None) -> Generator[Frame, None, None]:
        """Run ``prompt``, yielding one frame per consumed token.

        The prompt, the settings and the interventions are checked now, so a
        bad one raises here; the engine steps only as the frames are consumed.

        Parameters
        ----------
        prompt
            Text to continue (BOS is added where the tokenizer has one).
        settings
            Generation settings; default greedy, 80 new tokens. Validated here:
            a random seed is drawn now (see :meth:`GenerationSettings.validate`).
        interventions
            Objects, text forms or an already resolved set
            (:meth:`resolve_interventions`); they apply to this run only.
        prompt_ids
            Pre-encoded ids (BOS first) to use instead of encoding ``prompt``.
        recording
            Append every frame to it as it is produced (make it with
            :meth:`new_recording` to store the run's metadata).

        Returns
        -------
        Generator[Frame, None, None]
            Stop iterating, or call its ``close()``, to cancel
            between two tokens. Starting another run on this model ends it
            before its next token. See :func:`~flyviz.record.run.iter_frames`
            for what each frame holds and how many there are.

        Raises
        ------
        InputError
            For an empty prompt, out-of-range settings or ids, or bad
            interventions.
        """
        settings = (settings or GenerationSettings()).validate()
        ids = [int(i) for i in prompt_ids] if prompt_ids is not None else encode_prompt(
            self.tokenizer, prompt, self.checkpoint.config.bos_token_id)
        # A patch's positions are aligned to this prompt (flyviz.model.patching).
        resolved = self.resolve_interventions(bind_patches(interventions, len(ids),
                                                               self.checkpoint))
        vocabulary = self.checkpoint.config.vocabulary
        if not ids or any(not 0 <= i < vocabulary for i in ids):
            raise InputError(f"prompt ids must be a non-empty list of ids in 0..{vocabulary - 1}")
        if recording is not None and recording.neurons != self.neurons:
            raise InputError(f"the recording holds {recording.neurons:,} neurons per state but "
                             f"{self.name} has {self.neurons:,}")
        self._run_serial += 1
        return self._run(self._run_serial, prompt, settings, ids, resolved, recording)

    def _run(self, serial: int, prompt: str, settings: GenerationSettings, ids: list[int],
             resolved: ResolvedInterventions, recording: "Recording | None"
             ) -> Generator[Frame, None, None]:
        engine = self.engine
        if serial != self._run_serial:  # superseded before its first token
            return
        engine.set_interventions(resolved)
        inner = iter_frames(engine, self.tokenizer, prompt, settings, prompt_ids=ids)
        try:
            while serial == self._run_serial:
                frame = next(inner, None)
                if frame is None:
                    return
                if recording is not None:
                    recording.append(frame)
                yield frame
        finally:
            inner.close()

    def record(self, prompt: str, settings: GenerationSettings | None = None, *,
               interventions: Any = (), states_dtype: str = "float16",
               on_frame: Callable[[Frame], None] | None = None) -> "Recording":
        """Run ``prompt`` to the end into a new recording with its metadata.

        Parameters
        ----------
        prompt, settings, interventions
            As for :meth:`frames`.
        states_dtype
            ``"float16"`` (half the size, about 1e-3 relative error) or
            ``"float32"`` (the engine's states bit for bit).
        on_frame
            Called with every frame as it is produced (progress, a summary).

        Returns
        -------
        Recording
            Its metadata holds the prompt, the settings with the seed actually
            used, the model's identity and the interventions: the run can be
            replayed (:func:`flyviz.record.replay.replay_recording`).
        """
        from flyviz.runs import Run, RunRequest

        # The run every host starts (flyviz.runs), stepped here to the end.
        return Run(self, RunRequest(prompt, settings, interventions,
                                    states_dtype=states_dtype)).record(on_frame)

    # ------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Stop the engine's worker threads; a later run builds a new engine."""
        self._run_serial += 1  # a run still open ends before its next token
        with self._engine_lock:
            engine, self._engine = self._engine, None
            backward, self._backward = self._backward, None
            comparison, self._comparison = self._comparison, None
        if comparison is not None:
            comparison.close()
        if engine is not None:
            engine.close()
        if backward is not None:
            backward.close()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<flyviz.Model {self.name!r}: {self.neurons:,} neurons, "
                f"{self.checkpoint.n_edges:,} synapses, spec {self.spec!r}>")


def record_prompt(checkpoint: Checkpoint, prompt: str, settings: GenerationSettings | None = None,
                  *, spec: str | None = None, states_dtype: str = "float16",
                  interventions: "ResolvedInterventions | Sequence[Any]" = ()) -> "Recording":
    """Run ``prompt`` through ``checkpoint`` (with ``interventions``) on a fresh engine
    into a :class:`Recording` with its metadata: :meth:`Model.record`
    on a model made for this one run.

    The settings are validated first, so a random seed is drawn here and
    stored, as are the interventions: the run can be replayed
    (:func:`flyviz.record.replay.replay_recording`).
    """
    with Model(checkpoint, spec=spec) as model:
        return model.record(prompt, settings, interventions=interventions,
                            states_dtype=states_dtype)


def as_model(model: "Model | Checkpoint | str | Path", **options: Any) -> tuple[Model, bool]:
    """``(model, owned)``: a :class:`Model` for a model, a checkpoint or a spec, and
    whether it was made here (then the caller closes it)."""
    if isinstance(model, Model):
        return model, False
    if isinstance(model, Checkpoint):
        return Model(model, **options), True
    if isinstance(model, (str, Path)):
        return Model.load(model, **options), True
    if hasattr(model, "neurons") and hasattr(model, "drawing_anatomy"):
        # A loaded model of another kind (a spiking brain): a model, just not a language
        # model. Known by what it has: record/ neither imports nor asks the kinds.
        raise InputError(f"{type(model).__name__} is a model of another kind, not a Fly LLM: "
                         "this needs flyviz.load(...)'s result, a checkpoint or a spec such as "
                         "'demo'; a spiking brain runs through flyviz.runs.Run(model, "
                         "RunRequest(...)) or flyviz.notebook.BrainWidget.live(model)")
    raise InputError(f"{type(model).__name__} is not a model: give flyviz.load(...)'s result, "
                     "a checkpoint, or a model spec such as 'demo'")
