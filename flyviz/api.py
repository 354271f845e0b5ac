"""The functions of flyviz's public API: :func:`load`, :func:`run`, :func:`compare`,
:func:`trace`, :func:`export_movie`.

They are re-exported by the package, so a script or a notebook needs only
``import flyviz``::

    import flyviz

    model = flyviz.load("demo")
    recording = flyviz.run(model, "Once upon a time", max_new_tokens=20)
    recording.save("run.flyrec")
    flyviz.export_movie(recording, "run.mp4", model=model)

Everything here runs through :class:`flyviz.record.runner.Model`, the same
path as the command line and the app. Importing this module loads NumPy and
the model code but no Qt and no vispy; :func:`export_movie` imports the
offscreen renderer (vispy) when it is called.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flyviz.errors import InputError, RecordingError

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.analysis.importance import ImportanceRun
    from flyviz.model.checkpoint import Checkpoint
    from flyviz.model.explain import Attribution
    from flyviz.record.recording import Recording
    from flyviz.record.runner import Model
    from flyviz.viewer.state import ViewerState

__all__ = ["causal_trace", "compare", "export_movie", "importance", "load", "run", "trace"]


def load(spec: str | Path, dataset: str | Path | None = None, *,
         progress: Callable[[str, float], None] | None = None, kernel: str | None = None,
         threads: int | None = None) -> "Model":
    """Load a Fly LLM: its checkpoint, tokenizer and anatomy, ready to run.

    Parameters
    ----------
    spec
        ``"demo"`` (the embedded demo brain, offline), a model folder (any of
        the three released layouts), or a Hugging Face repo id such as
        ``"ngxson/fly-llm-hf"`` or ``"fernandofernandes/fly-wordbrain-rank64"``
        (downloaded once into the hub's cache; ``owner/name@revision/sub``
        picks a revision and subfolder).
    dataset
        The connectome dataset folder (fernandofernandes/fly-connectome-49k)
        to join fly-wordbrain weights or a web export to; for ngxson's
        checkpoint it adds soma positions. Default: a ``dataset`` folder next
        to the model, or the hub's.
    progress
        Called as ``progress(label, fraction)`` while downloading and loading.
    kernel
        Sparse kernel of the engine: ``"scipy"``, ``"llvm"`` or ``None``
        (``FLYVIZ_KERNEL``, else scipy). Both give bit-identical results.
    threads
        Threads of the engine's sparse product (default: usable cores, max 4).

    Returns
    -------
    Model
        ``model.checkpoint`` (weights and graph), ``model.tokenizer``,
        ``model.anatomy`` (soma positions and labels, or ``None``),
        ``model.neurons``; its engine is built on the first run and reused.

    Raises
    ------
    flyviz.errors.ModelNotFoundError
        Nothing found locally, in the cache or on the hub: the message says
        which files to download by hand.
    flyviz.errors.CheckpointError
        The files are found but damaged or inconsistent.
    flyviz.errors.FileAccessError
        A path that cannot be read (a name too long, no permission).

    Examples
    --------
    >>> model = flyviz.load("demo")                                  # doctest: +SKIP
    >>> model.neurons
    49393
    """
    from flyviz.fileio import os_error
    from flyviz.record.runner import Model

    try:
        return Model.load(spec, dataset, progress=progress, kernel=kernel, threads=threads)
    except OSError as exc:  # a name too long, no permission, ...: one flyviz error
        raise os_error(exc, action="read") from None


def run(model: "Model | Checkpoint | str | Path", prompt: str, *, max_new_tokens: int = 80,
        min_new_tokens: int = 0, temperature: float = 0.0, top_p: float = 1.0, seed: int | None = None,
        top_k: int = 10, interventions: Any = (), states_dtype: str = "float16") -> "Recording":
    """Run a prompt and record the whole brain after every token.

    Parameters
    ----------
    model
        What :func:`load` returned (its engine is reused), or a model spec
        such as ``"demo"`` (loaded for this call only).
    prompt
        Text to continue, a ``str`` (BOS is added where the model's tokenizer has
        one; FlyGPT's has none); bytes or a number are refused rather than run as
        the text of their ``repr``.
    max_new_tokens
        Stop after this many generated tokens, a whole number of at least 1
        (EOS stops earlier where the model has one; FlyGPT has none). There is no
        0: the last prompt token's frame is the one that picks the first new token.
    min_new_tokens
        Do not end at the end-of-text token before this many generated tokens (it
        is not chosen until then), to go on where the model would stop; no effect
        on a model with no end-of-text token.
    temperature
        Sampler temperature; ``0`` is greedy.
    top_p
        Nucleus sampling: draw from the smallest set of tokens whose probabilities
        add up to ``top_p`` (``1.0`` keeps them all).
    seed
        The sampler's seed; ``None`` draws one, which the recording stores so the
        run can be replayed.
    top_k
        How many next-token candidates each frame keeps.
    interventions
        Applied during this run: objects of :mod:`flyviz.model.interventions`
        (``flyviz.Silence("sign:inhibitory")``, ``flyviz.Clamp("type:KC*",
        0.5, start=10)``, ...) or their command-line text (``"silence
        sign:inhibitory@10:"``, ``"cut superclass:visual_projection->all"``).
    states_dtype
        ``"float16"`` (half the size, about 1e-3 relative error) or
        ``"float32"`` (the engine's states bit for bit, for analysis).

    Returns
    -------
    Recording
        One frame per consumed token: ``recording.states()`` is a
        (tokens × neurons) float32 array, ``recording.token_ids``,
        ``recording.token_texts``, ``recording.probabilities``,
        ``recording.text``; ``recording.save(path)`` writes a ``.flyrec``,
        ``recording.to_xarray(model)`` a labelled dataset.

    Raises
    ------
    flyviz.errors.InputError
        For an empty prompt or one that is not a ``str``, an out-of-range or
        mistyped setting, a bad intervention.

    Examples
    --------
    >>> recording = flyviz.run(model, "Once upon a time", max_new_tokens=20)  # doctest: +SKIP
    >>> recording.states().shape                                             # doctest: +SKIP
    (24, 49393)
    """
    from flyviz.arguments import choice
    from flyviz.record.recording import STATE_DTYPES
    from flyviz.record.run import GenerationSettings
    from flyviz.record.runner import as_model

    settings = GenerationSettings(max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                                  temperature=temperature, top_p=top_p, seed=seed,
                                  top_k=top_k).validate()
    choice("states_dtype", states_dtype, STATE_DTYPES)
    runner, owned = as_model(model)
    try:
        return runner.record(prompt, settings, interventions=interventions,
                             states_dtype=states_dtype)
    finally:
        if owned:
            runner.close()


def compare(model: "Model | Checkpoint | str | Path", prompt: str, interventions: Any, *,
            max_new_tokens: int = 80, temperature: float = 0.0, top_p: float = 1.0,
            seed: int | None = None, record: str | Path | None = None,
            states_dtype: str = "float16") -> dict[str, Any]:
    """Run the untouched and the intervened model on one prompt and compare them.

    Parameters
    ----------
    model, prompt, max_new_tokens, temperature, top_p, seed
        As for :func:`run`; both runs use the same settings and seed.
    interventions
        At least one, in the forms :func:`run` accepts.
    record
        A path: the teacher-forced comparison is also saved there as a comparison
        recording (a ``.flyrec`` holding both runs, as ``flyviz compare --record`` writes
        it; ``flyviz.Recording.load(path).baseline`` is the untouched run), and the result
        then has ``recording``, the path written. Checked before any work.
    states_dtype
        As for :func:`run`: the precision of the states ``record`` stores.

    Returns
    -------
    dict
        What ``flyviz compare --json`` prints: ``baseline`` and ``intervened``
        (the two free-running continuations, each with ``tokens``, ``text``,
        ``steps``, ``seed``), ``parted_at`` (the first generated token where
        they differ, or ``None``), ``interventions`` (with what each
        selected) and ``forced``: per generated token of the untouched run,
        the KL divergence of the intervened model's next-token distribution
        when it reads the same tokens, both top-1 tokens and the mean |Δx|;
        with ``record``, ``recording`` (the path written).
        See :mod:`flyviz.record.compare` for token-by-token comparisons.

    Raises
    ------
    flyviz.errors.FileAccessError
        A ``record`` path that cannot be written (before the model runs).
    """
    from flyviz.arguments import choice
    from flyviz.model.interventions import as_interventions
    from flyviz.record.compare import compare as compare_runs
    from flyviz.record.recording import STATE_DTYPES
    from flyviz.record.run import GenerationSettings
    from flyviz.record.runner import as_model

    settings = GenerationSettings(max_new_tokens=max_new_tokens, temperature=temperature,
                                  top_p=top_p, seed=seed).validate()
    choice("states_dtype", states_dtype, STATE_DTYPES)
    chosen = as_interventions(interventions)  # both checked before a model is loaded
    if record is not None:
        from flyviz.fileio import check_output_path

        # A path that cannot be written fails now, not after both runs.
        check_output_path(record, "record", probe=True)
    runner, owned = as_model(model)
    try:
        return compare_runs(runner.checkpoint, prompt, chosen, settings,
                            threads=runner.threads, kernel=runner.kernel_request,
                            record=record, spec=runner.spec,
                            states_dtype=states_dtype)
    finally:
        if owned:
            runner.close()


def trace(model: "Model | Checkpoint | str | Path", prompt_or_recording: "str | Recording | Path",
          position: int | None = None, target: int | str | None = None,
          versus: int | str | None = None, window: int | None = 128,
          mode: str = "decomposition", interventions: Any = (),
          patch_source: Any = None) -> "Attribution":
    """Why this token? Split one logit into what the earlier tokens, neurons and synapses
    brought, exactly.

    The explained value at ``position`` is ``L = logit[target] - mean(logits)``
    (or ``logit[target] - logit[versus]``). With every neuron's tanh gain
    ``tanh(u)/u`` and the LayerNorm scale frozen at the run's values, one
    backward sweep through the connectome (one sparse product with ``W^T``
    per step) splits ``L`` into the flows of the input tokens, the padding,
    the biases (and any stimulation or clamp), which add up to ``L``.

    Parameters
    ----------
    model
        What :func:`load` returned (its engines are reused), a checkpoint or a
        spec such as ``"demo"`` (loaded for this call only).
    prompt_or_recording
        A prompt (a ``str``, BOS is added where the tokenizer has one), a :class:`Recording` or the
        :class:`pathlib.Path` of a saved one (traced teacher-forced on its own
        tokens, with its interventions; it must come from this model). A
        ``str`` that names an existing file is refused: pass its ``Path``.
    position
        The step explained (0 is BOS); default: the last prompt token, whose
        prediction is the first generated token.
    target
        A token id or a one-token text (``" Lily"``); default: the token
        chosen there.
    versus
        Explain ``logit[target] - logit[versus]``.
    window
        Sweep back only this many steps (default 128,
        :data:`flyviz.model.explain.DEFAULT_WINDOW`; ``None``: the whole run);
        what the state before the window carries is
        :attr:`Attribution.earlier_flow`. Over longer windows the flows stop
        adding up: the result's ``complete`` is then False, with an
        :class:`~flyviz.model.explain.IncompleteAttributionWarning`.
    mode
        ``"decomposition"`` (exact flows that add up) or ``"gradient"``
        (``dL/dx_t`` with the true ``sech^2``: a sensitivity).
    interventions
        Applied to a prompt's run, in the forms :func:`run` accepts (a patch's
        source must have the prompt's length, unless aligned from the end).
    patch_source
        For a recording made with patches from another recording (whose states
        it does not store): that recording, or the source prompt.

    Returns
    -------
    Attribution
        ``.value``, ``.token_flows``, ``.pad_flow``, ``.bias_flow``,
        ``.constant``, ``.completeness_error``, ``.complete`` (False when the
        flows do not add up), ``.holding_window()``, ``.node_flows()`` (position ×
        neuron), ``.group_flows(by="superclass"|"cell_type"|"side")``,
        ``.edge_flows(neuron)``, ``.graph(nodes=500)``, ``.to_json()``,
        ``.to_circuit_tracer_json()``, ``.to_xarray(model)``.

    Raises
    ------
    flyviz.errors.InputError
        A position outside the run, a target that is not one token, an empty
        window, an unknown mode, a window that would not fit in the memory
        available.
    flyviz.errors.RecordingError
        A recording made with another model.

    Examples
    --------
    >>> why = flyviz.trace(model, "there was a little girl named")     # doctest: +SKIP
    >>> why.target_text, round(why.value, 2)                            # doctest: +SKIP
    """
    from flyviz.record.runner import as_model
    from flyviz.record.trace import trace as trace_run

    if isinstance(prompt_or_recording, str):
        from flyviz.arguments import text_not_a_path

        text_not_a_path("prompt_or_recording", prompt_or_recording, "to trace the saved recording")
    else:
        from flyviz.record.recording import Recording

        if isinstance(prompt_or_recording, (Recording, os.PathLike)):
            from flyviz.kinds import refuse_without_tokens

            # A spiking brain's recording holds bins, not tokens (checked here: the record
            # layer below does not know the kinds).
            given = prompt_or_recording
            recording = given if isinstance(given, Recording) else Recording.load(given)
            name = "the recording" if isinstance(given, Recording) else Path(given).name
            refuse_without_tokens(recording, name,
                                  "trace explains a language model's choice of a token")
            prompt_or_recording = recording
    runner, owned = as_model(model)
    try:
        return trace_run(runner, prompt_or_recording, position=position, target=target,
                         versus=versus, window=window, mode=mode, interventions=interventions,
                         patch_source=patch_source)
    finally:
        if owned:
            runner.close()


def importance(model: "Model | Checkpoint | str | Path",
               text: "str | Path | Sequence[str | Path]",
               by: "str | Path | dict[str, str] | None" = "superclass", *,
               max_tokens: int | None = None, context: int = 512,
               out: str | Path | None = None, workers: int = 0, scheduler: str | None = None,
               resume: bool = False) -> "ImportanceRun":
    """Estimated lesions: what silencing each neuron would cost a text, to first order.

    For every neuron ``i``, ``ΔCE_est(i) = sum_t (0 - x_i(t)) dCE/dx_i(t)``
    (nats/token): the rise of the text's mean next-token cross-entropy if the
    neuron's state were 0 after every step, from one teacher-forced forward
    pass and one backward sweep (the true gradient) per window. A group's
    estimate is the sum over its neurons. The text is read as ``flyviz sweep``
    reads it, so the estimate can be set beside the exact lesion map
    (``flyviz sweep --estimate`` measures how well it ranks the groups).

    Parameters
    ----------
    model
        What :func:`load` returned (its engines are reused in this process),
        a checkpoint or a spec such as ``"demo"``.
    text
        The text itself (a ``str``; blank lines separate documents), or a
        :class:`pathlib.Path` of a text, JSON Lines or Parquet file or a folder
        of them, or a list of such texts and paths. A ``str`` is never read as
        a file's name: one that names an existing file is refused (pass
        ``Path("heldout.txt")`` to read it).
    by
        Groups to sum over: ``"superclass"``, ``"type"``, ``"side"``, a groups
        file (``NAME: QUERY`` lines), a ``{name: query}`` dict, or ``None``.
    max_tokens, context
        Read at most this many tokens, counting each window's BOS (as
        ``--max-tokens`` does); the longest window (BOS included).
    out
        Also write the lesion-map file (``.csv``/``.parquet``), the per-neuron
        table and the Zarr array (see :mod:`flyviz.analysis.importance`).
    workers, scheduler, resume
        ``workers=0`` (default) runs here; ``N`` local Dask processes or a
        scheduler address need ``model`` to be loadable from its spec.

    Returns
    -------
    ImportanceRun
        ``.estimate`` (one float64 per neuron), ``.rows`` (the groups, largest
        first), ``.baseline_cross_entropy``, ``.positions``, ``.paths``.

    Raises
    ------
    flyviz.errors.InputError
        An empty text, a ``str`` that names an existing file, a missing file,
        a bad setting.

    Examples
    --------
    >>> est = flyviz.importance(model, "Once upon a time, there was a girl.")   # doctest: +SKIP
    >>> est.rows[0].group, est.estimate.argmax()                                # doctest: +SKIP
    >>> est = flyviz.importance(model, Path("heldout.txt"), max_tokens=2000)    # doctest: +SKIP
    """
    import tempfile

    from flyviz.analysis.corpus import build_corpus
    from flyviz.analysis.importance import importance_groups, run_importance
    from flyviz.record.runner import as_model

    settings, max_tokens, workers = _importance_arguments(text, max_tokens, context, workers)
    if out is not None:
        from flyviz.fileio import check_not_input

        # a str is the text itself; only the Paths name files read
        files = [t for t in ([text] if isinstance(text, (str, Path)) else text)
                 if isinstance(t, Path)]
        check_not_input(out, {"text": files, "by": by if isinstance(by, (str, Path)) else None},
                        "out")
    runner, owned = as_model(model)
    try:
        ckpt = runner.checkpoint
        groups = importance_groups(ckpt, by)
        with tempfile.TemporaryDirectory(prefix="flyviz-importance-") as folder:
            paths: list[str | Path] = []
            for number, item in enumerate([text] if isinstance(text, (str, Path)) else text):
                if isinstance(item, str):  # the text itself, read as a text file is read
                    written = Path(folder) / f"text-{number:06d}.txt"
                    written.write_text(item, encoding="utf-8")
                    item = written
                paths.append(item)
            corpus = build_corpus(paths, runner.tokenizer, context=settings.context,
                                  max_tokens=max_tokens, bos_token_id=ckpt.config.bos_token_id)
        in_process = workers == 0 and scheduler is None
        return run_importance(None if in_process else runner.spec, ckpt, corpus, groups, out,
                              settings, by="" if isinstance(by, dict) or by is None else str(by),
                              workers=workers, scheduler=scheduler, resume=resume,
                              engines=(runner.engine, runner.backward) if in_process else None)
    finally:
        if owned:
            runner.close()


def _importance_arguments(text: Any, max_tokens: Any, context: Any, workers: Any
                          ) -> "tuple[Any, int | None, int]":
    """:func:`importance`'s arguments checked before any work: the settings, ``max_tokens``
    and ``workers`` (one :class:`InputError` naming the argument at fault)."""
    from flyviz.analysis.cluster import MAX_WORKERS
    from flyviz.analysis.importance import ImportanceSettings
    from flyviz.arguments import shown, text_not_a_path, whole_number
    from flyviz.model.tokenizer import check_unicode

    if isinstance(text, (str, Path)):
        items, names = [text], ["text"]
    elif isinstance(text, (list, tuple)) and text \
            and all(isinstance(item, (str, Path)) for item in text):
        items, names = list(text), [f"text[{i}]" for i in range(len(text))]
    else:
        raise InputError(f"text must be the text itself (a str), a pathlib.Path of text, "
                         f"JSON Lines or Parquet files, or a list of them, not {shown(text)}")
    for item, name in zip(items, names):
        if isinstance(item, str):
            if not item.strip():
                raise InputError(f"{'the text' if name == 'text' else name} is empty; give "
                                 "some text or a file's pathlib.Path")
            check_unicode(item, "the text")
            text_not_a_path(name, item, "to read the file")
    settings = ImportanceSettings(context=whole_number("context", context, 2, 1 << 20))
    return (settings.validate(),
            None if max_tokens is None else whole_number("max_tokens", max_tokens, 1),
            whole_number("workers", workers, 0, MAX_WORKERS))


def export_movie(recording: "Recording | ViewerState | str | Path", path: str | Path, *,
                 model: "Model | None" = None,
                 progress: Callable[[int, int], None] | None = None,
                 gl: str | None = None, **options: Any) -> Path:
    """Render a recording as a movie (MP4, WebM, GIF) or a folder of PNG frames.

    Works without a display (EGL, else a display such as Xvfb, else OSMesa).

    Parameters
    ----------
    recording
        A :class:`~flyviz.record.recording.Recording`, or the path of a saved
        one, or a :class:`~flyviz.viewer.state.ViewerState`: then the movie
        shows what the state shows (its model, recording, colours, display
        settings and camera; ``model`` is not given, and ``mode``, ``scale``,
        ``point_size`` and ``glow`` are the state's).
    path
        ``run.mp4`` (H.264), ``run.webm`` (VP9), ``run.gif``, or a name
        without an extension for a folder of PNG frames.
    model
        The model the recording was made with (what :func:`load` returned):
        its anatomy places the neurons. Without it (the recording only names
        its model; nothing is loaded behind your back) the neurons are spread
        on a generic ball and a warning says so.
    progress
        Called after every frame as ``progress(frames_done, frames_total)``.
    gl
        The OpenGL to render with: ``"egl"`` (no display needed),
        ``"default"`` (vispy's usual backend, Qt, needs a display),
        ``"osmesa"``, or ``None``/``"auto"``: the environment variable
        ``FLYVIZ_OFFSCREEN_GL``, else the first that works, in that order.
    **options
        Any field of :class:`flyviz.export.ExportOptions`: ``size`` (``(w,
        h)`` or ``"1280x720"``), ``fps`` (30), ``frames_per_token`` (6),
        ``quality`` (encoder CRF), ``orbit`` (degrees per second), ``mode``
        (``"signed"`` or ``"abs"``), ``view`` (``"front"``, ``"top"``,
        ``"side"``), ``scale`` (end of the colour range), ``start``/``stop``
        (frames), ``overlays``, ``hold_seconds``, ``speed`` (x264 preset).

    Returns
    -------
    pathlib.Path
        The file or folder written (atomically: nothing is left under its
        name if the export fails).

    Raises
    ------
    flyviz.errors.ExportError
        For a bad option, an unwritable path or an encoder failure.
    flyviz.errors.RecordingError
        When the recording cannot be read, or ``model`` has another number of
        neurons.
    """
    import dataclasses

    from flyviz.arguments import loaded_model
    from flyviz.export import ExportOptions, export_recording, movie_format
    from flyviz.record.recording import Recording

    fields = {f.name for f in dataclasses.fields(ExportOptions)}
    unknown = sorted(set(options) - fields)
    if unknown:
        raise InputError(f"export_movie got unknown option(s) {', '.join(unknown)}; the options "
                         f"are {', '.join(sorted(fields))}")
    if isinstance(options.get("size"), str):
        from flyviz.render.offscreen import parse_size

        options["size"] = parse_size(options["size"])
    export_options = ExportOptions(**options).validate()
    export_options.crf(movie_format(path))  # a bad quality fails before any rendering
    from flyviz.render.gl_backend import requested_backend

    requested_backend(gl)  # and so does an unknown OpenGL
    if not isinstance(recording, (Recording, str, Path)):
        from flyviz.viewer.state import ViewerState

        if isinstance(recording, ViewerState):
            if model is not None:
                raise InputError("export_movie of a viewer state takes its model from the state "
                                 "(state.set_model); leave model= out")
            from flyviz.export import export_state

            if "view" not in options:
                export_options = dataclasses.replace(export_options, view=recording.view)
            return export_state(recording, path, export_options, progress=progress, gl=gl)
    loaded_model("model", model)    # "demo" failed in AttributeError: 'str' ... 'neurons'
    if not isinstance(recording, Recording):
        recording = Recording.load(recording)
    if model is not None and model.neurons != recording.neurons:
        raise RecordingError(f"the recording has {recording.neurons:,} neurons but "
                             f"{model.name} has {model.neurons:,}; pass the model it was "
                             "recorded with")
    from flyviz.viewer.layers import drawing_anatomy

    placement = drawing_anatomy(model, recording.neurons, "export_movie",
                                missing="no model was given (pass model=flyviz.load(...) to "
                                        "draw the neurons where they are)")
    if placement.note is not None:
        warnings.warn(placement.note, stacklevel=2)
    return export_recording(recording, placement.anatomy, path, export_options,
                            progress=progress, gl=gl)


def causal_trace(model: "Model | Checkpoint | str | Path", clean: str, corrupt: str,
                 answer: str, *, by: Any = "superclass", positions: "str | tuple[int, int] | None" = None,
                 window: int = 1, align: str = "start", versus: str | None = None,
                 out: str | Path | None = None, workers: int = 0, scheduler: str | None = None,
                 batch: int = 64) -> Any:
    """Causal tracing: restore each group of neurons, at each position, to the clean run's
    state while the corrupted prompt runs, and measure how much of the answer comes back.

    Parameters
    ----------
    model
        What :func:`load` returned, a checkpoint, or a spec such as ``"demo"``.
    clean, corrupt
        The two prompts (the same length in tokens, unless ``align="end"``).
    answer
        The clean answer: one token, e.g. ``" She"``.
    by
        The groups: ``"superclass"``, ``"type"``, ``"side"``, the path of a
        file of ``NAME: QUERY`` lines, or a mapping ``{name: query}``.
    positions
        ``"A:B"`` or ``(A, B)``: the corrupted positions to restore at
        (default all; 0 is BOS).
    window
        Positions restored per cell, from its position on.
    align
        ``"start"`` or ``"end"``.
    versus
        The token the logit difference is taken against (default: the
        corrupted run's most likely token).
    out
        Also keep the result file (``.csv`` or ``.parquet``); by default it is
        written to a temporary folder and removed.
    workers, scheduler
        ``workers=0`` (the default) computes in this process; ``N`` starts a
        local Dask cluster, ``scheduler`` uses a running one (workers load the
        model from its spec).
    batch
        Cells stepped together per pass of the batched engine.

    Returns
    -------
    flyviz.analysis.causal.CausalTrace
        ``trace.grid("p_answer")`` is a (positions x groups) array,
        ``trace.groups``, ``trace.token_labels()``, ``trace.references``;
        ``trace.rows`` the cells. See :mod:`flyviz.analysis.causal`.

    Raises
    ------
    flyviz.errors.InputError
        Prompts of different lengths aligned from the start, an answer that
        is not one token, an empty group, bad positions.

    Examples
    --------
    >>> trace = flyviz.causal_trace(model, "Once upon a time, there was a little girl named Lily.",
    ...                             "Once upon a time, there was a little boy named Tom.",
    ...                             " She", versus=" He")                  # doctest: +SKIP
    """
    import tempfile

    from dataclasses import replace

    from flyviz.analysis.causal import TraceSettings, run_causal_trace
    from flyviz.analysis.cluster import MAX_WORKERS
    from flyviz.analysis.importance import importance_groups
    from flyviz.arguments import whole_number
    from flyviz.record.runner import as_model

    settings = TraceSettings(streams=whole_number("batch", batch, 1, 4096),
                             window=whole_number("window", window, 1, 1 << 20)).validate()
    workers = whole_number("workers", workers, 0, MAX_WORKERS)
    if by is None:
        raise InputError("by=None names no group to patch; give a label kind, a groups "
                         "file or {name: query, ...}")
    runner, owned = as_model(model)
    try:
        ckpt = runner.checkpoint
        groups = importance_groups(ckpt, by)
        settings = replace(settings, kernel=runner.kernel_request)
        with tempfile.TemporaryDirectory(prefix="flyviz-trace-") as folder:
            path = Path(out) if out is not None else Path(folder) / "trace.csv"
            result = run_causal_trace(runner.spec, ckpt, clean, corrupt, answer, groups, path,
                                      settings, positions=positions, align=align,
                                      versus=versus, by=str(by) if not isinstance(by, dict)
                                      else "", workers=workers, scheduler=scheduler)
        return result.trace
    finally:
        if owned:
            runner.close()
