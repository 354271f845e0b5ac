"""The spiking brain's kind: Shiu et al.'s LIF model shown in bins of milliseconds.

:class:`SpikingKind` (:data:`SPIKING`) is the second kind of model flyviz shows
(:mod:`flyviz.kinds`). Its models are :class:`SpikingModel` objects (a
:class:`~flyviz.spiking.brain.SpikingBrain` with what the viewer reads: ``neurons``,
``name``, ``drawing_anatomy()``, ``kind``); a run's request is a :class:`Stimulus`
(which neurons get Poisson input, at what rate, which are silenced: selection
queries); its settings a :class:`BinSettings` (how long a bin is, how many).

A frame is one bin and its state is **each neuron's firing rate in that bin, in
Hz** (spikes in the bin over the bin's length and the trials). Rates rather than
spikes decayed with a 15 ms time constant: a bin's rate is what the authors'
analysis reports and reads in Hz on the colour bar, each bin stands alone (no
hidden smoothing constant, scrubbing to a bin shows that bin's spikes and nothing
of the bins before it), and a recording of rates sums back to the run's spike
counts exactly. The side channel is the bin's **spike count** (:data:`SPIKES`),
kept per bin in the recording's metadata (``spiking.bin_spikes``, all trials together)
and said in the captions (per trial, their mean, for a run of several). The spikes themselves, each at its tick (0.1 ms), are kept beside the
frames (:attr:`Recording.spikes <flyviz.record.recording.Recording.spikes>`, a
:class:`~flyviz.record.spikes.SpikeLog`) by a live run and by ``flyviz simulate
--record``: what the Spiking populations dock's raster draws.

A recording of a spiking run says ``"kind": "spiking"`` in its metadata, and the
brain it ran on in ``spiking.brain``; :func:`flyviz.kinds.kind_of_recording`
reads the first, :meth:`SpikingKind.recording_anatomy` the second.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from psygnal import SignalGroupDescriptor

from flyviz.errors import InputError
from flyviz.kinds import ModelDescription, ModelKind, SideChannel, TimeAxis, Wiring, state_frame

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.checkpoint import Anatomy
    from flyviz.record.frame import Frame
    from flyviz.record.recording import Recording
    from flyviz.record.spikes import SpikeLog
    from flyviz.render.overlay_content import OverlayContent
    from flyviz.runs import RunRequest
    from flyviz.spiking.brain import SpikingBrain
    from flyviz.viewer.layers import LayerKind
    from flyviz.viewer.settings import RunSettings

__all__ = ["BIN_MS", "MAX_RATE_HZ", "MAX_TRIALS", "SPIKES", "SPIKING", "SPIKING_KEY", "BinSettings", "LiveRun", "SpikingKind",
           "SpikingModel", "SpikingRunSettings", "Stimulus", "record_run"]

#: The spiking kind's key (what its docks declare, what its recordings' metadata says).
SPIKING_KEY = "spiking"
#: The default bin length, ms.
BIN_MS = 10.0
#: The longest bin a recording may name: a whole run of the longest length (an hour).
MAX_BIN_MS = 3_600_000.0
#: The highest Poisson rate a run's settings take, Hz: one event per 0.1 ms tick (the model
#: draws at most one a tick). Every host's rate field reaches this far and no further.
MAX_RATE_HZ = 10_000.0
#: The most trials a run's settings pool (every host's trials field reaches this far).
MAX_TRIALS = 1000
#: How far each recording's spike counts (``spiking.bin_spikes``) were checked by
#: :meth:`SpikingKind.run_metadata`: the list and how many of its entries.
_COUNTS_CHECKED: "weakref.WeakKeyDictionary[Recording, tuple[list[Any], int]]" = \
    weakref.WeakKeyDictionary()
#: The side channel of each bin's spike count.
SPIKES = SideChannel("spikes", "Spikes", "how many spikes the brain fired in the bin")


@dataclass(frozen=True)
class Stimulus:
    """What a spiking run is given.

    Parameters
    ----------
    excite
        Query of the neurons given Poisson input (``None``: the brain's own set, the
        demo's 21 sensory neurons).
    rate
        Their Poisson rate, Hz.
    silence
        Query of the neurons whose outgoing synapses are zeroed, or ``None``.
    seed
        Seed of the Poisson input.
    """

    excite: str | None = None
    rate: float = 150.0
    silence: str | None = None
    seed: int = 0

    def indices(self, brain: "SpikingBrain") -> tuple[np.ndarray, np.ndarray | None]:
        """``(excited, silenced)`` model indices on ``brain``; :class:`InputError` when
        nothing would be excited."""
        from flyviz.spiking.run import select

        if self.excite is not None and self.excite.strip():
            excite = select(brain, self.excite)
        elif brain.default_excite is not None:
            excite = np.asarray(brain.default_excite, np.int64)
        else:
            raise InputError("nothing to excite: give a query of the neurons to excite")
        silence = select(brain, self.silence) if self.silence and self.silence.strip() \
            else None
        return excite, silence


@dataclass(frozen=True)
class BinSettings:
    """How a spiking run is cut into frames: ``bins`` bins of ``bin_ms`` ms, ``trials``
    trials pooled."""

    bins: int = 50
    bin_ms: float = BIN_MS
    trials: int = 1

    def validate(self, dt_ms: float = 0.1) -> "BinSettings":
        """These settings checked, their numbers in plain form (``bins`` and ``trials`` as
        ``int``, ``bin_ms`` as ``float``: what a recording's metadata then says), or
        :class:`InputError` for a bin shorter than a tick, no bins or trials, or a count
        that is not a whole number (``trials=2.5`` or ``"2"`` would mean a guess)."""
        from flyviz.arguments import shown, whole_number

        bin_ms = self.bin_ms
        if isinstance(bin_ms, bool) or not isinstance(bin_ms, (int, float, np.integer,
                                                               np.floating)):
            raise InputError(f"a bin's length must be a number of ms, not {shown(bin_ms)}")
        if not np.isfinite(bin_ms) or bin_ms < dt_ms:
            raise InputError(f"a bin must be at least one tick ({dt_ms:g} ms), "
                             f"not {float(bin_ms):g} ms")
        bins = whole_number("a spiking run's number of bins", self.bins, 1)
        trials = whole_number("a spiking run's number of trials", self.trials, 1)
        return BinSettings(bins=bins, bin_ms=float(bin_ms), trials=trials)


def _stimulus(given: Any) -> "Stimulus":
    """What a spiking run is given: a :class:`Stimulus` (``None``: the default one); else
    one line, since the spiking brain reads no prompt and a prompt given it was run as the
    default stimulus without a word."""
    from flyviz.arguments import instance_or_default

    return instance_or_default("a spiking run is given", given, Stimulus,
                               ": the spiking brain reads no prompt")


def _bin_settings(settings: Any) -> "BinSettings":
    """A spiking run's settings: :class:`BinSettings` (``None``: the default ones); else
    one line (a Fly LLM's ``GenerationSettings`` was dropped without a word)."""
    from flyviz.arguments import instance_or_default

    return instance_or_default("a spiking run's settings are", settings, BinSettings)


def _checked_number(name: str, value: Any, low: float, high: float, whole: bool = False) -> Any:
    """``value`` as a number in ``low..high`` (a whole one when ``whole``), else one line."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(float(value)) or not low <= float(value) <= high \
            or (whole and float(value) != int(value)):
        kind = "a whole number" if whole else "a number"
        raise InputError(f"{name} must be {kind} from {low:g} to {high:g}, not {value!r}")
    return int(value) if whole else float(value)


@dataclass
class SpikingRunSettings:
    """A spiking run as the viewer state keeps it (the Stimulus dock binds to it; a script
    sets it to reproduce a view): an evented dataclass, ``settings.events.<field>(new, old)``.

    Parameters
    ----------
    excite
        Query of the neurons given Poisson input (``""``: the brain's own set).
    rate
        Their Poisson rate, Hz.
    silence
        Query of the neurons silenced (``""``: none).
    seed
        Seed of the Poisson input.
    bins, bin_ms, trials
        The run's length in bins, a bin's length (ms) and the trials pooled.
    speed
        Most biological time per wall second of a live run (``0``: as fast as it goes).
    """

    events: ClassVar[SignalGroupDescriptor] = SignalGroupDescriptor()

    excite: str = ""
    rate: float = 150.0
    silence: str = ""
    seed: int = 0
    bins: int = 100
    bin_ms: float = BIN_MS
    trials: int = 1
    speed: float = 1.0

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, self._checked(name, value))

    @staticmethod
    def _checked(name: str, value: Any) -> Any:
        if name in ("excite", "silence"):
            return "" if value is None else str(value).strip()
        if name == "rate":
            # Above 0: at 0 Hz the excited neurons get no input, nothing in the brain fires,
            # and the run would show a dark brain as if it were a result.
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer,
                                                                 np.floating)) \
                    or not math.isfinite(float(value)) or not 0 < float(value) <= MAX_RATE_HZ:
                raise InputError(f"the rate must be above 0 Hz (at 0 Hz nothing is driven and "
                                 f"nothing fires) and at most {MAX_RATE_HZ:g} Hz, not {value!r}")
            return float(value)
        if name == "seed":
            return _checked_number("the seed", value, 0, 2**63 - 1, whole=True)
        if name == "bins":
            return _checked_number("the number of bins", value, 1, 1_000_000, whole=True)
        if name == "bin_ms":
            return _checked_number("the bin", value, 0.1, MAX_BIN_MS)
        if name == "trials":
            return _checked_number("the number of trials", value, 1, MAX_TRIALS, whole=True)
        if name == "speed":
            return _checked_number("the speed", value, 0.0, 100.0)
        return value

    def stimulus(self) -> "Stimulus":
        """The :class:`Stimulus` these settings say."""
        return Stimulus(excite=self.excite or None, rate=self.rate,
                        silence=self.silence or None, seed=self.seed)

    def bin_settings(self) -> "BinSettings":
        """The :class:`BinSettings` these settings say."""
        return BinSettings(bins=self.bins, bin_ms=self.bin_ms, trials=self.trials)


class SpikingModel:
    """A spiking brain as the viewer sees a model: ``neurons``, ``name``, its anatomy and
    :data:`SPIKING` as its kind. ``spec`` is what loads the brain again (``"demo"``, a
    folder), written into recordings."""

    def __init__(self, brain: "SpikingBrain", spec: str = "") -> None:
        from flyviz.spiking.brain import brain_spec

        self.brain = brain
        self.spec = brain_spec(str(spec or brain.source or brain.name))
        self.name = str(brain.name)
        self._anatomy: Anatomy | None = None

    kind: ClassVar["SpikingKind"]

    @property
    def neurons(self) -> int:
        """Number of neurons."""
        return self.brain.neurons

    def drawing_anatomy(self) -> "Anatomy":
        """The brain's soma positions (the demo's synthetic ones), else a generic ball."""
        if self._anatomy is None:
            from flyviz.model.checkpoint import Anatomy
            from flyviz.model.layout import ball_layout

            b = self.brain
            if b.positions is None or b.positions_valid is None or not b.positions_valid.any():
                # A generic ball, still carrying the brain's ids and labels (the 166k
                # MaleCNS set has labels and populations but no somata).
                ball = ball_layout(b.neurons)
                self._anatomy = Anatomy(
                    positions=ball.positions, valid=ball.valid, kind=ball.kind,
                    body_id=np.asarray(b.root_ids, np.int64), superclass=b.superclass,
                    side=b.side, cell_type=b.cell_type, populations=b.populations)
            else:
                self._anatomy = Anatomy(
                    positions=np.asarray(b.positions, np.float32),
                    valid=np.asarray(b.positions_valid, bool),
                    kind="synthetic" if b.name == "demo" else "measured",
                    body_id=np.asarray(b.root_ids, np.int64), superclass=b.superclass,
                    side=b.side, cell_type=b.cell_type, populations=b.populations)
        return self._anatomy

    @property
    def anatomy(self) -> "Anatomy":
        """:meth:`drawing_anatomy` (what figures read)."""
        return self.drawing_anatomy()

    def close(self) -> None:
        """Nothing to release (a brain is arrays); here so callers treat it as any model."""

    @classmethod
    def load(cls, spec: str) -> "SpikingModel":
        """The spiking brain ``spec`` names (:func:`flyviz.spiking.load_brain`)."""
        from flyviz.spiking import load_brain

        return cls(load_brain(spec), spec)


class SpikingKind(ModelKind):
    """Shiu et al.'s LIF brain: a stimulus in, each neuron's rate per 10 ms bin out."""

    key: ClassVar[str] = SPIKING_KEY
    title: ClassVar[str] = "spiking brain"
    time_axis: ClassVar[TimeAxis] = TimeAxis("bin", "ms", BIN_MS)
    state_label: ClassVar[str] = "rate (Hz)"
    state_name: ClassVar[str] = "Rate"
    state_rows: ClassVar[str] = "rates, not spikes"
    state_title: ClassVar[str] = "&Live state (firing rate, Hz)"
    #: A rate has no sign: one colouring of the state (``"spike_rate"``), not two modes.
    state_quantities: ClassVar[tuple[str, ...]] = ("spike_rate",)
    #: Each bin over its own rates, as the window shows them: rates are sparse and come in
    #: bursts, and one range over the run put a bin's single spikes (100 Hz in a 10 ms bin)
    #: at a sixth of a burst's 600 Hz, where napari drew the brain nearly black.
    host_range_scope: ClassVar[str] = "token"
    side_channels: ClassVar[tuple[SideChannel, ...]] = (SPIKES,)
    # A spiking run is recorded on its own (no untouched run beside it): what compares two.
    comparison_hint: ClassVar[str] = (
        "a spiking run is recorded alone: record the silenced run too ('flyviz simulate "
        "BRAIN --silence QUERY --record FILE') and look at each, or compare two runs' spikes "
        "with 'flyviz simulate BRAIN --silence QUERY --compare SPIKES', SPIKES the other "
        "run's --out")

    def describe(self, model: Any) -> ModelDescription:
        """The brain's name, neurons and synapses (connected pairs), the model that runs it,
        and where it came from (its folder, how its weights were read)."""
        brain = model.brain
        facts = (f"{brain.neurons:,} neurons \u00b7 {brain.synapses:,} synapses",
                 f"spiking brain: Shiu et al.'s LIF model, bins of {BIN_MS:g} ms")
        provenance = [("kind", self.title), ("source", str(brain.source or model.spec or
                                                           brain.name))]
        if brain.weights:
            provenance.append(("weights", str(brain.weights)))
        provenance.append(("synapse weight", f"{float(brain.w_syn):g} mV"))
        credit = ("The spiking model is Shiu et al.'s leaky integrate-and-fire brain "
                  "(Nature 2024), run on this brain's synapse counts.")
        if brain.name == "demo":
            credit += " The demo brain's wiring is synthetic: not the fly connectome."
        return ModelDescription(str(model.name or brain.name), facts, tuple(provenance),
                                credit)

    def colour_layers(self) -> "tuple[LayerKind, ...]":
        """The spikes flashing and fading (:data:`~flyviz.viewer.layers.FLASH`). The rates
        are the recorded state itself (*Live state*, :meth:`state_layer`): offering them again
        listed the same colouring twice."""
        from flyviz.viewer.layers import FLASH, LayerKind, flash_layer

        return (LayerKind(FLASH, "Spikes (&flash and fade)",
                          "Each spike lights its neuron at its bin, then fades (τ 15 ms)",
                          flash_layer),)

    def recorded_layer(self, mode: str, scale: Any) -> Any:
        """Rates in Hz from 0 (:func:`flyviz.viewer.layers.rate_layer`) over a given
        ``scale``, whatever ``mode`` (a rate has no sign); with the automatic scale (a movie
        without ``--color-scale``), the spikes flashing and fading
        (:func:`flyviz.viewer.layers.flash_layer`), where one spike lights its neuron fully:
        on rates, one spike in a 10 ms bin is 100 Hz, a sixth of an automatic 600 Hz scale,
        and the movie was nearly black."""
        from flyviz.viewer.layers import flash_layer

        if scale is not None and getattr(scale, "kind", "") == "auto":
            return flash_layer()
        return self.state_layer(mode, scale)

    def state_layer(self, mode: str, scale: Any) -> Any:
        """Each neuron's firing rate in the bin, in Hz from 0
        (:func:`flyviz.viewer.layers.rate_layer`) over ``scale``, whatever ``mode`` (a rate
        has no sign)."""
        from flyviz.viewer.layers import rate_layer

        return rate_layer(scale)

    def wiring(self, model: Any) -> Wiring | None:
        """The brain's signed synapse counts by presynaptic neuron (its connectivity
        table's rows, as the engine delivers them)."""
        brain = model.brain
        return Wiring(brain.neurons, brain.indptr, brain.post, brain.counts, grouped_by="pre",
                      weight_name="Synapses", whole=True)

    # ------------------------------------------------------------ stepping
    def run_settings(self, run: "RunSettings | None" = None, **options: Any) -> BinSettings:
        """:class:`BinSettings` from ``bins=``, ``bin_ms=``, ``trials=`` (the viewer's run
        settings hold nothing a spiking run reads)."""
        return BinSettings(**options).validate()

    def new_run_settings(self) -> SpikingRunSettings:
        """:class:`SpikingRunSettings` (the Stimulus dock's), at their defaults."""
        return SpikingRunSettings()

    def run_request(self, state: Any) -> "RunRequest":
        """The run ``state``'s :class:`SpikingRunSettings` describe."""
        from flyviz.runs import RunRequest

        settings = state.kind_settings.of(self)
        return RunRequest(settings.stimulus(), settings.bin_settings())

    def speed_cap(self, state: Any) -> float:
        """Bins per wall second at the settings' ``speed`` (a factor of real time)."""
        settings = state.kind_settings.of(self)
        return settings.speed * 1000.0 / settings.bin_ms if settings.speed > 0 else 0.0

    def prepare_run(self, model: Any, request: "RunRequest"
                    ) -> "tuple[RunRequest, Recording]":
        """Check the stimulus (it selects neurons to excite) and the bins on ``model`` and
        make the run's recording: rates in float32, the run's metadata
        (:meth:`metadata`) and an empty spike log the run fills bin by bin."""
        import dataclasses

        from flyviz.record.recording import Recording
        from flyviz.record.spikes import SpikeLog
        from flyviz.spiking.engine import LIFParams

        if request.interventions:
            raise InputError("a spiking run takes its silencing from the stimulus, "
                             "not from interventions")
        if request.compare:
            raise InputError("a spiking run cannot be compared with an untouched one")
        stimulus = _stimulus(request.given)
        params = LIFParams(w_syn=model.brain.w_syn)
        settings = _bin_settings(request.settings).validate(params.dt)
        excite, silence = stimulus.indices(model.brain)
        recording = Recording(model.neurons,
                              self.metadata(model, stimulus, settings, [], excite, silence),
                              states_dtype=request.states_dtype or "float32")
        recording.spikes = SpikeLog(params.dt)
        return dataclasses.replace(request, given=stimulus, settings=settings), recording

    def frames(self, model: Any, request: Any, settings: Any = None, *,
               interventions: Any = (), recording: "Recording | None" = None,
               **options: Any) -> Iterator["Frame"]:
        """Run ``model`` (a :class:`SpikingModel`) on ``request`` (a :class:`Stimulus`)
        for ``settings.bins`` bins and yield one frame per bin as it is simulated, its state
        each neuron's rate in the bin (Hz), pooled over the trials.

        Each trial is a :class:`~flyviz.spiking.run.SpikingSimulation` stepped one bin at a
        time (its state carries over), so the frames are those of one whole run
        (:func:`~flyviz.spiking.run.simulate` with the same seed) and a live view shows each
        bin as soon as it is done; stopping the iteration stops the run. Its metadata (the
        brain, the stimulus, the bins, the spike count of each bin so far) goes into
        ``recording``, and each bin's exact spikes into its
        :attr:`~flyviz.record.recording.Recording.spikes`. Interventions are not a spiking
        run's: the stimulus silences."""
        if interventions:
            raise InputError("a spiking run takes its silencing from the stimulus, "
                             "not from interventions")
        run = LiveRun(model, _stimulus(request), _bin_settings(settings))
        log = run.spike_log()
        if recording is not None:
            # A recording made by prepare_run has the run's metadata and spike log already
            # (a view may be showing them): only an empty one is filled in here.
            if not isinstance(recording.metadata.get("spiking"), dict):
                recording.metadata.update(run.metadata())
            if recording.spikes is None:
                recording.spikes = log
            log = recording.spikes
        for _ in range(run.settings.bins):
            frame, spikes = run.next_bin()
            if recording is not None:
                recording.metadata["spiking"]["bin_spikes"].append(spikes)
                log.append(*run.last_spikes)
                recording.append(frame)
            yield frame

    def metadata(self, model: "SpikingModel", stimulus: Stimulus, bins: BinSettings,
                 bin_spikes: "list[int]", excite: np.ndarray, silence: np.ndarray | None
                 ) -> dict[str, Any]:
        """What a recording of a spiking run says of it (``kind``, ``model_name``,
        ``spiking``: brain, stimulus, the brain's synapse weight, bins, per-bin spike
        counts)."""
        return {"kind": self.key, "model_name": model.name, "state_units": "Hz",
                "spiking": {"brain": model.spec, **asdict(stimulus), **asdict(bins),
                            "excited": int(excite.size),
                            "silenced": 0 if silence is None else int(silence.size),
                            "w_syn": float(model.brain.w_syn),
                            "bin_spikes": [int(c) for c in bin_spikes]}}

    # ------------------------------------------------------------ recordings
    def run_metadata(self, recording: "Recording") -> dict[str, Any]:
        """A spiking recording's ``spiking`` metadata (the run's brain, bin, trials...),
        checked where views read it: a recording edited by hand and sealed again gets one
        :class:`~flyviz.errors.RecordingError`, not a failure deep in a figure.

        Raises
        ------
        RecordingError
            Naming the entry and what it holds.
        """
        from flyviz.errors import RecordingError

        meta = recording.metadata.get("spiking", {})
        if meta is None:
            meta = {}
        if not isinstance(meta, dict):
            raise RecordingError(f"the recording's spiking metadata is a {type(meta).__name__}, "
                                 "not a table of the run's settings")
        bin_ms = meta.get("bin_ms", BIN_MS)
        if isinstance(bin_ms, bool) or not isinstance(bin_ms, (int, float)) or \
                not math.isfinite(bin_ms) or not 0 < bin_ms <= MAX_BIN_MS:
            raise RecordingError(f"the recording's bin length (spiking.bin_ms) is {bin_ms!r}, "
                                 f"not a number of ms above 0 and at most {MAX_BIN_MS:g}")
        trials = meta.get("trials", 1)
        if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
            raise RecordingError(f"the recording's trial count (spiking.trials) is {trials!r}, "
                                 "not a whole number of 1 or more")
        counts = meta.get("bin_spikes")
        if counts is not None:
            # Every frame's counter reads this, and a live run appends a count a bin: only
            # the counts not checked yet are read (all of them once per list).
            if not isinstance(counts, list):
                raise RecordingError("the recording's spike counts (spiking.bin_spikes) are "
                                     "not a list of whole numbers")
            seen, checked = _COUNTS_CHECKED.get(recording, (None, 0))
            start = checked if seen is counts and checked <= len(counts) else 0
            if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0
                       for c in counts[start:]):
                raise RecordingError("the recording's spike counts (spiking.bin_spikes) are "
                                     "not whole numbers of 0 or more")
            _COUNTS_CHECKED[recording] = (counts, len(counts))
        return meta

    def run_trials(self, recording: "Recording") -> int:
        """The trials of ``recording``'s run: 1 when its metadata does not say, and 1 when
        its metadata is not to be read (a file edited by hand: the views that read it say
        what is wrong; a panel opening it is no place to fail)."""
        from flyviz.errors import RecordingError

        try:
            # run_metadata has judged it a whole number of 1 or more
            return int(self.run_metadata(recording).get("trials", 1))
        except RecordingError:
            return 1

    def load(self, spec: str, **options: Any) -> "SpikingModel":
        """The spiking brain ``spec`` names (:meth:`SpikingModel.load`)."""
        return SpikingModel.load(spec)

    def model_spec(self, recording: "Recording") -> tuple[str | None, dict[str, Any]]:
        """The brain the run names (``spiking.brain``)."""
        spec = self.run_metadata(recording).get("brain")
        return (spec if isinstance(spec, str) and spec else None), {}

    def recording_model(self, recording: "Recording", spec: str | None = None,
                        **options: Any) -> "tuple[SpikingModel | None, str]":
        """The brain a spiking recording ran on (``spiking.brain``, or ``spec``) when it
        loads and has as many neurons, else ``None`` and why not: a run is shown without
        its brain (on a generic layout) rather than refused."""
        spec = spec or self.model_spec(recording)[0]
        if not spec:
            return None, "the recording names no brain"
        try:
            model = SpikingModel.load(spec)
        except Exception as exc:  # a brain that moved: the caller shows the run anyway
            return None, f"the brain {spec} does not load ({str(exc).splitlines()[0]})"
        if model.neurons != recording.neurons:
            return None, f"the brain {spec} has {model.neurons:,} neurons"
        return model, ""

    def select(self, model: Any, query: str) -> np.ndarray:
        """The brain's neurons ``query`` picks, as ``flyviz simulate --excite`` reads it
        (:func:`flyviz.spiking.run.select`: labels where the brain has them, ``body:`` root
        ids, ``id:``)."""
        from flyviz.spiking.run import select

        return select(model.brain, query)

    def recording_mismatch(self, recording: "Recording", model: Any, name: str = ""
                           ) -> str | None:
        """A note when ``model`` is not the brain the recording ran on (``spiking.brain``):
        its neurons would be drawn where another brain places them; ``None`` when it is
        that brain, or either names none."""
        recorded = self.model_spec(recording)[0]
        spec = str(getattr(model, "spec", "") or "")
        if not recorded or not spec or recorded == spec:
            return None
        return (f"{name or 'the recording'} ran on the brain {recorded}, not {spec}: its "
                f"neurons are drawn where {spec} places them")

    def recording_brain(self, recording: "Recording") -> "tuple[SpikingModel | None, str]":
        """:meth:`recording_model` of the brain the recording names."""
        return self.recording_model(recording)

    def shown_model(self, recording: "Recording") -> "tuple[SpikingModel, str]":
        """:meth:`recording_model`, else a stand-in of the recording's size with no synapses,
        drawn on a generic ball; and a note when it is the stand-in."""
        model, note = self.recording_model(recording)
        if model is not None:
            return model, ""
        from flyviz.spiking.brain import SpikingBrain

        n = int(recording.neurons)
        name = str(recording.metadata.get("model_name") or "spiking recording")
        stand_in = SpikingBrain(name=name, root_ids=np.arange(n, dtype=np.int64),
                                indptr=np.zeros(n + 1, np.int64), post=np.zeros(0, np.int32),
                                counts=np.zeros(0))
        return SpikingModel(stand_in, ""), f"{note}; neurons are placed on a generic layout"

    def recording_anatomy(self, recording: "Recording") -> "tuple[Anatomy, str]":
        """Where to draw a spiking recording's neurons (:meth:`shown_model`'s anatomy),
        and a note when it is a generic ball."""
        model, note = self.shown_model(recording)
        return model.drawing_anatomy(), note

    def replay_refusal(self, recording: "Recording") -> str | None:
        """A spiking run is not replayed token by token: the ``flyviz simulate`` command that
        runs it again is said instead, with the recording's brain (and the brain's files
        given by option), stimulus, input files, synapse weight, input end, bins and seed (a
        run with the same seed gives the same spikes). A file the run read that is gone or
        no longer the one it read (its SHA-256 differs) is named: the command would not give
        the same run."""
        import shlex

        meta = self.run_metadata(recording)
        words = ["flyviz", "simulate", str(meta.get("brain") or "BRAIN")]
        changed: list[str] = []
        files = meta.get("brain_files")
        for name, path in (files.items() if isinstance(files, dict) else ()):
            if name in ("connectivity", "coordinates", "classification") and \
                    isinstance(path, str) and path:
                words += [f"--{name}", path]
        bin_ms = float(meta.get("bin_ms", BIN_MS))
        words += ["--duration", f"{_run_ms(recording, meta):g}ms", "--bin", f"{bin_ms:g}"]
        if isinstance(meta.get("excite"), str) and meta["excite"]:
            words += ["--excite", meta["excite"]]
        else:   # an --excite-file too long to keep as a query, or none
            words += _file_option("--excite-file", meta.get("excite_file"), changed)
        if isinstance(meta.get("silence"), str) and meta["silence"]:
            words += ["--silence", meta["silence"]]
        words += _file_option("--input-spikes", meta.get("input_spikes"), changed)
        rate, trials = meta.get("rate", 150.0), meta.get("trials", 1)
        if isinstance(rate, (int, float)) and float(rate) != 150.0:
            words += ["--rate", f"{float(rate):g}"]
        if isinstance(trials, int) and trials > 1:
            words += ["--trials", str(trials)]
        words += ["--seed", str(meta.get("seed", 0))]
        w_syn, until = meta.get("w_syn"), meta.get("input_until_s")
        if isinstance(w_syn, (int, float)) and not isinstance(w_syn, bool):
            # Always, where recorded: the brain's default weight is not in the recording.
            words += ["--w-syn", repr(float(w_syn))]
        if isinstance(until, (int, float)) and not isinstance(until, bool):
            words += ["--input-until", f"{float(until) * 1000.0:g}ms"]
        words += ["--record", "again.flyrec"]
        text = ("a spiking brain's run is not replayed (flyviz replay checks a language "
                "model's tokens); run it again with its seed: "
                f"{' '.join(shlex.quote(w) for w in words)}")
        if changed:
            text += (f"; but {' and '.join(changed)}, so this command gives another run "
                     "unless the run's file is put back")
        return text

    def recording_axis(self, recording: "Recording") -> TimeAxis:
        """Bins of the ``bin_ms`` the run was recorded with (10 ms by default), ending where
        the run does (its ``run_ticks``: a run of 30 ms in bins of 7 ms ends its last bin at
        30 ms, not 35)."""
        meta = self.run_metadata(recording)
        return TimeAxis("bin", "ms", float(meta.get("bin_ms", BIN_MS)),
                        end=_run_ms(recording, meta))

    def bin_spikes(self, recording: "Recording", index: int,
                   meta: dict[str, Any] | None = None) -> int | None:
        """The spike count of bin ``index`` of ``recording``, when it was kept; ``meta`` is
        its :meth:`run_metadata` when the caller has read it already (read here if not)."""
        if meta is None:
            meta = self.run_metadata(recording)
        counts = meta.get("bin_spikes")
        if isinstance(counts, list) and 0 <= index < len(counts):
            return int(counts[index])
        return None

    def _with_spikes(self, recording: "Recording", index: int, words: str) -> str:
        """``words`` (a counter of bin ``index``) with the bin's spike count, when kept: per
        trial for a run of several (their mean, ``"· 401.3 spikes per trial"``), as the
        brain shows the trials' mean rate; ``spiking.bin_spikes`` holds all trials' spikes
        together, which read as so many times one trial's activity."""
        meta = self.run_metadata(recording)     # once a frame: both values come from it
        spikes = self.bin_spikes(recording, index, meta)
        if spikes is None:
            return words
        trials = int(meta.get("trials", 1))
        if trials < 2:
            return f"{words} \u00b7 {spikes:,} spikes"
        return f"{words} \u00b7 {_per_trial(spikes / trials)} spikes per trial"

    def counter(self, recording: "Recording", index: int) -> str:
        """``"bin 2 of 0–49 · 30 ms · 1,204 spikes"`` (``"· 401.3 spikes per trial"`` for a
        run of several trials)."""
        return self._with_spikes(recording, index,
                                 self.recording_axis(recording).of(index, len(recording)))

    # ------------------------------------------------------------ side channels
    def overlays(self, recording: "Recording", start: int = 0,
                 stop: int | None = None) -> Iterator["OverlayContent"]:
        """The bin counter with the bin's spike count; no text, no bars."""
        from flyviz.render.overlay_content import OverlayContent

        n = len(recording)
        stop = n if stop is None else min(int(stop), n)
        for i in range(max(0, int(start)), stop):
            yield OverlayContent(prompt="", generated="", newest="", newest_in_prompt=False,
                                 bars=(), counter=self.counter(recording, i))

    def frame_caption(self, recording: "Recording", index: int) -> str:
        """The bin counter with the bin's spike count."""
        return self.counter(recording, index)

    def state_step(self, recording: "Recording", index: int) -> float:
        """The rate one spike makes in bin ``index`` (Hz): 1 over the bin's length and the
        trials (the last bin of a run that is not a whole number of bins is short), as
        :meth:`LiveRun.next_bin` counts a rate."""
        meta = self.run_metadata(recording)
        tick_ms = float(getattr(recording.spikes, "tick_ms", 0.1))    # the engine's 0.1 ms
        bin_ticks = max(1, round(float(meta.get("bin_ms", BIN_MS)) / tick_ms))
        ticks = meta.get("run_ticks")
        if isinstance(ticks, int) and not isinstance(ticks, bool) and ticks > 0:
            bin_ticks = max(1, min(bin_ticks, ticks - index * bin_ticks))
        return 1000.0 / (bin_ticks * tick_ms * int(meta.get("trials", 1)))

    def page_counter(self, recording: "Recording", index: int) -> str:
        """``"bin 2 / 49 · 30 ms · 1,204 spikes"`` (per trial for several, as
        :meth:`counter`)."""
        return self._with_spikes(recording, index, super().page_counter(recording, index))

    def state_text(self, value: float) -> str:
        """``"300 Hz"``: a rate in the bin (no sign, no false digits)."""
        return f"{value:.4g} Hz"

    def run_summary(self, recording: "Recording") -> str:
        """``"21 excited at 150 Hz, 3 silenced, 0.5 s, 30 trials"``: the stimulus and the run's
        length, as the recording's metadata gives them."""
        meta = self.run_metadata(recording)
        parts = []
        excited, rate = meta.get("excited"), meta.get("rate")
        if isinstance(excited, int) and not isinstance(excited, bool):
            what = f"{excited:,} excited"
            if isinstance(rate, (int, float)) and not isinstance(rate, bool):
                what += f" at {rate:g} Hz"
            parts.append(what)
        silenced = meta.get("silenced")
        if isinstance(silenced, int) and not isinstance(silenced, bool) and silenced > 0:
            parts.append(f"{silenced:,} silenced")
        parts.append(f"{_run_ms(recording, meta) / 1000.0:g} s")
        trials = int(meta.get("trials", 1))
        if trials > 1:
            parts.append(f"{trials:,} trials")
        return ", ".join(parts)

    def page_steps(self, recording: "Recording") -> list[dict[str, Any]]:
        """Each bin's words (``bin 2 · 30 ms``) and position; no bars."""
        axis = self.recording_axis(recording)
        return [{"text": f" {axis.at(i)}", "phase": 0, "position": i, "next": "", "p": 0.0,
                 "top": []} for i in range(len(recording))]


def _file_option(option: str, source: Any, changed: list[str]) -> list[str]:
    """``[option, path]`` of a file a run read (``{"path", "sha256"}`` in its recording), or
    none where the recording names none; where the file is gone or its SHA-256 is not the
    recorded one, ``changed`` is told so."""
    if not isinstance(source, dict) or not isinstance(source.get("path"), str):
        return []
    from pathlib import Path

    from flyviz.fileio import not_a_file
    from flyviz.model.formats.common import sha256_file

    path = source["path"]
    name = Path(path).name
    reason = not_a_file(path)
    if reason:
        changed.append(f"{name} is gone" if reason == "no such file" else
                       f"{name} cannot be read ({reason})")
    else:
        try:
            same = sha256_file(Path(path)) == source.get("sha256")
        except OSError:
            same = False
        if not same:
            changed.append(f"{name} has changed since the run (its SHA-256 differs)")
    return [option, path]


def _per_trial(mean: float) -> str:
    """A bin's mean spikes per trial in words: one decimal (``"401.3"``), and a bin's few
    spikes over many trials to one significant digit (``"0.003"``, not ``"0.0"``)."""
    return f"{mean:,.1f}" if mean == 0 or mean >= 0.05 else f"{mean:.1g}"


def _run_ms(recording: "Recording", meta: dict[str, Any]) -> float:
    """The run's length in ms: its ticks where the metadata has them (a last bin may be
    short), else its bins at ``bin_ms``."""
    ticks = meta.get("run_ticks")
    tick_ms = float(getattr(recording.spikes, "tick_ms", 0.1))    # the engine's 0.1 ms
    if isinstance(ticks, int) and not isinstance(ticks, bool) and ticks > 0:
        return ticks * tick_ms
    return len(recording) * float(meta.get("bin_ms", BIN_MS))


class LiveRun:
    """A spiking run stepped one bin at a time: one
    :class:`~flyviz.spiking.run.SpikingSimulation` per trial, their spikes pooled per bin.

    Parameters
    ----------
    model, stimulus, settings
        What runs, on what, in what bins (:class:`InputError` for a stimulus that selects
        nothing to excite, or bad bins).
    """

    def __init__(self, model: SpikingModel, stimulus: Stimulus, settings: BinSettings) -> None:
        from flyviz.spiking.engine import LIFParams
        from flyviz.spiking.run import SpikingSimulation

        brain = model.brain
        params = LIFParams(w_syn=brain.w_syn)
        settings = settings.validate(params.dt)
        self.model, self.stimulus, self.settings = model, stimulus, settings
        self.excite, self.silence = stimulus.indices(brain)
        self.params = params
        #: Ticks in one bin.
        self.bin_ticks = max(1, int(round(settings.bin_ms / params.dt)))
        self.trials = [SpikingSimulation(brain, excite=self.excite, silence=self.silence,
                                         rate=stimulus.rate, seed=stimulus.seed, trial=t,
                                         params=params) for t in range(int(settings.trials))]
        #: Bins run so far.
        self.bins_done = 0
        #: The spikes of the last bin, pooled: ``(ticks, neurons, trials)`` (ticks from the
        #: start; by trial, then tick, then neuron).
        self.last_spikes: tuple[np.ndarray, np.ndarray, np.ndarray] = (
            np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int32))

    @property
    def bin_s(self) -> float:
        """One bin's length, seconds."""
        return self.bin_ticks * self.params.dt_s

    def spike_log(self) -> "SpikeLog":
        """An empty :class:`~flyviz.record.spikes.SpikeLog` of this run's tick, for a
        recording of it to keep each bin's :attr:`last_spikes` in."""
        from flyviz.record.spikes import SpikeLog

        return SpikeLog(self.params.dt)

    def metadata(self) -> dict[str, Any]:
        """What a recording of this run says of it (no bins yet)."""
        return SPIKING.metadata(self.model, self.stimulus, self.settings, [], self.excite,
                                self.silence)

    def next_bin(self) -> "tuple[Frame, int]":
        """Run the next bin of every trial: its frame (rates, Hz) and its spike count."""
        n = self.model.neurons
        counts = np.zeros(n, dtype=np.int64)
        ticks, neurons, trials = [], [], []
        for t, sim in enumerate(self.trials):
            tk, nr = sim.advance(self.bin_ticks)
            counts += np.bincount(nr, minlength=n)
            ticks.append(tk)
            neurons.append(nr)
            trials.append(np.full(tk.size, t, np.int32))
        self.last_spikes = (np.concatenate(ticks), np.concatenate(neurons),
                            np.concatenate(trials))
        frame = state_frame(self.bins_done, counts / (self.bin_s * len(self.trials)))
        self.bins_done += 1
        return frame, int(counts.sum())


def record_run(model: SpikingModel, stimulus: Stimulus | None = None,
               settings: BinSettings | None = None) -> "Recording":
    """A :class:`~flyviz.record.recording.Recording` of ``model``'s run on ``stimulus``:
    one frame of rates (Hz, float32) per bin."""
    from flyviz.record.recording import Recording

    recording = Recording(model.neurons, {}, states_dtype="float32")
    for _ in SPIKING.frames(model, stimulus or Stimulus(), settings or BinSettings(),
                            recording=recording):
        pass
    return recording


#: The spiking brain's kind.
SPIKING = SpikingKind()
SpikingModel.kind = SPIKING
