"""Recordings as data other tools read: xarray, Zarr, NWB and NumPy's ``.npz``.

:func:`to_xarray` is the one description of a recording as labelled data;
the file formats are written from it (Zarr, ``.npz``) or from the same
pieces (NWB):

``state`` (token, neuron)
    The model's state ``x`` after each consumed token (a spiking run: each
    neuron's firing rate in each bin), in the recording's dtype (float16 or
    float32); its ``long_name`` and ``units`` say which (:func:`state_attributes`:
    ``"1"``, or ``"Hz"`` for rates). Not copied: a loaded recording's states stay
    in its file, memory-mapped (dask-backed when dask is installed and the
    run is still in memory in several blocks).
``top_k_id``, ``top_k_probability``, ``top_k_text`` (token, rank)
    The most likely next tokens at each step, their probabilities and texts
    (``-1``/``0``/``""`` pad short rows).
token coordinates
    ``position`` (0 is BOS), ``token_id`` and ``token_text`` (the token
    consumed), ``phase`` (``"prompt"`` or ``"generation"``), ``predicted_id``,
    ``predicted_text`` and ``probability`` (the next token chosen and its
    probability), ``mean_abs_state``, ``generation_index`` (-1 in the prompt).
neuron coordinates
    ``neuron`` (the index, always); with a model: ``body_id``,
    ``superclass``, ``side``, ``cell_type`` where the model has labels, and
    ``x``, ``y``, ``z`` (soma position in micrometres, NaN where unknown)
    where it has measured or synthetic positions.
spikes (spike), a spiking run's only
    The exact spikes behind its frames, when the run kept them (a spiking
    run's: :attr:`Recording.spikes <flyviz.record.recording.Recording.spikes>`),
    one entry each, in frame order: ``spike_frame`` (the frame whose bin
    holds it), ``spike_tick`` (ticks from the run's start),
    ``spike_time_ms``, ``spike_neuron`` (model index) and ``spike_trial``;
    the attribute ``spike_tick_ms`` is a tick's length. NWB keeps them as
    its ``units`` table instead (see :func:`to_nwb`).
a comparison's untouched run and numbers, a comparison's only
    ``baseline_state`` (baseline_token, neuron): the untouched run's states, on
    an axis of its own (a free-running comparison's runs may differ in length;
    ``baseline_token`` i is the same position as ``token`` i); its token table
    as ``baseline_``-prefixed coordinates on ``baseline_token``
    (``baseline_token_id``, ...), ``baseline_top_k_id``,
    ``baseline_top_k_probability``, ``baseline_top_k_text`` (baseline_token,
    baseline_rank); ``kl`` and ``mean_abs_delta`` (token): the comparison's
    per-frame numbers (NaN where the untouched run has no such frame); the
    attributes ``comparison`` (the recording's ``comparison`` metadata, JSON),
    ``baseline_metadata`` (JSON) and ``baseline_text``.
attributes
    ``prompt``, ``text`` (the generated continuation), ``model``,
    ``model_name``, ``model_identity`` (JSON), the sampler settings
    (``temperature``, ``top_p``, ``seed``, ``max_new_tokens``, ``top_k``),
    ``interventions`` (JSON, for an intervened run), ``states_dtype``,
    ``anatomy`` (``"measured"``, ``"synthetic"`` or ``"none"``),
    ``flyviz_version``, and every other key of the run's metadata as it is
    (a string or number) or as JSON (a spiking run's ``kind``, ``state_units``
    and ``spiking``, ``layout``, ``neurons``...).

A recording stores its model's identity but not its anatomy, so the neuron
labels and positions come from a model passed in (``model=``); nothing is
loaded behind the caller's back.

Zarr cannot yet store text portably (Zarr 3 has no specified string type),
so :func:`to_zarr` stores every text coordinate as integer codes into a table
kept in the variable's attributes (``flyviz_labels``): ``token_id`` with the
texts of the tokens that occur is such a vocabulary table.
:func:`open_zarr` turns the codes back into text; any Zarr reader sees the
codes and the table.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz._version import __version__
from flyviz.errors import ExportError, InputError, MissingDependencyError, RecordingError
from flyviz.fileio import (folder_refusal, missing_folder, nearest_existing, probe_writable,
                           temporary_file_beside)
from flyviz.model.checkpoint import VOXEL_UM, Anatomy, Checkpoint
from flyviz.record.frame import PHASE_GENERATION

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.record.recording import Recording

#: Formats :func:`convert` writes, by name, with their usual file suffix.
FORMATS = {"zarr": ".zarr", "nwb": ".nwb", "npz": ".npz"}
#: Attribute of a Zarr variable holding the texts its integer codes stand for.
LABELS_ATTR = "flyviz_labels"
#: Frames per Zarr chunk along ``token`` (a chunk of a full-size float16 run is ~6 MB).
ZARR_TOKENS_PER_CHUNK = 64
#: Bytes of states handed to a writer at a time.
_BLOCK_BYTES = 8 << 20
#: Anatomy kinds whose positions are soma positions (a graph layout's are not).
_POSITION_KINDS = ("measured", "synthetic")


#: The optional extra (a key of :data:`flyviz.extras.EXTRAS`) each format needs.
FORMAT_NEEDS = {"zarr": "zarr", "nwb": "nwb"}


def require_module(module: str, feature: str, extra: str) -> Any:
    """The optional module ``module`` (``"xarray"``, ``"zarr"`` or ``"pynwb"``), imported.

    Raises
    ------
    MissingDependencyError
        One line naming ``feature`` and the extra to install (``flyviz[extra]``), when
        the module is missing or broken.
    """
    from flyviz.extras import require

    require({"xarray": "xarray", "zarr": "zarr", "pynwb": "nwb"}[module], feature)
    try:
        return __import__(module)
    except ImportError:  # found but broken: say the same
        raise MissingDependencyError.for_feature(feature, module, extra) from None


def output_format(path: str | Path, to: str | None = None) -> str:
    """The format :func:`convert` writes ``path`` as: ``to``, else ``path``'s suffix.

    Raises
    ------
    InputError
        When neither names one of :data:`FORMATS`, or ``path``'s suffix is another
        format's than ``to`` (``x.npz`` written as a Zarr store would be read as an archive
        by every tool, and fail).
    """
    path = Path(path)
    named = next((name for name, suffix in FORMATS.items()
                  if path.suffix.lower() == suffix), None)
    if to is None:
        to = named
        if to is None:
            raise InputError(f"cannot tell the format from {path.name!r}; name it .zarr, .nwb "
                             "or .npz, or say which with --to")
    if to not in FORMATS:
        raise InputError(f"unknown format {to!r}; choose one of {', '.join(FORMATS)}")
    if named is not None and named != to:
        from flyviz.record.flyrec_codec import EXPORTED_KINDS

        raise InputError(f"{path.name} is named as {EXPORTED_KINDS[FORMATS[named]]} but --to "
                         f"{to} writes {EXPORTED_KINDS[FORMATS[to]]}: name it "
                         f"{path.stem}{FORMATS[to]}, or leave out --to")
    return to


def check_output(source: str | Path, path: str | Path, to: str | None = None,
                 feature: str = "flyviz convert") -> str:
    """Check, before anything is read, that ``source`` can be converted to ``path``: the
    format is known, its extra is installed, ``path`` is not ``source`` itself (the
    same file, or a hard link to it: writing it would destroy the recording) and its folder
    takes it (:func:`check_writable`). Returns the format.

    Raises
    ------
    InputError
        For an unknown format or an output that is the input.
    MissingDependencyError
        When the format's optional extra is not installed.
    ExportError
        When ``path``'s folder cannot take it.
    """
    from flyviz.extras import require

    to = output_format(path, to)
    if to in FORMAT_NEEDS:
        require(FORMAT_NEEDS[to], f"{feature} --to {to}")
    from flyviz.fileio import same_file

    if same_file(path, source):  # the same name, a hard or a symbolic link
        raise InputError(f"the output {path} is the recording itself; writing it would destroy "
                         "the recording: give another file name")
    check_replaceable(path, to)
    check_writable(path)
    return to


def check_replaceable(path: str | Path, to: str) -> None:
    """Refuse now, before the recording and its model load, an output that the writer
    would refuse at the end or whose replacing would take something else with it.

    A conversion is made again from its recording, so an earlier file of the same format,
    or a Zarr store that holds nothing but the store, is replaced whole (never merged
    into: a store of two recordings' arrays would be a silent defect). Anything else there
    is the user's: a folder for a file format, a folder that is not a Zarr store (a model's,
    a dataset's), or a store that holds other files too (notes, plots: replacing the store
    would delete them without a word).

    Raises
    ------
    ExportError
        One line naming ``path``, what is there and what to do.
    """
    path = Path(path)
    if to != "zarr":
        if path.is_dir():
            raise ExportError(f"cannot write {path}: it is a folder; give a file name, e.g. "
                              f"run{FORMATS[to]}")
        return
    if path.exists() and not is_zarr_store(path):
        raise ExportError(f"{path} exists and is not a store flyviz wrote; remove it or choose "
                          "another name")
    others = store_strangers(path) if path.is_dir() else []
    if others:
        raise ExportError(f"{path} is a Zarr store that also holds {others[0]}, which "
                          "replacing it would delete: move that out, or choose another name")


def check_writable(path: str | Path) -> None:
    """Refuse now, in one line, an output whose folder cannot take it: a part of its path
    that is a file (mkdir's "File exists" named neither), or a folder that takes no new
    file, by creating one there (:func:`~flyviz.fileio.probe_writable`: a read-only folder,
    or a pseudo-file system such as /proc, whose "0 bytes free" read as a full disk).

    Raises
    ------
    ExportError
        Naming ``path`` and why (what every writer here raises for a path it cannot write).
    """
    from flyviz.errors import FileAccessError

    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    existing = nearest_existing(folder)
    if not existing.is_dir():
        raise ExportError(f"cannot write {path}: {missing_folder(folder)}")
    try:
        probe_writable(existing, "", path)
    except FileAccessError as exc:
        raise ExportError(str(exc)) from None


def anatomy_of(model: Any, neurons: int) -> Anatomy | None:
    """The anatomy of ``model`` (what :func:`flyviz.load` returned, a Checkpoint, an
    Anatomy, or None for none), which must have ``neurons`` neurons.

    Raises
    ------
    InputError
        For a ``model`` of another type.
    RecordingError
        When the anatomy has another number of neurons than the data.
    """
    anatomy: Anatomy | None
    if model is None:
        return None
    if isinstance(model, Anatomy):
        anatomy = model
    elif isinstance(model, Checkpoint):
        anatomy = model.anatomy
    elif hasattr(model, "checkpoint") and isinstance(model.checkpoint, Checkpoint):
        anatomy = model.checkpoint.anatomy
    else:
        raise InputError(f"model= takes what flyviz.load returned (or a checkpoint or an "
                         f"anatomy), not {type(model).__name__}")
    if anatomy is not None and len(anatomy.positions) != neurons:
        raise RecordingError(f"the recording has {neurons:,} neurons but the model has "
                             f"{len(anatomy.positions):,}; pass the model it was recorded with")
    return anatomy


# ------------------------------------------------------------------ pieces
def token_table(recording: "Recording") -> dict[str, np.ndarray]:
    """Per-frame values, one array each: ``position``, ``token_id``, ``token_text``,
    ``phase``, ``predicted_id``, ``predicted_text``, ``probability``,
    ``mean_abs_state``, ``generation_index`` (-1 in the prompt)."""
    phases = recording.phases
    generation = np.array([p == PHASE_GENERATION for p in phases], dtype=bool)
    return {
        "position": recording.positions,
        "token_id": recording.token_ids,
        "token_text": _texts(recording.token_texts),
        "phase": _texts(phases),
        "predicted_id": recording.predicted_ids,
        "predicted_text": _texts(recording.predicted_texts),
        "probability": recording.probabilities,
        "mean_abs_state": recording.mean_abs_states,
        "generation_index": np.where(generation, np.cumsum(generation) - 1, -1).astype(np.int64),
    }


def top_k_texts(recording: "Recording") -> np.ndarray:
    """The texts of every frame's most likely next tokens, (frames, k) like
    :meth:`Recording.top_k_arrays <flyviz.record.recording.Recording.top_k_arrays>`'s ids,
    ``""`` padding shorter rows."""
    ids, _ = recording.top_k_arrays()
    rows = [[""] * ids.shape[1] for _ in range(len(recording))]
    for row, info in zip(rows, recording.frame_infos):
        row[:len(info.top_k_text)] = [str(t) for t in info.top_k_text]
    return _texts([t for row in rows for t in row]).reshape(ids.shape)


#: What each of a comparison's per-frame values is (:func:`comparison_table`).
COMPARISON_DESCRIPTIONS = {
    "kl": "KL(p_untouched || p_intervened) of the frame's next-token distributions, nats "
          "(NaN: the untouched run has no such frame)",
    "mean_abs_delta": "mean over all neurons of |x_intervened - x_untouched| at the frame "
                      "(NaN: the untouched run has no such frame)",
}


def comparison_table(recording: "Recording") -> dict[str, np.ndarray]:
    """A comparison's per-frame numbers (``kl``, ``mean_abs_delta``; float64, one per frame
    of the intervened run, NaN where the stored value is ``null``), or nothing for a run
    that is not a comparison."""
    meta = recording.metadata.get("comparison")
    if recording.baseline is None or not isinstance(meta, dict):
        return {}
    return {name: np.array([np.nan if v is None else float(v) for v in meta.get(name) or []],
                           dtype=np.float64) for name in COMPARISON_DESCRIPTIONS}


def baseline_table(recording: "Recording") -> dict[str, np.ndarray]:
    """A comparison's untouched run as the arrays of a run, each name prefixed
    ``baseline_``: its token table (:func:`token_table`), ``top_k_id``,
    ``top_k_probability`` and ``top_k_text``; nothing for a run that is not a comparison.
    Its states are not here (see :func:`to_xarray`)."""
    base = recording.baseline
    if base is None:
        return {}
    table = dict(token_table(base))
    table["top_k_id"], table["top_k_probability"] = base.top_k_arrays()
    table["top_k_text"] = top_k_texts(base)
    return {f"baseline_{name}": values for name, values in table.items()}


def neuron_table(anatomy: Anatomy | None, neurons: int) -> dict[str, np.ndarray]:
    """Per-neuron values: ``neuron`` (the index), and from ``anatomy`` where it has
    them ``body_id``, ``superclass``, ``side``, ``cell_type`` and ``x``, ``y``,
    ``z`` (soma position in micrometres, NaN where unknown)."""
    table: dict[str, np.ndarray] = {"neuron": np.arange(neurons, dtype=np.int64)}
    if anatomy is None:
        return table
    if anatomy.body_id is not None:
        table["body_id"] = np.asarray(anatomy.body_id, dtype=np.int64)
    for name in ("superclass", "side", "cell_type"):
        labels = getattr(anatomy, name)
        if labels is not None:
            table[name] = _texts(labels)
    if anatomy.kind in _POSITION_KINDS and anatomy.n_valid:
        um = np.asarray(anatomy.positions, dtype=np.float64) * VOXEL_UM
        um[~np.asarray(anatomy.valid, dtype=bool)] = np.nan
        for axis, name in enumerate("xyz"):
            table[name] = um[:, axis].astype(np.float32)
    return table


#: What each spike table array holds (:func:`spike_table`).
SPIKE_DESCRIPTIONS = {
    "spike_frame": "the frame (bin) whose time holds the spike",
    "spike_tick": "ticks from the run's start",
    "spike_time_ms": "time from the run's start, ms",
    "spike_neuron": "the neuron that spiked (model index)",
    "spike_trial": "the trial it spiked in",
}


def spike_table(recording: "Recording") -> dict[str, np.ndarray]:
    """The exact spikes behind the frames, one entry each in frame order (see
    :data:`SPIKE_DESCRIPTIONS`), when the run kept them (a spiking run's); empty when it
    kept none (a language model's run)."""
    log = recording.spikes
    if log is None:
        return {}
    tick, neuron, trial = log.arrays()
    per_frame = log.frame_counts()
    return {"spike_frame": np.repeat(np.arange(len(per_frame), dtype=np.int64), per_frame),
            "spike_tick": np.asarray(tick, dtype=np.int64),
            "spike_time_ms": np.asarray(tick, dtype=np.float64) * log.tick_ms,
            "spike_neuron": np.asarray(neuron, dtype=np.int32),
            "spike_trial": np.asarray(trial, dtype=np.int32)}


def run_attributes(recording: "Recording", anatomy: Anatomy | None) -> dict[str, Any]:
    """The run's description as flat attributes (numbers and strings; nested values
    as JSON text), for formats whose attributes cannot nest."""
    meta = recording.metadata
    attrs: dict[str, Any] = {"flyviz_version": __version__, "prompt": str(meta.get("prompt", "")),
                             "text": recording.text, "model": str(meta.get("model", "")),
                             "model_name": str(meta.get("model_name", "")),
                             "states_dtype": recording.states_dtype.name,
                             "anatomy": anatomy.kind if anatomy is not None and anatomy.kind
                             in _POSITION_KINDS else ("labels" if anatomy is not None else "none")}
    for key in ("temperature", "top_p"):
        if isinstance(meta.get(key), (int, float)):
            attrs[key] = float(meta[key])
    for key in ("seed", "max_new_tokens", "top_k"):
        if isinstance(meta.get(key), int) and not isinstance(meta.get(key), bool):
            attrs[key] = int(meta[key])
    for key in ("model_identity", "interventions", "comparison"):
        if meta.get(key) is not None:
            attrs[key] = json.dumps(meta[key], sort_keys=True)
    for key, value in meta.items():
        # Every other key the run's kind wrote (a spiking run's kind, state_units and its
        # spiking block...): kept as is where an attribute can hold it, else as JSON.
        if key in attrs or not isinstance(key, str):
            continue
        plain = isinstance(value, (str, int, float)) and not isinstance(value, bool)
        attrs[key] = value if plain else json.dumps(value, sort_keys=True)
    if recording.baseline is not None:
        # The untouched run's own description: its settings, no interventions.
        attrs["baseline_text"] = recording.baseline.text
        attrs["baseline_metadata"] = json.dumps(recording.baseline.metadata, sort_keys=True)
    if anatomy is None:
        attrs["neuron_labels"] = ("none: the recording stores no anatomy; pass the model it was "
                                  "recorded with to add labels and positions")
    if recording.spikes is not None:
        attrs["spike_tick_ms"] = float(recording.spikes.tick_ms)
        attrs["spikes"] = int(recording.spikes.count)
    return attrs


def default_timing(recording: "Recording") -> "FrameTiming":
    """How ``recording``'s frames are timed when a caller gives no timing: as its kind says
    (:meth:`flyviz.kinds.ModelKind.frame_timing`, through :mod:`flyviz.record_hooks`: this
    layer imports no kind), else a token each."""
    from flyviz import record_hooks

    found = record_hooks.frame_timing(recording) if record_hooks.frame_timing else None
    return found if isinstance(found, FrameTiming) else FrameTiming()


def state_attributes(recording: "Recording", timing: "FrameTiming | None" = None
                     ) -> dict[str, str]:
    """What a recording's state values are, as a variable's ``long_name`` and ``units``: from
    ``timing`` (default: the recording's kind's, :meth:`flyviz.kinds.ModelKind.frame_timing`),
    the units the run stored (metadata ``state_units``) winning: a spiking run's rates are
    ``"firing rate in the bin"`` in ``"Hz"``, a language model's states ``"1"``."""
    timing = timing or default_timing(recording)
    units = recording.metadata.get("state_units")
    if not isinstance(units, str) or not units:
        units = timing.unit
    return {"long_name": timing.label, "units": units}


def _texts(values: Any) -> np.ndarray:
    """A fixed-width unicode array (``<U``, never an object array: no pickling anywhere)."""
    values = [str(v) for v in values]
    width = max((len(v) for v in values), default=1) or 1
    return np.array(values, dtype=f"<U{width}")


# ------------------------------------------------------------------ xarray
def to_xarray(recording: "Recording", model: Any = None, *,
              timing: "FrameTiming | None" = None) -> Any:
    """The recording as an :class:`xarray.Dataset` with dims ``token`` × ``neuron``.

    See the module documentation for its variables, coordinates and
    attributes. The states are not copied: a loaded recording's are its
    file's memory map (checked first if it was opened with
    ``verify=False``); a run still in memory shares its blocks (through dask
    when installed, else they are joined once).

    Parameters
    ----------
    recording
        The run.
    model
        The model it was recorded with (what :func:`flyviz.load` returned, a
        checkpoint, or an anatomy): adds the neuron labels and positions.
        Without it the neurons carry only their index (the recording does
        not store the anatomy), and the attribute ``neuron_labels`` says so.
    timing
        How the frames are timed (:class:`FrameTiming`), whose label and unit name the
        states (:func:`state_attributes`); default: the recording's kind's.

    Raises
    ------
    MissingDependencyError
        When xarray is not installed (``pip install 'flyviz[data]'``).
    RecordingError
        When ``model`` has another number of neurons.
    """
    xr = require_module("xarray", "Recording.to_xarray", "data")
    anatomy = anatomy_of(model, recording.neurons)
    tokens = token_table(recording)
    top_ids, top_probabilities = recording.top_k_arrays()
    neurons = neuron_table(anatomy, recording.neurons)
    coords: dict[str, Any] = {"token": np.arange(len(recording), dtype=np.int64)}
    coords.update({name: ("token", values) for name, values in tokens.items()})
    coords["neuron"] = neurons.pop("neuron")
    coords.update({name: ("neuron", values) for name, values in neurons.items()})
    state_attrs = state_attributes(recording, timing)
    dataset = xr.Dataset(
        {"state": (("token", "neuron"), _lazy_states(recording), state_attrs),
         "top_k_id": (("token", "rank"), top_ids,
                      {"long_name": "most likely next tokens (-1 pads)"}),
         "top_k_probability": (("token", "rank"), top_probabilities,
                               {"long_name": "their probabilities (0 pads)"}),
         "top_k_text": (("token", "rank"), top_k_texts(recording),
                        {"long_name": "their texts (\"\" pads)"})},
        coords=coords, attrs=run_attributes(recording, anatomy))
    base = recording.baseline
    if base is not None:
        # The untouched run has its own frame count (a free-running comparison's runs may
        # end at different lengths), so its own token axis; frame i of both runs is the
        # same position, so baseline_token i lines up with token i.
        dataset = dataset.assign_coords(baseline_token=np.arange(len(base), dtype=np.int64))
        dataset["baseline_state"] = (("baseline_token", "neuron"), _lazy_states(base),
                                     {**state_attrs, "long_name": "the untouched run's "
                                      + state_attrs["long_name"]})
        for name, values in baseline_table(recording).items():
            dims = ("baseline_token",) if values.ndim == 1 else ("baseline_token",
                                                                 "baseline_rank")
            if values.ndim == 1:
                dataset = dataset.assign_coords({name: (dims, values)})
            else:
                dataset[name] = (dims, values, {"long_name": "the untouched run's "
                                                + name.removeprefix("baseline_")})
        for name, values in comparison_table(recording).items():
            dataset[name] = ("token", values, {"long_name": COMPARISON_DESCRIPTIONS[name]})
    for name, values in spike_table(recording).items():
        dataset[name] = ("spike", values, {"long_name": SPIKE_DESCRIPTIONS[name]})
    for name in "xyz":
        if name in dataset.coords:
            dataset[name].attrs.update(units="um", long_name=f"soma {name} (NaN: unknown)")
    return dataset


def _lazy_states(recording: "Recording") -> Any:
    """The stored states, (frames, neurons), with no copy where that can be avoided."""
    parts = recording.state_blocks()
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return np.zeros((0, recording.neurons), dtype=recording.states_dtype)
    try:
        import dask.array as da
    except ImportError:
        return np.concatenate(parts)
    return da.concatenate([da.from_array(p, chunks=(ZARR_TOKENS_PER_CHUNK, -1)) for p in parts])


# ------------------------------------------------------------------ Zarr
def to_zarr(recording: "Recording", path: str | Path, model: Any = None, *,
            timing: "FrameTiming | None" = None) -> Path:
    """Write the recording as a Zarr store (chunked along tokens), readable lazily.

    The dataset is :func:`to_xarray`'s with every text coordinate stored as
    integer codes plus a table of the texts (attribute ``flyviz_labels``);
    :func:`open_zarr` reads it back as :func:`to_xarray` made it; its metadata is
    consolidated, so a plain ``xr.open_zarr(path)`` opens it too. An existing
    Zarr store at ``path`` is replaced once the new one is complete; any
    other existing file or folder, or a store that holds other files too, is
    left alone and refused (:func:`check_replaceable`).

    Raises
    ------
    MissingDependencyError
        When xarray or zarr is not installed (``pip install 'flyviz[data]'``).
    ExportError
        When ``path`` cannot be written.
    """
    require_module("zarr", "Recording.to_zarr", "data")
    check_replaceable(path, "zarr")
    check_writable(path)
    dataset = to_xarray(recording, model, timing=timing)
    encoded = encode_texts(dataset)
    chunk = max(1, min(ZARR_TOKENS_PER_CHUNK, len(recording)))
    encoding = {"state": {"chunks": (chunk, recording.neurons)}}
    if recording.baseline is not None:
        rows = max(1, min(ZARR_TOKENS_PER_CHUNK, len(recording.baseline)))
        encoding["baseline_state"] = {"chunks": (rows, recording.neurons)}
    path = Path(path)

    def write(tmp: Path) -> None:
        with warnings.catch_warnings():
            # Consolidated metadata (every variable's in the root's zarr.json) lets a plain
            # xr.open_zarr(path) open the store in one read and without its warning; zarr 3
            # notes that Zarr format 3 does not specify it yet (zarr-python reads it).
            warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
            encoded.to_zarr(tmp, mode="w", encoding=encoding, consolidated=True)

    return write_folder_atomically(path, write, is_zarr_store)


def open_zarr(path: str | Path) -> Any:
    """Open a store :func:`to_zarr` wrote as the dataset :func:`to_xarray` made (lazily:
    the states are read when used).

    Raises
    ------
    RecordingError
        When ``path`` is not a Zarr store.
    """
    xr = require_module("xarray", "flyviz.record.convert.open_zarr", "data")
    require_module("zarr", "flyviz.record.convert.open_zarr", "data")
    path = Path(path)
    if not is_zarr_store(path):
        raise RecordingError(f"{path} is not a Zarr store")
    try:
        import dask  # noqa: F401
        chunks: Any = {}
    except ImportError:
        chunks = None
    dataset = xr.open_zarr(path, consolidated=False, chunks=chunks)
    return _decode_texts(dataset)


def encode_texts(dataset: Any) -> Any:
    """A copy of an :class:`xarray.Dataset` with every text variable as int32 codes into a
    table stored in its attributes (under :data:`LABELS_ATTR`): how flyviz writes texts to
    Zarr, and what :func:`open_zarr` decodes."""
    out = dataset.copy()
    for name, variable in dataset.variables.items():
        if variable.dtype.kind not in "UO":
            continue
        labels, codes = np.unique(np.asarray(variable.values, dtype=str), return_inverse=True)
        attrs = dict(variable.attrs)
        attrs[LABELS_ATTR] = [str(label) for label in labels]
        out[name] = (variable.dims, codes.astype(np.int32).reshape(variable.shape), attrs)
    return out


def _decode_texts(dataset: Any) -> Any:
    out = dataset.copy()
    for name, variable in dataset.variables.items():
        labels = variable.attrs.get(LABELS_ATTR)
        if labels is None:
            continue
        attrs = {k: v for k, v in variable.attrs.items() if k != LABELS_ATTR}
        table = _texts(labels)
        out[name] = (variable.dims, table[np.asarray(variable.values, dtype=np.intp)], attrs)
    return out


#: The metadata files of a Zarr group or array (version 2 or 3).
ZARR_MARKERS = ("zarr.json", ".zgroup", ".zattrs")
#: The files a Zarr store's own folder holds besides its arrays' and groups' folders.
ZARR_FILES = ZARR_MARKERS + (".zmetadata", ".zarray")


def is_zarr_store(path: Path) -> bool:
    """True when ``path`` is a folder holding a Zarr group or array (version 2 or 3)."""
    return path.is_dir() and any((path / marker).is_file() for marker in ZARR_MARKERS)


def store_strangers(path: Path) -> list[str]:
    """The names, sorted, of what the Zarr store ``path`` holds that is not part of the
    store: a file other than its metadata, or a folder that is not an array or a group
    (what :func:`check_replaceable` keeps from being deleted with the store). A store that
    cannot be listed is taken for holding something."""
    try:
        entries = sorted(path.iterdir())
    except OSError as exc:
        return [f"what cannot be listed ({exc.strerror or exc})"]
    return [entry.name for entry in entries
            if not (entry.name in ZARR_FILES and entry.is_file()
                    or entry.is_dir() and any((entry / marker).is_file()
                                              for marker in ZARR_MARKERS + (".zarray",)))]


def write_folder_atomically(path: Path, write: Callable[[Path], None],
                             replaceable: Callable[[Path], bool]) -> Path:
    """``write`` into a temporary folder beside ``path``, then move it into place; return
    ``path``.

    Parameters
    ----------
    path
        The folder to write.
    write
        Called with the folder to write into (not yet existing).
    replaceable
        Whether an existing ``path`` may be replaced (e.g. :func:`is_zarr_store`).

    Raises
    ------
    ExportError
        One line, when ``path`` exists and may not be replaced, or writing fails.
    """
    if path.exists() and not replaceable(path):
        raise ExportError(f"{path} exists and is not a store flyviz wrote; remove it or choose "
                          "another name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent))
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {folder_refusal(exc, path.parent)}") from None
    try:
        write(tmp / "store")
        # The earlier store is moved aside, not deleted first: should the new one fail to
        # take its place, the old one is put back, and one of the two is always there.
        earlier = tmp / "earlier"
        if path.exists():
            os.replace(path, earlier)
        try:
            os.replace(tmp / "store", path)
        except OSError:
            if earlier.exists():
                os.replace(earlier, path)
            raise
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _write_file_atomically(path: Path, write: Callable[[Path], None]) -> Path:
    """``write`` into a temporary file beside ``path``, then rename it into place."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # The temporary name keeps the suffix: some writers check it.
        tmp = temporary_file_beside(path, f".part{path.suffix}")
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {folder_refusal(exc, path.parent)}") from None
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


# ------------------------------------------------------------------ NumPy
def to_npz(recording: "Recording", path: str | Path, model: Any = None, *,
           timing: "FrameTiming | None" = None) -> Path:
    """Write the recording as one ``.npz`` of plain arrays (no pickles: ``np.load(path)``
    reads it with ``allow_pickle=False``).

    Arrays: ``state`` (tokens, neurons) in the recording's dtype, the token
    table (``position``, ``token_id``, ``token_text``, ``phase``,
    ``predicted_id``, ``predicted_text``, ``probability``, ``mean_abs_state``,
    ``generation_index``), ``top_k_id``, ``top_k_probability``, ``top_k_text``, the
    neuron table (``neuron``, and with ``model`` its labels and ``x``/``y``/``z`` in
    micrometres), a spiking run's spikes (``spike_frame``, ``spike_tick``,
    ``spike_time_ms``, ``spike_neuron``, ``spike_trial``) when it kept them, a
    comparison's untouched run (``baseline_state`` and the same token and top-k arrays
    prefixed ``baseline_``) and per-frame ``kl`` and ``mean_abs_delta``, and
    ``attributes``: the run's description as JSON text (:func:`run_attributes`, with
    ``state_long_name`` and ``state_units``: what the states are, from ``timing``, default
    the recording's kind's, :func:`state_attributes`).
    """
    anatomy = anatomy_of(model, recording.neurons)
    check_writable(path)
    top_ids, top_probabilities = recording.top_k_arrays()
    arrays: dict[str, np.ndarray] = {"state": _lazy_states(recording)}
    arrays.update(token_table(recording))
    arrays["top_k_id"], arrays["top_k_probability"] = top_ids, top_probabilities
    arrays.update(neuron_table(anatomy, recording.neurons))
    arrays["top_k_text"] = top_k_texts(recording)
    arrays.update(spike_table(recording))
    if recording.baseline is not None:
        arrays["baseline_state"] = _lazy_states(recording.baseline)
        arrays.update(baseline_table(recording))
        arrays.update(comparison_table(recording))
    attributes = run_attributes(recording, anatomy)
    described = state_attributes(recording, timing)
    attributes.update(state_long_name=described["long_name"], state_units=described["units"])
    arrays["attributes"] = np.array(json.dumps(attributes))
    path = Path(path)

    def write(tmp: Path) -> None:
        savez: Any = np.savez  # its stub types **arrays as its keyword options
        with open(tmp, "wb") as handle:
            savez(handle, **{k: np.asarray(v) for k, v in arrays.items()})

    return _write_file_atomically(path, write)


# ------------------------------------------------------------------ NWB
def to_nwb(recording: "Recording", path: str | Path, model: Any = None, *,
           session_start_time: Any = None, timing: FrameTiming | None = None) -> Path:
    """Write the recording as an NWB file (HDF5), for neuroscience tools.

    Layout:

    - ``processing/flyviz/Fluorescence/states``: a ``RoiResponseSeries``,
      data (tokens, neurons), time first, one token per second
      (``rate=1``, time = the token's position; a spiking run's bins at their real
      length, e.g. ``rate=100`` for 10 ms bins, its rates in Hz), over
    - ``processing/flyviz/ImageSegmentation/neurons``: a table of the model's
      neurons (a ``PlaneSegmentation``; NWB's table of cells) with columns
      ``body_id``, ``superclass``, ``side``, ``cell_type``, ``x``/``y``/``z``
      (µm, NaN where unknown) when ``model`` is given, and each neuron's soma
      voxel (8 nm voxels, weight 0 where unknown) as its ``voxel_mask``;
    - ``intervals/tokens``: one interval per token ``[t, t+1)`` with its
      ``position``, ``token_id``, ``token_text``, ``phase``, ``predicted_id``,
      ``predicted_text``, ``probability``, ``mean_abs_state``, ``generation_index``
      and the ragged ``top_k_id``, ``top_k_probability``, ``top_k_text`` (a spiking
      run: ``intervals/bins``, one per bin in seconds with its spike count);
    - a comparison's only: ``processing/flyviz/Fluorescence/baseline_states``, the
      untouched run's states over the same neurons and clock, ``intervals/baseline_tokens``
      its token table (a spiking run's: ``intervals/baseline_bins``, its bins), and the
      columns ``kl`` and ``mean_abs_delta`` of
      ``intervals/tokens`` (NaN where the untouched run has no such frame);
    - ``units``, a spiking run's only: one row per neuron that spiked (its id the
      model index), its ``spike_times`` in seconds from the run's start and, per
      spike, its ``spike_trial``, and with ``model`` its identity in the connectome:
      ``body_id`` (body id / root id), and ``cell_type``, ``superclass`` and ``side``
      where the model has labels;
    - ``notes``: the run's description (:func:`run_attributes`) as JSON.

    The device, optical channel and imaging plane NWB requires around a
    ``PlaneSegmentation`` say that the states were computed by flyviz, not
    imaged. The states are written as float32 (NWB has no float16), in
    blocks, never all in memory.

    Parameters
    ----------
    session_start_time
        The NWB session start (timezone-aware ``datetime``); default: now.
    timing
        How the frames are timed (:class:`FrameTiming`); default: as the recording's kind
        says (``kind_of_recording(recording).frame_timing(recording)``: a language run's
        tokens one a second, a spiking run's bins at their length).

    Raises
    ------
    MissingDependencyError
        When pynwb is not installed (``pip install 'flyviz[nwb]'``).
    ExportError
        When ``path`` cannot be written.
    """
    require_module("pynwb", "Recording.to_nwb", "nwb")
    anatomy = anatomy_of(model, recording.neurons)
    path = Path(path)
    if len(recording) == 0:
        raise ExportError("the recording has no frames; run a prompt first")
    _check_free_space(path, _nwb_size(recording))
    frame_timing = timing or default_timing(recording)  # as the other formats

    def write(tmp: Path) -> None:
        from pynwb import NWBHDF5IO

        with warnings.catch_warnings():
            # The response series is built before it is placed in the file; hdmf
            # warns that its table region has no common parent yet.
            warnings.filterwarnings("ignore", message=".*does not share an ancestor.*")
            # pynwb's advice on the file name (the temporary file's, not the user's) and
            # hdmf's notes would come before flyviz's own line on stderr.
            warnings.filterwarnings("ignore", module=r"(pynwb|hdmf)(\..*)?$")
            nwbfile = _nwb_file(recording, anatomy, session_start_time, frame_timing)
            with NWBHDF5IO(str(tmp), "w") as io:
                io.write(nwbfile)

    return _write_file_atomically(path, write)


def _nwb_size(recording: "Recording") -> int:
    """An upper bound of an NWB file's size: float32 states, the neuron table (soma
    voxels, labels) and the token intervals, with a MiB of HDF5's own."""
    spikes = 0 if recording.spikes is None else recording.spikes.count
    return len(recording) * recording.neurons * 4 + recording.neurons * 256 + \
        len(recording) * 512 + spikes * 24 + (1 << 20)


def _check_free_space(path: Path, needed: int) -> None:
    """Refuse now, in one line, a file the disk has no room for: HDF5 does not survive a
    full disk while it writes (a crash, not an error), so it is never handed one. Whether
    the folder takes a file at all is asked first (:func:`check_writable`): a pseudo-file
    system (/proc) reports 0 bytes of 0 free, which is no full disk."""
    import errno

    check_writable(path)
    folder = nearest_existing(path.parent if str(path.parent) else Path("."))
    try:
        usage = shutil.disk_usage(folder)
    except OSError:
        return
    free = usage.free
    if usage.total > 0 and free < needed:
        raise ExportError(f"cannot write {path}: {os.strerror(errno.ENOSPC).lower()} (it needs "
                          f"about {needed / 1e6:,.1f} MB, {free / 1e6:,.1f} MB are free); free "
                          "some space and run again")


def _nwb_file(recording: "Recording", anatomy: Anatomy | None, start: Any,
              timing: FrameTiming) -> Any:
    import datetime

    from hdmf.common import VectorData, VectorIndex
    from hdmf.data_utils import DataChunkIterator
    from pynwb import NWBFile
    from pynwb.ophys import (
        Fluorescence,
        ImageSegmentation,
        OpticalChannel,
        PlaneSegmentation,
        RoiResponseSeries,
    )

    attrs = run_attributes(recording, anatomy)
    model_name = attrs["model_name"] or attrs["model"] or "a Fly LLM"
    nwbfile = NWBFile(
        session_description=f"flyviz run of {model_name} on the prompt {attrs['prompt']!r}",
        identifier=str(uuid.uuid4()),
        session_start_time=start or datetime.datetime.now(datetime.timezone.utc),
        experiment_description="States of a connectome language model (a Fly LLM: the fruit-fly "
                               "central brain as its recurrent layer), one per text token, "
                               "computed by flyviz",
        notes=json.dumps(attrs, sort_keys=True),
        source_script=f"flyviz {__version__}", source_script_file_name="flyviz")
    device = nwbfile.create_device(name="flyviz", description=f"flyviz {__version__}: the "
                                   "model run in software; nothing was imaged")
    channel = OpticalChannel(name="none", description="no optical channel: the states are "
                             "computed, not imaged", emission_lambda=float("nan"))
    plane = nwbfile.create_imaging_plane(
        name="brain", optical_channel=channel, device=device, excitation_lambda=float("nan"),
        description="every neuron of the model's brain (computed, not imaged)",
        indicator="none (model state)", location="central brain (model)", imaging_rate=1.0)
    table = neuron_table(anatomy, recording.neurons)
    ids = table.pop("neuron")
    descriptions = {"body_id": "connectome body id", "superclass": "superclass",
                    "side": "hemisphere side", "cell_type": "cell type",
                    "x": "soma x in micrometres (NaN: unknown)",
                    "y": "soma y in micrometres (NaN: unknown)",
                    "z": "soma z in micrometres (NaN: unknown)"}
    columns: list[Any] = [VectorData(name=name, description=descriptions[name],
                                     data=values.tolist() if values.dtype.kind == "U" else values)
                          for name, values in table.items()]
    # One voxel per neuron, so the ragged column's index is 1, 2, 3, ...
    voxels = VectorData(name="voxel_mask", data=_soma_voxels(anatomy, recording.neurons),
                        description="the soma's voxel (x, y, z in 8 nm voxels, weight 1), or "
                                    "(0, 0, 0) with weight 0 where the position is unknown")
    columns += [voxels, VectorIndex(name="voxel_mask_index", target=voxels,
                                    data=np.arange(1, recording.neurons + 1, dtype=np.int64))]
    neurons = PlaneSegmentation(name="neurons", imaging_plane=plane, id=ids, columns=columns,
                                description="the model's neurons, one row each, in state order "
                                            "(row i is neuron i)")
    module = nwbfile.create_processing_module(name="flyviz", description="the model's states")
    segmentation = ImageSegmentation(name="ImageSegmentation")
    segmentation.add_plane_segmentation(neurons)
    module.add(segmentation)
    region = neurons.create_roi_table_region(region=list(range(recording.neurons)),
                                             description="every neuron, in state order")
    states = RoiResponseSeries(
        name="states", rois=region, unit=timing.unit, rate=1.0 / timing.seconds,
        starting_time=0.0, description=timing.description,
        data=DataChunkIterator(data=_state_rows(recording),
                               maxshape=(len(recording), recording.neurons),
                               dtype=np.dtype(np.float32),
                               buffer_size=_rows_per_block(recording)))
    fluorescence = Fluorescence(name="Fluorescence")
    fluorescence.add_roi_response_series(states)
    base = recording.baseline
    if base is not None and len(base):
        # A comparison's untouched run: a second series over the same neurons, on the
        # same clock (frame i of both runs is the same position).
        fluorescence.add_roi_response_series(RoiResponseSeries(
            name="baseline_states", rois=region, unit=timing.unit, rate=1.0 / timing.seconds,
            starting_time=0.0, description="the untouched run of the comparison: "
            + timing.description,
            data=DataChunkIterator(data=_state_rows(base), maxshape=(len(base), base.neurons),
                                   dtype=np.dtype(np.float32),
                                   buffer_size=_rows_per_block(base))))
    module.add(fluorescence)
    nwbfile.add_time_intervals(_token_intervals(recording) if timing.counted
                               else _frame_intervals(recording, timing))
    if base is not None and timing.counted:
        nwbfile.add_time_intervals(_token_intervals(base, "baseline_tokens",
                                                    "the untouched run's tokens: "))
    elif base is not None and len(base):
        # A timed comparison's untouched run (a spiking run beside its baseline): its bins
        # as the intervened run's are, in a table of their own.
        nwbfile.add_time_intervals(_frame_intervals(base, _baseline_timing(base, timing),
                                                    "baseline_", "the untouched run's "))
    units = _nwb_units(recording, table)
    if units is not None:
        nwbfile.units = units
    return nwbfile


def _token_intervals(recording: "Recording", name: str = "tokens", about: str = "") -> Any:
    """One interval per consumed token of a language model's run, with its token table, its
    top-k candidates (ragged columns: each row as many as the frame has) and, for a
    comparison's intervened run, its per-frame ``kl`` and ``mean_abs_delta``."""
    from pynwb.epoch import TimeIntervals

    tokens = TimeIntervals(name=name, description=f"{about}one interval per consumed token: "
                           "[position, position + 1)")
    token_columns = token_table(recording)
    token_descriptions = {"position": "position in the sequence (0 is BOS)",
                          "token_id": "the token consumed", "token_text": "its text",
                          "phase": "prompt or generation",
                          "predicted_id": "the next token chosen from this state",
                          "predicted_text": "its text", "probability": "its probability",
                          "mean_abs_state": "mean |x| over all neurons",
                          "generation_index": "index among the generated tokens (-1: prompt)"}
    for column, description in token_descriptions.items():
        tokens.add_column(column, description)
    ragged = {"top_k_id": "most likely next tokens, most likely first",
              "top_k_probability": "their probabilities", "top_k_text": "their texts"}
    for column, description in ragged.items():
        tokens.add_column(column, description, index=True)
    compared = comparison_table(recording) if name == "tokens" else {}
    for column in compared:
        tokens.add_column(column, COMPARISON_DESCRIPTIONS[column])
    infos = recording.frame_infos
    for i in range(len(recording)):
        info = infos[i]
        row: dict[str, Any] = {column: token_columns[column][i].item()
                               for column in token_descriptions}
        row.update(top_k_id=[int(v) for v in info.top_k_ids],
                   top_k_probability=[float(v) for v in info.top_k_probabilities],
                   top_k_text=[str(t) for t in info.top_k_text])
        row.update({column: float(values[i]) for column, values in compared.items()})
        tokens.add_row(start_time=float(i), stop_time=float(i + 1), **row)
    return tokens


@dataclass(frozen=True)
class FrameTiming:
    """How an NWB file times a recording's frames: a token each second for a language
    model's run (its position is its time; the default), a run's frames at their real
    length for a model stepped in time (a spiking run's bins, its rates in Hz).

    The recording's kind says which (:meth:`flyviz.kinds.ModelKind.frame_timing`); a
    recording does not know its kind, so a caller that converts a run stepped in time
    passes it (``flyviz convert`` does).
    """

    counted: bool = True   # frames are counted (tokens, one a second), not timed
    seconds: float = 1.0   # one frame's length in the file
    name: str = "token"    # what a frame is called ("token", "bin")
    unit: str = "1"        # the states' unit ("1", "Hz")
    description: str = ("state x of every neuron after each token (time first; time = the "
                        "token's position, one token per second)")
    label: str = "state x after the token"  # what a state value is (a variable's long name)
    #: Where the run ends, s from its start (``None``: a whole frame after the last one's
    #: start); a run that is not a whole number of frames long has a short last frame.
    end_seconds: float | None = None

    @classmethod
    def of_axis(cls, name: str, unit: str, step: float, *, counted: bool,
                state_unit: str = "1", state_label: str = "state",
                end: float | None = None) -> "FrameTiming":
        """The timing of frames named ``name`` on an axis measured in ``unit`` (``"ms"``,
        ``"s"``; or the frame itself: ``counted``), each ``step`` long, the run ending at
        ``end`` (in ``unit``; ``None``: a whole ``step`` after its last frame's start),
        whose states are ``state_label`` in ``state_unit``."""
        per = _SECONDS_PER.get(unit)
        if counted or per is None or not step > 0:
            return cls(name=name)
        seconds = float(step) * per
        end_seconds = None if end is None or not end > 0 else float(end) * per
        spans = f"{name} i spans [i, i + 1) x {seconds:g} s from the run's start"
        if end_seconds is not None:
            spans += f", the last ending at the run's end, {end_seconds:g} s"
        return cls(False, seconds, name, state_unit,
                   f"{state_label} ({state_unit}) of every neuron in each {name} of "
                   f"{step:g} {unit} (time first; {spans})", state_label, end_seconds)

    def stop(self, index: int) -> float:
        """Where frame ``index`` ends, s from the run's start: a whole frame after its
        start, or the run's end (:attr:`end_seconds`) for a short last frame."""
        stop = (int(index) + 1) * self.seconds
        return stop if self.end_seconds is None else min(stop, self.end_seconds)


#: Seconds in each physical unit a kind's time axis may be measured in.
_SECONDS_PER = {"ms": 1e-3, "s": 1.0}


def _frame_intervals(recording: "Recording", timing: FrameTiming, prefix: str = "",
                     about: str = "") -> Any:
    """One interval per frame of a timed recording (a spiking run's bins), with its spike
    count where the run kept its spikes; the table is named ``prefix`` + the frames' name
    (``bins``, ``baseline_bins``) and its description starts with ``about``."""
    from pynwb.epoch import TimeIntervals

    ending = "" if timing.end_seconds is None else \
        f", the last ending at the run's end, {timing.end_seconds:g} s"
    table = TimeIntervals(name=f"{prefix}{timing.name}s", description=f"{about}one interval "
                          f"per {timing.name}: [i, i + 1) x {timing.seconds:g} s{ending}")
    counts = None if recording.spikes is None else recording.spikes.frame_counts()
    if counts is not None:
        table.add_column("spikes", f"the spikes of the {timing.name}, every trial")
    for i in range(len(recording)):
        row: dict[str, Any] = {"start_time": i * timing.seconds, "stop_time": timing.stop(i)}
        if counts is not None:
            row["spikes"] = int(counts[i])
        table.add_row(**row)
    return table


def _baseline_timing(base: "Recording", timing: FrameTiming) -> FrameTiming:
    """How a timed comparison's untouched run's frames are timed: as its own metadata says
    where it is timed in frames of the same length (its run may end elsewhere), else with
    the intervened run's frame length and no short last frame (the end ``timing`` gives is
    the intervened run's, which would cut a longer untouched run's frames)."""
    own = default_timing(base)
    if not own.counted and own.name == timing.name and \
            np.isclose(own.seconds, timing.seconds, rtol=1e-9, atol=0.0):
        return own
    return replace(timing, end_seconds=None)


#: What each identity column of NWB's ``units`` table holds (:func:`_nwb_units`).
UNIT_IDENTITY_DESCRIPTIONS = {
    "body_id": "the neuron's id in the connectome (body id / root id)",
    "cell_type": "the neuron's cell type (\"\": none)",
    "superclass": "the neuron's superclass (\"\": none)",
    "side": "the neuron's hemisphere side (\"\": none)",
}


def _nwb_units(recording: "Recording", table: dict[str, np.ndarray]) -> Any:
    """A spiking run's spikes as NWB's ``units`` table (one row per neuron that spiked,
    its spike times in seconds and each spike's trial), or ``None`` without spikes; each
    unit's identity in the connectome (``body_id``, ``cell_type``, ``superclass``, ``side``)
    where ``table`` (the run's :func:`neuron_table`) has it: the unit's id is only the
    model's index, which means nothing outside the model."""
    spikes = spike_table(recording)
    if not spikes:
        return None
    from hdmf.common import VectorData, VectorIndex
    from pynwb.misc import Units

    neuron, time_ms = spikes["spike_neuron"], spikes["spike_time_ms"]
    order = np.lexsort((spikes["spike_trial"], time_ms, neuron))
    ids, starts = np.unique(neuron[order], return_index=True)
    ends = np.append(starts[1:], order.size).astype(np.int64)
    times = VectorData(name="spike_times", data=time_ms[order] / 1000.0,
                       description="the neuron's spike times, s from the run's start")
    trials = VectorData(name="spike_trial", data=spikes["spike_trial"][order],
                        description="the trial of each of the neuron's spikes")
    columns: list[Any] = [times, VectorIndex(name="spike_times_index", target=times, data=ends),
                          trials, VectorIndex(name="spike_trial_index", target=trials,
                                              data=ends)]
    for name, description in UNIT_IDENTITY_DESCRIPTIONS.items():
        if name in table:
            values = table[name][ids]
            columns.append(VectorData(name=name, description=description,
                                      data=values.tolist() if values.dtype.kind == "U"
                                      else values))
    identity = ("; body_id, cell_type: its identity in the connectome"
                if "body_id" in table else "; the model's neurons were not given, so the "
                "units carry no connectome identity")
    return Units(name="units", id=ids.astype(np.int64).tolist(), columns=columns,
                 description="the neurons that spiked in the run (id: the model's neuron "
                             f"index{identity}), computed by flyviz's spiking engine, not "
                             "recorded")


def _soma_voxels(anatomy: Anatomy | None, neurons: int) -> list[tuple[int, int, int, float]]:
    """Each neuron's soma voxel ``(x, y, z, weight)``: weight 1 where known, else 0."""
    if anatomy is None or anatomy.kind not in _POSITION_KINDS:
        return [(0, 0, 0, 0.0)] * neurons
    voxels = np.rint(np.asarray(anatomy.positions, dtype=np.float64))
    known = np.asarray(anatomy.valid, dtype=bool) & (voxels >= 0).all(axis=1) \
        & (voxels < 2**32).all(axis=1)
    return [(int(v[0]), int(v[1]), int(v[2]), 1.0) if ok else (0, 0, 0, 0.0)
            for v, ok in zip(voxels, known)]


def _rows_per_block(recording: "Recording") -> int:
    return max(1, _BLOCK_BYTES // (recording.neurons * 4))


def _state_rows(recording: "Recording") -> Iterator[np.ndarray]:
    """Every state row as float32 (NWB's numeric types have no float16)."""
    for block in recording.state_blocks():
        for row in block:
            yield np.asarray(row, dtype=np.float32)


# ------------------------------------------------------------------ any
def convert(recording: "Recording", path: str | Path, to: str | None = None,
            model: Any = None, *, timing: FrameTiming | None = None) -> Path:
    """Write ``recording`` as ``to`` (``"zarr"``, ``"nwb"`` or ``"npz"``; default: from
    ``path``'s suffix), NWB's frames timed by ``timing`` (whose label and unit name the
    states in every format; default: the recording's kind's). See :func:`to_zarr`,
    :func:`to_nwb`, :func:`to_npz`."""
    path = Path(path)
    if recording.source is not None:    # the file a loaded recording maps
        to = check_output(recording.source, path, to, feature="convert")
    to = output_format(path, to)
    if to == "nwb":
        return to_nwb(recording, path, model, timing=timing)
    writers = {"zarr": to_zarr, "npz": to_npz}
    return writers[to](recording, path, model, timing=timing)
