"""The napari dock widget (npe2 command ``flyviz.brain_widget``): load a model, run it.

The model loads and the run runs on a worker thread (napari's ``thread_worker``,
then :class:`flyviz.runs.Runs`), so the viewer stays responsive; the finished run
becomes a new brain layer (:func:`flyviz.napari._layers.layer_data`) and the token
slider moves to its last token. A Fly LLM runs a prompt for some new tokens; a
spiking brain runs a stimulus, as the window's Stimulus dock says one: the neurons to
excite (a selection query; empty: the brain's own set) at a rate, the neurons silenced
(a query; empty: none), for a duration, over some trials pooled: the run the dock's
settings describe (:func:`flyviz.runs.request_for`), checked by them. The widget
also picks the colour quantity of the selected flyviz layer and shows the text at
the slider's token.
"""

from __future__ import annotations

from typing import Any

from napari.qt.threading import thread_worker
from qtpy.QtCore import QObject, Signal
from qtpy.QtWidgets import (QComboBox, QDoubleSpinBox, QFormLayout, QHBoxLayout, QLabel,
                            QLineEdit, QPushButton, QSpinBox, QVBoxLayout, QWidget)

from flyviz.brain_source import BrainSource
from flyviz.kinds.spiking import MAX_RATE_HZ, MAX_TRIALS, SPIKING_KEY, SpikingRunSettings
from flyviz.napari._layers import (METADATA_KEY, bind, layer_data, recolour, set_quantity,
                                   shown_token, text_layer)


def load_model(spec: str) -> Any:
    """The model ``spec`` names: a spiking brain's folder (the authors' layout, a ``.ct``
    brain, the MaleCNS 166k set: :func:`flyviz.spiking.brain.is_brain_folder`, the rule the
    window's Model box follows too) as that brain
    (:class:`~flyviz.kinds.spiking.SpikingModel`), else a Fly LLM (:func:`flyviz.load`)."""
    from flyviz.spiking.brain import is_brain_folder

    if is_brain_folder(spec):
        from flyviz.kinds.spiking import SpikingModel

        return SpikingModel.load(spec)
    import flyviz

    return flyviz.load(spec)


def add_source(viewer: Any, source: Any) -> list[Any]:
    """Add the layers of a viewer state (or its :class:`BrainSource`) to ``viewer``, bound to
    its token slider; returns the layers."""
    if not isinstance(source, BrainSource):
        source = BrainSource.from_state(source, source.model_name or "flyviz")
    bind(viewer)
    layers = []
    for data, kwargs, kind in layer_data(source):
        layers.append(getattr(viewer, f"add_{kind}")(data, **kwargs))
    if source.tokens and viewer.dims.ndim >= 4:
        axis = viewer.dims.ndim - 4
        step = list(viewer.dims.current_step)
        step[axis] = source.tokens - 1
        viewer.dims.current_step = tuple(step)
    recolour(viewer)
    return layers


class _Delivery(QObject):
    """Hands a run's reports from its engine's thread to this widget's (Qt's queued
    signals): what a :class:`~flyviz.runs.ThreadEngine` delivers through."""

    call = Signal(object, object)

    def __init__(self) -> None:
        super().__init__()
        self.call.connect(self._call)

    def deliver(self, callback: Any, *args: Any) -> None:
        self.call.emit(callback, args)

    def _call(self, callback: Any, args: Any) -> None:
        callback(*args)


#: The kinds whose runs the widget's stimulus fields describe (as the window's Stimulus dock).
STIMULUS_KINDS = (SPIKING_KEY,)


class FlyvizWidget(QWidget):
    """Load a Fly LLM (or a spiking brain), run a prompt (or a stimulus) into a new layer,
    choose the colours, read the token.

    Parameters
    ----------
    napari_viewer
        The viewer (napari passes it).
    """

    def __init__(self, napari_viewer: Any) -> None:
        super().__init__()
        self.viewer = napari_viewer
        self.model: Any = None
        self.worker: Any = None
        #: The runs of the Run button (:class:`flyviz.runs.Runs`), once one started.
        self.runs: Any = None
        self._delivery = _Delivery()
        self.model_spec = QLineEdit("demo")
        self.load_button = QPushButton("Load")
        self.prompt = QLineEdit("Once upon a time")
        self.max_new_tokens = QSpinBox()
        self.max_new_tokens.setRange(1, 4096)
        self.max_new_tokens.setValue(20)
        # A spiking brain's run: the Stimulus dock's query of the neurons to excite, and
        # its length (the dock's bins, here a duration as `flyviz simulate --duration`).
        self.excite = QLineEdit()
        self.excite.setPlaceholderText("the brain's own set (e.g. superclass:sensory)")
        self.excite.setToolTip("The neurons given Poisson input, as a selection query "
                               "(flyviz select --help)")
        self.duration = QDoubleSpinBox()
        self.duration.setDecimals(0)
        self.duration.setRange(1.0, 10_000_000.0)
        self.duration.setSingleStep(10.0)
        self.duration.setValue(1000.0)
        self.duration.setSuffix(" ms")
        self.duration.setToolTip("The run's length, in milliseconds of the fly's time")
        # The rest of the Stimulus dock's fields, at the same settings' defaults and bounds
        # (SpikingRunSettings checks each value, here as in the dock).
        defaults = SpikingRunSettings()
        self.rate = QDoubleSpinBox()
        self.rate.setDecimals(1)
        self.rate.setRange(0.1, MAX_RATE_HZ)
        self.rate.setValue(defaults.rate)
        self.rate.setSuffix(" Hz")
        self.rate.setToolTip("The Poisson rate of the excited neurons' input, Hz")
        self.silence = QLineEdit(defaults.silence)
        self.silence.setPlaceholderText("none (e.g. type:MN9)")
        self.silence.setToolTip("The neurons whose outgoing synapses are zeroed, as a "
                                "selection query (flyviz select --help)")
        self.trials = QSpinBox()
        self.trials.setRange(1, MAX_TRIALS)
        self.trials.setValue(defaults.trials)
        self.trials.setToolTip("Runs of the same stimulus pooled into each bin's rates")
        self.run_button = QPushButton("Run")
        self.quantity = QComboBox()
        self.status = QLabel("no model loaded")
        self.token_label = QLabel("")
        self.token_label.setWordWrap(True)

        row = QHBoxLayout()
        row.addWidget(self.model_spec)
        row.addWidget(self.load_button)
        form = QFormLayout()
        form.addRow("Model", row)
        form.addRow("Prompt", self.prompt)
        form.addRow("New tokens", self.max_new_tokens)
        form.addRow("Excite", self.excite)
        form.addRow("Rate", self.rate)
        form.addRow("Silence", self.silence)
        form.addRow("Duration", self.duration)
        form.addRow("Trials", self.trials)
        form.addRow("", self.run_button)
        form.addRow("Colour by", self.quantity)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.status)
        layout.addWidget(self.token_label)
        layout.addStretch(1)

        self.load_button.clicked.connect(lambda: self.load(self.model_spec.text()))
        self.run_button.clicked.connect(self._run_clicked)
        self.quantity.currentTextChanged.connect(self._quantity_chosen)
        self._show_fields(reads_text=True, stimulus=False)
        bind(self.viewer)
        self.viewer.dims.events.current_step.connect(self._show_token)
        self.viewer.layers.selection.events.active.connect(self._active_changed)
        self.viewer.layers.selection.events.active.connect(self._show_token)
        self.viewer.layers.events.inserted.connect(self._show_token)
        self.viewer.layers.events.inserted.connect(self._active_changed)
        self._active_changed()
        self._show_token()

    # ------------------------------------------------------------ model and runs
    def set_model(self, model: Any) -> None:
        """Use an already loaded model (what :func:`flyviz.load` returned, or a
        :class:`~flyviz.kinds.spiking.SpikingModel`: the prompt box is then off, its kind
        reads no prompt, and the stimulus fields are on)."""
        from flyviz.kinds import kind_of

        self.model = model
        kind = kind_of(model)
        self._show_fields(kind.reads_text, kind.shows(STIMULUS_KINDS))
        self.status.setText(f"model {model.name}: {model.neurons:,} neurons")

    def _show_fields(self, reads_text: bool, stimulus: bool) -> None:
        # The fields the loaded model's runs read are on; the others are off.
        self.prompt.setEnabled(reads_text)
        self.max_new_tokens.setEnabled(reads_text)
        for field in (self.excite, self.rate, self.silence, self.duration, self.trials):
            field.setEnabled(stimulus)

    def _run_clicked(self) -> None:
        # The box's text is the prompt of a kind that reads one; a spiking brain runs the
        # stimulus its fields say; any other kind its default run.
        from flyviz.kinds import kind_of

        kind = None if self.model is None else kind_of(self.model)
        if kind is not None and kind.shows(STIMULUS_KINDS):
            self.run_stimulus()
            return
        reads_text = kind is None or kind.reads_text
        self.run_prompt(self.prompt.text() if reads_text else None)

    def load(self, spec: str) -> Any:
        """Load the model ``spec`` on a worker thread; returns the started worker.

        A folder holding a spiking brain and no model (a ConnecTorch ``.ct`` brain, the
        MaleCNS 166k set) loads as that brain, as the window's model box opens it (it was
        refused as no language model); anything else is a Fly LLM (:func:`flyviz.load`).
        """
        self.status.setText(f"loading {spec}…")
        worker = thread_worker(load_model, start_thread=False)(spec.strip())
        worker.returned.connect(self.set_model)
        worker.errored.connect(self._failed)
        self.worker = worker
        worker.start()
        return worker

    def run_prompt(self, prompt: Any, max_new_tokens: int | None = None) -> Any:
        """Start the run of the loaded model that this widget describes, given ``prompt``
        (what the run reads; the model's kind makes the rest of the run: ``max_new_tokens``
        where it reads it; ``None``: the *New tokens* box's), on a worker thread, into a new
        brain layer when it ends; returns its :class:`flyviz.runs.Runs` (``None`` when it
        cannot start, said in the status: a prompt given a spiking brain, ``max_new_tokens``
        that is not a whole number from 1, such as ``2.5`` or ``"3"``, which is refused, not
        rounded)."""
        from flyviz.errors import FlyvizError
        from flyviz.runs import Run, request_for

        if self.model is None:
            self.status.setText("load a model first")
            return None
        model = self.model
        # Only None means the box: 0 or 2.5 is checked (and refused) as flyviz.run does.
        count = self.max_new_tokens.value() if max_new_tokens is None else max_new_tokens
        try:
            run = Run(model, request_for(model, prompt, max_new_tokens=count))
        except FlyvizError as exc:
            self._failed(exc)
            return None
        return self._launch(run, str(prompt or "run"))

    def run_stimulus(self, excite: str | None = None, duration_ms: Any = None, *,
                     rate: Any = None, silence: str | None = None, trials: Any = None) -> Any:
        """Start a spiking brain's run: the neurons ``excite`` selects (a selection query,
        ``"superclass:sensory"``; ``""``: the brain's own set; ``None``: the *Excite* box's)
        given Poisson input at ``rate`` Hz (``None``: the *Rate* box's) for ``duration_ms``
        milliseconds (``None``: the *Duration* box's), in the brain's bins, the neurons
        ``silence`` selects silenced (their outgoing synapses zeroed; ``""``: none;
        ``None``: the *Silence* box's), ``trials`` runs pooled (``None``: the *Trials*
        box's); the run the window's Stimulus dock starts of the same settings
        (:class:`~flyviz.kinds.spiking.SpikingRunSettings`, through
        :func:`flyviz.runs.request_for`), on a worker thread, into a new brain layer when it
        ends. Returns its :class:`flyviz.runs.Runs`, or ``None`` when it cannot start, said
        in the status: no spiking brain loaded, a bad query, a duration that is not a
        positive whole number of bins (15 ms in 10 ms bins is refused, not rounded), a rate
        or a number of trials the settings refuse (0 Hz, 2.5 trials)."""
        import math

        from flyviz.errors import FlyvizError, InputError
        from flyviz.kinds import kind_of
        from flyviz.runs import Run, request_for

        if self.model is None:
            self.status.setText("load a model first")
            return None
        model = self.model
        kind = kind_of(model)
        given = self.excite.text() if excite is None else excite
        ms = self.duration.value() if duration_ms is None else duration_ms
        hz = self.rate.value() if rate is None else rate
        silenced = self.silence.text() if silence is None else silence
        pooled = self.trials.value() if trials is None else trials
        try:
            if not kind.shows(STIMULUS_KINDS):
                raise InputError(f"a {kind.title} runs no stimulus; give it a prompt")
            for what, text in (("to excite", given), ("to silence", silenced)):
                if not isinstance(text, str):
                    raise InputError(f"the neurons {what} are a selection query (text), "
                                     f"not {text!r}")
            query = given.strip()
            if isinstance(ms, bool) or not isinstance(ms, (int, float)) \
                    or not math.isfinite(ms) or ms <= 0:
                raise InputError(f"the duration must be a positive number of milliseconds, "
                                 f"not {ms!r}")
            # Whole bins, as the Stimulus dock counts them: 15 ms is refused, not rounded.
            bin_ms = float(kind.new_run_settings().bin_ms)
            bins = int(round(float(ms) / bin_ms))
            if bins < 1 or abs(bins * bin_ms - float(ms)) > 1e-6 * bin_ms:
                raise InputError(f"the duration {float(ms):g} ms is not a whole number of "
                                 f"{bin_ms:g} ms bins")
            # The rate and the trials are checked where the dock's are: by the settings
            # (request_for sets them there), one line for a value they refuse.
            run = Run(model, request_for(model, kind_settings={
                "excite": query, "rate": hz, "silence": silenced.strip(), "bins": bins,
                "trials": pooled}))
        except FlyvizError as exc:
            self._failed(exc)
            return None
        return self._launch(run, query or "run")

    def _launch(self, run: Any, name: str) -> Any:
        """Run ``run`` through a :class:`flyviz.runs.Runs` of its own, into a layer named
        ``name`` when it ends; returns the runs."""
        from flyviz.runs import Runs, ThreadEngine
        from flyviz.viewer.state import ViewerState

        model = run.model
        state = ViewerState()
        state.set_model(model)
        runs = Runs(state)
        runs.engine = ThreadEngine(runs, self._delivery.deliver)
        names = state.kind.time_axis.names
        runs.events.frame.connect(lambda n: self.status.setText(f"running: {n} {names}"))
        runs.events.failed.connect(lambda message: self.status.setText(f"flyviz: error: {message}"))

        def ended(reason: str, _frames: int) -> None:
            self.run_button.setEnabled(True)
            if reason != "failed":
                self._add_run(run.recording, name)

        runs.events.ended.connect(ended)
        self.run_button.setEnabled(False)
        self.runs = runs
        runs.launch(run)
        return runs

    def _add_run(self, recording: Any, said: str) -> None:
        name = said.strip()[:24] or "run"
        # Placed as every host places a recording's neurons, with the line that says when
        # they are a stand-in (a brain without somata on a ball, a model on a graph layout).
        source = BrainSource.of_recording(recording, self.model, name)
        add_source(self.viewer, source)
        said = f"{name}: {len(recording)} {source.state.kind.time_axis.names}"
        self.status.setText(said if source.note is None else f"{said}; {source.note}")

    def _failed(self, exc: BaseException) -> None:
        # Errors a user can fix are one line; show it where the user looks.
        self.status.setText(f"flyviz: error: {exc}")

    # ------------------------------------------------------------ colours and text
    def _active_flyviz_layer(self) -> Any:
        layer = self.viewer.layers.selection.active
        if layer is not None and isinstance(layer.metadata.get(METADATA_KEY), dict) \
                and layer.metadata[METADATA_KEY].get("role") == "points":
            return layer
        return None

    def _active_changed(self, event: Any = None) -> None:
        layer = self._active_flyviz_layer()
        self.quantity.blockSignals(True)
        self.quantity.clear()
        if layer is not None:
            info = layer.metadata[METADATA_KEY]
            self.quantity.addItems(list(info["source"].quantities))
            if info.get("quantity"):
                self.quantity.setCurrentText(info["quantity"])
        self.quantity.blockSignals(False)

    def _quantity_chosen(self, quantity: str) -> None:
        layer = self._active_flyviz_layer()
        if layer is None or not quantity:
            return
        set_quantity(layer, quantity)
        recolour(self.viewer)

    def _show_token(self, event: Any = None) -> None:
        # The words of the layer the canvas's corner speaks for (the selected recording).
        token = shown_token(self.viewer)
        layer = text_layer(self.viewer, token)
        self.token_label.setText("" if layer is None
                                 else layer.metadata[METADATA_KEY]["source"].token_text(token))
