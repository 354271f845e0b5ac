"""Verify a loaded checkpoint as its authors do: every file, the graph, the golden traces.

:func:`verify_checkpoint` goes further than loading (which already checks
sizes, the hashes of files up to 64 MB, the cheap dataset checks and the
recomputed frozen-buffer digests):

``files``
    Every file's size and SHA-256 against its manifest, whatever its size
    (for a wordbrain release, every selector's weights file that is present);
    for the ngxson layout, against the digests of the release
    (fly-formats.md section 1.1) or the Hugging Face cache's own blob name.
``dataset``
    All 18 checks of the dataset authors' verifier
    (:func:`~flyviz.model.formats.dataset.check_dataset`), the browser's int16
    weights included (checks 13-14, computed here as the authors' verifier
    does: in float32, passing up to the recorded error times 1.000001). Each
    row carries the number of the authors' check it is
    (:attr:`~flyviz.model.checks.CheckResult.authors_check`); every other
    row is flyviz's own. Where flyviz's rule differs, it is only ever looser
    (a file flyviz does not need is skipped, not failed), so flyviz never
    fails a dataset the authors' verifier passes.
``binding``
    The weights' frozen-buffer digests against the ones recomputed from the
    graph they run with.
``checkpoint``
    Shapes, index ranges and finite values (:func:`validate_checkpoint`).
``release``
    For a wordbrain release, the safetensors metadata's selector name: the
    authors write ``minimum_validation_ce``/``maximum_validation_accuracy``;
    the file stems flyviz wrote before (``min-ce``/``max-accuracy``) are read
    with a note, never failed.
``golden``
    A replay of every golden trace the manifest carries (section 4.3; a
    release's are in ``web/manifest.json`` when ``web/`` holds these very
    weights): identical tokens, top-1 probability within 2e-4, mean |x|
    within 2e-5, as ``space/test/parity.mjs`` demands. Then, stricter than
    parity.mjs on purpose, the final state: the state after the last step
    the generator ran (the last generated token fed, unless it is EOS), its
    mean |x| within 2e-5 (its SHA-256 is compared too but only reported:
    another summation order changes the last bits).

The report is plain data for ``flyviz verify`` (table or ``--json``) and for
the app, which can run it in a background thread: ``progress`` reports each
stage and ``should_stop`` ends it early.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.model.checkpoint import Checkpoint, validate_checkpoint
from flyviz.model.checks import (FAIL, PASS, SKIP, CheckResult, Progress, numbered,
                                 quantised_checks)
from flyviz.model.errors import CheckpointError, FlyvizError
from flyviz.model.formats.common import hash_file, sha256_file, whole_number
from flyviz.model.tokenizer import start_ids

#: Golden-trace tolerances of ``space/test/parity.mjs`` (fly-formats.md section 4.3).
PROBABILITY_TOLERANCE = 2e-4
MEAN_ABS_TOLERANCE = 2e-5

#: SHA-256 of released files whose digest fly-formats.md records, by (name, size).
RELEASED_FILES = {
    ("model.safetensors", 284_134_372):
        "355f06c44d14e38af50e9c801f51839c37a0a56ac4ca016da2be9b3ae6f215ad",
    ("tokenizer.json", 54_528):
        "23fa13e034934738acffb418c9cbaa36d2f95e4d14b576e5d5313857feb81efb",
}

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


@dataclass
class GoldenResult:
    """The replay of one golden trace.

    Parameters
    ----------
    prompt
        The trace's prompt.
    expected_tokens, replayed_tokens
        Generated ids of the trace and of the replay.
    max_probability_error, max_mean_abs_error
        Largest |difference| of the top-1 probability and of mean |x| over
        the steps compared.
    failure
        ``None`` when the steps matched (parity.mjs's rules), else one line
        naming the step.
    failed_step
        The first step that did not match (0-based), or ``None``.
    final_state_error
        |difference| of the final state's mean |x| (``None``: not compared).
    final_state_failure
        ``None`` unless the final state is off (flyviz's own, stricter check).
    final_state_sha256_identical
        Whether the final state's bytes are identical (``None``: no digest
        recorded or not compared); reported, never failed.
    final_state_fed_last
        True when the final state is one step past the last entry's (the
        trace stopped at its length, not at EOS).
    """

    prompt: str
    expected_tokens: list[int]
    replayed_tokens: list[int]
    max_probability_error: float = 0.0
    max_mean_abs_error: float = 0.0
    failure: str | None = None
    failed_step: int | None = None
    final_state_error: float | None = None
    final_state_failure: str | None = None
    final_state_sha256_identical: bool | None = None
    final_state_fed_last: bool = False

    @property
    def passed(self) -> bool:
        """True when every token matched within the tolerances, the final state too."""
        return self.failure is None and self.final_state_failure is None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON form."""
        return {"prompt": self.prompt, "passed": self.passed, "failure": self.failure,
                "failed_step": self.failed_step, "expected_tokens": self.expected_tokens,
                "replayed_tokens": self.replayed_tokens,
                "max_probability_error": self.max_probability_error,
                "max_mean_abs_error": self.max_mean_abs_error,
                "final_state_error": self.final_state_error,
                "final_state_failure": self.final_state_failure,
                "final_state_sha256_identical": self.final_state_sha256_identical,
                "final_state_fed_last": self.final_state_fed_last}


@dataclass
class VerificationReport:
    """Everything :func:`verify_checkpoint` found.

    Parameters
    ----------
    model, layout, source, dataset
        What was verified.
    checks
        Every check, in order (golden traces included, group ``"golden"``).
    golden
        The golden-trace replays in detail.
    cancelled
        True when ``should_stop`` ended the verification early.
    """

    model: str
    layout: str
    source: str | None
    dataset: str | None
    checks: list[CheckResult] = field(default_factory=list)
    golden: list[GoldenResult] = field(default_factory=list)
    cancelled: bool = False

    @property
    def failures(self) -> list[CheckResult]:
        """The failed checks."""
        return [c for c in self.checks if c.status == FAIL]

    @property
    def passed(self) -> bool:
        """True when verification ran to the end and no check failed."""
        return not self.cancelled and not self.failures

    def counts(self) -> dict[str, int]:
        """``{"pass": .., "fail": .., "skip": ..}``."""
        return {status: sum(c.status == status for c in self.checks)
                for status in (PASS, FAIL, SKIP)}

    def summary(self) -> str:
        """One line for a status bar or the end of ``flyviz verify``."""
        c = self.counts()
        golden = (f"; {sum(g.passed for g in self.golden)} of {len(self.golden)} golden traces "
                  "match" if self.golden else "; no golden traces to replay")
        if self.cancelled:
            return f"verification stopped after {sum(c.values())} checks"
        if self.failures:
            first = self.failures[0]
            return (f"NOT verified: {c[FAIL]} of {sum(c.values())} checks failed, the first: "
                    f"{first.name}: {first.detail}")
        return f"verified: {c[PASS]} checks passed, {c[SKIP]} skipped{golden}"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON form (``flyviz verify --json``)."""
        return {"model": self.model, "layout": self.layout, "source": self.source,
                "dataset": self.dataset, "passed": self.passed, "cancelled": self.cancelled,
                "counts": self.counts(), "summary": self.summary(),
                "checks": [c.to_dict() for c in self.checks],
                "golden": [g.to_dict() for g in self.golden]}


class _Stopped(Exception):
    """``should_stop`` asked to end the verification."""


class _Run:
    """State of one verification: results, progress, cancellation."""

    def __init__(self, report: VerificationReport, progress: Progress | None,
                 should_stop: Callable[[], bool] | None) -> None:
        self.report = report
        self._progress = progress
        self._should_stop = should_stop
        self._fraction = 0.0

    def step(self, label: str, fraction: float) -> None:
        if self._should_stop is not None and self._should_stop():
            raise _Stopped
        # Never backwards, whatever the stages' rounding.
        self._fraction = max(self._fraction, float(min(1.0, max(0.0, fraction))))
        if self._progress is not None:
            self._progress(label, self._fraction)

    def add(self, group: str, name: str, status: str, detail: str = "",
            authors_check: int | None = None) -> None:
        self.report.checks.append(CheckResult(group, name, status, detail, authors_check))


# ----------------------------------------------------------------------------- files
def _git_blob_sha1(path: Path) -> str:
    """The git object id of a file (how a hub cache names a small file's blob)."""
    return hash_file(path, hashlib.sha1(f"blob {path.stat().st_size}\0".encode()))


def _check_file(run: _Run, path: Path, expected: str | None, size: int | None = None,
                label: str | None = None) -> None:
    """Size and SHA-256 of one file against a recorded digest, the release's or the hub cache's."""
    name = label or path.name
    if not path.is_file():
        run.add("files", f"sha256 {name}", FAIL, f"{path} is missing; download it again")
        return
    actual_size = path.stat().st_size
    if size is not None:
        try:
            size = whole_number(size, name)
        except CheckpointError:
            run.add("files", f"sha256 {name}", FAIL, f"the manifest gives {name} a size of "
                                                      f"{size!r:.40}, not a whole number of "
                                                      "bytes; the manifest is damaged, download "
                                                      "it again")
            return
        if actual_size != size:
            run.add("files", f"sha256 {name}", FAIL, f"{name} is {actual_size:,} bytes but the "
                                                      f"manifest says {size:,}; the file is "
                                                      "truncated or damaged, download it again")
            return
    source = "manifest"
    if not expected:
        expected = RELEASED_FILES.get((path.name, actual_size))
        source = "release"
    blob = path.resolve()
    if not expected and blob.parent.name == "blobs" and _HEX64.match(blob.name):
        expected, source = blob.name, "Hugging Face cache"  # an LFS file is stored by its SHA-256
    if not expected and blob.parent.name == "blobs" and _HEX40.match(blob.name):
        actual = _git_blob_sha1(path)  # a small file is stored by its git blob SHA-1
        ok = actual == blob.name
        run.add("files", f"git sha1 {name}", PASS if ok else FAIL,
                f"{actual[:16]}... (Hugging Face cache)" if ok else
                f"{name}: git blob SHA-1 {actual[:12]}... does not match the Hugging Face "
                f"cache's {blob.name[:12]}...; the download is damaged, delete it from the "
                "cache and download it again")
        return
    if not expected:
        run.add("files", f"sha256 {name}", SKIP, "no digest is recorded for this file")
        return
    actual = sha256_file(path)
    ok = actual.lower() == str(expected).lower()
    run.add("files", f"sha256 {name}", PASS if ok else FAIL,
            f"{actual[:16]}... ({source})" if ok else
            f"{name}: SHA-256 {actual[:12]}... does not match the {source}'s "
            f"{str(expected)[:12]}...; the file is damaged or from another release, download it "
            "again")


def _read_manifest(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _check_model_files(run: _Run, ckpt: Checkpoint) -> dict[str, Any]:
    """The model folder's files; returns its manifest (``{}`` if none)."""
    source = Path(ckpt.source) if ckpt.source is not None else None
    if source is None or not source.is_dir():
        run.add("files", "model files", SKIP, "the checkpoint was not loaded from a folder")
        return {}
    manifest = _read_manifest(source)
    if ckpt.layout == "fly-llm-hf":
        for name in ("config.json", "model.safetensors"):
            _check_file(run, source / name, None)
    elif ckpt.layout == "wordbrain":
        from flyviz.model.formats.wordbrain import (selector_entry, selector_entry_problem,
                                                   selector_names, weights_digest)

        weights = str(ckpt.metadata.get("weights_file", "min-ce.safetensors"))
        if not manifest:
            run.add("files", "manifest.json", SKIP, "the folder has no manifest.json, so the "
                                                    "weights' digest is unknown")
        selectors = manifest.get("selectors")
        damaged: set[str | None] = set()
        for key, entry in (selectors.items() if isinstance(selectors, dict) else ()):
            # Another selector's damaged entry: the loaded one's stopped the load already.
            problem = selector_entry_problem(str(key), entry)
            if problem:
                run.add("files", f"selector {key}", FAIL, problem)
                damaged.add(selector_names(manifest).get(str(key)))
        # Every selector's file, the loaded one first: a release is checked whole (a file
        # whose entry is damaged has failed above, and has no digest to check against).
        others = [f for f in dict.fromkeys(selector_names(manifest).values())
                  if f != weights and f not in damaged]
        for name in (weights, *others):
            if name != weights and not (source / name).is_file():
                run.add("files", f"sha256 {name}", SKIP, "another selector's weights, not "
                                                         "downloaded")
                continue
            digest = weights_digest(selector_entry(manifest, name)) if manifest else None
            if manifest and not digest:
                # The authors' packagers always record it: a selector without one is a
                # damaged manifest, not a file that cannot be checked.
                run.add("files", f"sha256 {name}", FAIL,
                        f"the manifest's selector entry of {name} records no "
                        "safetensors_sha256; the manifest is damaged, download it again")
                continue
            _check_file(run, source / name, digest)
    elif ckpt.layout == "recital-web":
        files = manifest.get("files")
        for key, entry in (files.items() if isinstance(files, dict) else ()):
            if isinstance(entry, dict):
                _check_file(run, source / str(entry.get("file", f"{key}.f32")),
                            entry.get("sha256"), entry.get("bytes"))
    tokenizer = ckpt.tokenizer_path
    if tokenizer is not None and Path(tokenizer).is_file():
        _check_file(run, Path(tokenizer), None, label="tokenizer.json")
        # No digest is recorded for it: reading it is what says it is whole (a truncated one
        # passed verify and then stopped generate).
        from flyviz.model.tokenizer import TokenizerError, tokenizer_for

        try:
            vocab = tokenizer_for(ckpt).vocab_size
        except TokenizerError as exc:
            run.add("files", "tokenizer.json reads", FAIL, f"{exc}; download it again")
        else:
            run.add("files", "tokenizer.json reads", PASS,
                    f"{vocab:,} tokens, within the model's {ckpt.config.vocabulary:,}")
    return manifest


# ----------------------------------------------------------------------- graph binding
def _model_frozen_digests(ckpt: Checkpoint) -> dict[str, str]:
    return {k.split("/", 1)[1]: v for k, v in ckpt.digests.items() if k.startswith("model/")}


def _check_binding(run: _Run, ckpt: Checkpoint, dataset_files: Any) -> None:
    """The weights' frozen-buffer digests against the graph they run with."""
    from flyviz.model.formats.common import EDGE_GROUP_INDEX, empty_index_digests
    from flyviz.model.digests import frozen_buffer_digests

    if ckpt.layout == "fly-llm-hf":
        # The checkpoint carries its graph; a dataset beside it must describe the same one.
        if dataset_files is None:
            run.add("binding", "graph", SKIP, "model.safetensors carries its own graph")
            return
        recorded = dataset_files.manifest.get("frozen_buffers_sha256") or {}
        own = frozen_buffer_digests(ckpt)
        for name, digest in own.items():
            want = recorded.get(name) if isinstance(recorded, dict) else None
            if not want:
                run.add("binding", name, SKIP, "the dataset records no digest for it")
                continue
            ok = str(want).lower() == digest
            run.add("binding", name, PASS if ok else FAIL, f"{digest[:16]}..." if ok else
                    f"the dataset's anatomy belongs to another graph: {name} of "
                    f"model.safetensors is {digest[:12]}..., the dataset records "
                    f"{str(want)[:12]}...; use the dataset released with this model")
        return
    model = _model_frozen_digests(ckpt)
    if not model:
        run.add("binding", "frozen digests", SKIP, "the model's manifest records no frozen-buffer "
                                                   "digests")
        return
    graph = dataset_files.graph_digests() if dataset_files is not None else {
        k.split("/", 1)[1]: v for k, v in ckpt.digests.items() if k.startswith("graph/")}
    control = ckpt.metadata.get("graph") if ckpt.layout == "wordbrain" else None
    if isinstance(control, dict) and control.get("w_indices_sha256"):
        # A graph-control release runs on indices rebuilt from the dataset's (the loader
        # refused any other digest): bind the weights to those, recomputed here.
        from flyviz.model.formats.common import array_digest

        graph = dict(graph)
        graph["brain.w_indices"] = array_digest(np.asarray(ckpt.w_indices), "int32")
        receipt = f"; {control['receipt']}" if control.get("receipt") else ""
        run.add("binding", "control graph", PASS,
                f"{control.get('control')}: rebuilt from the dataset, "
                f"{control.get('repaired_slots')} repaired slots as recorded{receipt}")
    for name, digest in model.items():
        if name == EDGE_GROUP_INDEX:
            empty = str(digest).lower() in empty_index_digests()
            run.add("binding", name, PASS if empty else SKIP,
                    "empty (no edge groups: fixed plasticity)" if empty else
                    "not the empty index: flyviz cannot check edge groups")
            continue
        have = graph.get(name)
        if have is None:
            run.add("binding", name, SKIP, "the dataset has no file to recompute it from")
            continue
        ok = str(digest).lower() == have.lower()
        run.add("binding", name, PASS if ok else FAIL, f"{have[:16]}... (recomputed)" if ok else
                f"these weights were trained on another graph: {name} is {str(digest)[:12]}... "
                f"in the model's manifest but {have[:12]}... recomputed from the dataset; use "
                "the dataset these weights were released with")


# ---------------------------------------------------------------------- golden traces
def golden_traces(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The golden traces a manifest carries (web export ``golden``, or a wordbrain
    manifest's ``web_export.golden``)."""
    candidates: list[Any] = [manifest.get("golden")]
    web = manifest.get("web_export")
    if isinstance(web, dict):
        candidates.append(web.get("golden"))
    for value in candidates:
        if isinstance(value, list) and value:
            return [t for t in value if isinstance(t, dict)]
    return []


def _finite_or_none(value: Any, what: str) -> None:
    """Raise ``ValueError`` naming ``what`` unless ``value`` is ``None`` or a finite number
    (text or a list would fail mid-replay; NaN would pass every comparison)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not math.isfinite(value)):
        raise ValueError(f"{what} is {value!r:.40}, not a finite number")


def replay_golden(engine: Any, trace: dict[str, Any], tokenizer: Any = None,
                  eos_token_id: int | None = None) -> GoldenResult:
    """Replay one golden trace greedily and compare it step by step, then its final state.

    Parameters
    ----------
    engine
        An :class:`~flyviz.model.engine.Engine` (reset here).
    trace
        ``{prompt, prompt_ids, tokens, steps: [{token, top1_probability,
        mean_abs_state}], final_state_mean_abs, final_state_sha256, ...}``.
    tokenizer
        Used only when the trace has no ``prompt_ids``.
    eos_token_id
        Generation stops here (default: the engine's config, whose ``None`` means the
        model has no EOS and the replay runs the trace's length).

    Returns
    -------
    GoldenResult
        ``failure`` as ``parity.mjs`` has it: the first differing token (the
        replay stops there), any step outside the tolerances, or a different
        length. ``final_state_failure``: the state after the last step the
        generator ran (the last token fed unless it is EOS) is more than
        2e-5 off in mean |x|.
    """
    from flyviz.model.engine import softmax

    prompt = str(trace.get("prompt", ""))
    eos = engine.config.eos_token_id if eos_token_id is None else int(eos_token_id)
    try:
        prompt_ids = [int(t) for t in trace["prompt_ids"]] if trace.get("prompt_ids") else None
        if prompt_ids is None:
            if tokenizer is None:
                raise KeyError("prompt_ids")
            prompt_ids = start_ids(tokenizer, engine.config.bos_token_id) + tokenizer.encode(prompt)
        steps = trace.get("steps") or [{"token": t} for t in trace.get("tokens", [])]
        expected = [int(s["token"]) for s in steps]
        for i, s in enumerate(steps):
            for key in ("top1_probability", "mean_abs_state"):
                _finite_or_none(s.get(key), f"step {i}'s {key}")
        _finite_or_none(trace.get("final_state_mean_abs"), "final_state_mean_abs")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return GoldenResult(prompt, [], [], failure=f"the golden trace is malformed ({exc})")
    if not prompt_ids or any(not 0 <= t < engine.config.vocabulary for t in prompt_ids):
        return GoldenResult(prompt, expected, [], failure="the golden trace's prompt ids are "
                                                          "outside the vocabulary")
    result = GoldenResult(prompt, expected, [])

    def fail(step: int, text: str) -> None:
        if result.failure is None:
            result.failure, result.failed_step = f"step {step}: {text}", step

    engine.reset()
    logits: np.ndarray = np.zeros(0, np.float32)
    for token in prompt_ids:
        logits = engine.step(token)
    for i, step in enumerate(steps):
        probabilities = softmax(logits)
        token = int(np.argmax(logits))
        result.replayed_tokens.append(token)
        if token != expected[i]:
            fail(i, f"token {token} replayed, {expected[i]} expected")
            break
        if step.get("top1_probability") is not None:
            error = abs(float(probabilities[token]) - float(step["top1_probability"]))
            result.max_probability_error = max(result.max_probability_error, error)
            if error > PROBABILITY_TOLERANCE:
                fail(i, f"top-1 probability {float(probabilities[token]):.6f}, expected "
                        f"{float(step['top1_probability']):.6f} (|diff| {error:.2g} > "
                        f"{PROBABILITY_TOLERANCE:g})")
        if step.get("mean_abs_state") is not None:
            error = abs(engine.mean_abs_state - float(step["mean_abs_state"]))
            result.max_mean_abs_error = max(result.max_mean_abs_error, error)
            if error > MEAN_ABS_TOLERANCE:
                fail(i, f"mean |x| {engine.mean_abs_state:.7f}, expected "
                        f"{float(step['mean_abs_state']):.7f} (|diff| {error:.2g} > "
                        f"{MEAN_ABS_TOLERANCE:g})")
        if eos is not None and token == eos:
            break
        # As the generator: every token but EOS is fed, the last one too, so the final
        # state is one step past the last entry's when the trace stopped at its length.
        logits = engine.step(token)
        result.final_state_fed_last = i == len(steps) - 1
    if result.failure is None and len(result.replayed_tokens) != len(expected):
        fail(len(result.replayed_tokens), f"the replay stopped after "
                                          f"{len(result.replayed_tokens)} tokens, the trace has "
                                          f"{len(expected)}")
    final = trace.get("final_state_mean_abs")
    if result.failure is None and final is not None:
        error = abs(engine.mean_abs_state - float(final))
        result.final_state_error = error
        if error > MEAN_ABS_TOLERANCE:
            after = (f"after feeding the last token, step {len(expected) - 1}"
                     if result.final_state_fed_last else f"at step {len(expected) - 1}, EOS "
                                                         "not fed")
            result.final_state_failure = (
                f"final state ({after}): mean |x| {engine.mean_abs_state:.7f}, expected "
                f"{float(final):.7f} (|diff| {error:.2g} > {MEAN_ABS_TOLERANCE:g})")
        recorded = trace.get("final_state_sha256")
        if recorded:
            actual = hashlib.sha256(np.ascontiguousarray(engine.state, "<f4").tobytes())
            result.final_state_sha256_identical = actual.hexdigest() == str(recorded).lower()
    return result


def _golden_source(run: _Run, ckpt: Checkpoint, manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest whose golden traces belong to these weights (``{}`` if none).

    A web export's own; for a release, ``web/manifest.json`` when ``web/``
    holds exactly these weights (its files' SHA-256 against the loaded
    parameters): a release's web export is of one selector only.
    """
    if ckpt.layout != "wordbrain" or golden_traces(manifest) or ckpt.source is None:
        return manifest
    from flyviz.model.digests import parameter_digests

    web_dir = Path(ckpt.source) / "web"
    web = _read_manifest(web_dir)
    files = web.get("files") if isinstance(web.get("files"), dict) else None
    if not files:
        return {}
    ours = parameter_digests(ckpt)
    recorded = {k: str(e.get("sha256", "")).lower() for k, e in files.items()
                if isinstance(e, dict)}
    if any(recorded.get(k) != v for k, v in ours.items()):
        weights = ckpt.metadata.get("weights_file", "these weights")
        run.add("golden", "golden traces", SKIP,
                f"web/ holds other weights than {weights} (a release's web export is of one "
                "selector), so its golden traces are not these weights'")
        return {}
    for key, entry in files.items():
        if isinstance(entry, dict):
            name = str(entry.get("file", f"{key}.f32"))
            _check_file(run, web_dir / name, entry.get("sha256"), entry.get("bytes"),
                        label=f"web/{name}")
    return web


def _check_golden(run: _Run, ckpt: Checkpoint, manifest: dict[str, Any],
                  kernel: str | None = None) -> None:
    """Replay the golden traces of ``manifest`` (from :func:`_golden_source`)."""
    traces = golden_traces(manifest)
    if not traces:
        if not any(c.group == "golden" for c in run.report.checks):
            run.add("golden", "golden traces", SKIP, "the manifest carries no golden traces")
        return
    from flyviz.model.engine import Engine

    tokenizer = None
    if any(not t.get("prompt_ids") for t in traces):
        from flyviz.model.tokenizer import tokenizer_for

        tokenizer = tokenizer_for(ckpt)
    engine = Engine(ckpt, kernel=kernel)
    try:
        for i, trace in enumerate(traces):
            run.step(f"replaying golden trace {i + 1} of {len(traces)}",
                     0.7 + 0.3 * i / len(traces))
            result = replay_golden(engine, trace, tokenizer)
            run.report.golden.append(result)
            label = f"golden {result.prompt[:40]!r}"
            if result.failure is None:
                run.add("golden", label, PASS,
                        f"{len(result.expected_tokens)} tokens identical; max |dp| "
                        f"{result.max_probability_error:.2g}, max |d mean|x|| "
                        f"{result.max_mean_abs_error:.2g} (parity.mjs's rules)")
            else:
                run.add("golden", label, FAIL, f"prompt {result.prompt!r}, {result.failure}")
            if result.final_state_error is None:
                continue
            final = f"final state {result.prompt[:34]!r}"
            bits = ("; bit-identical" if result.final_state_sha256_identical else
                    "; not bit-identical (another summation order), which is not checked"
                    if result.final_state_sha256_identical is False else "")
            where = ("after feeding the last token" if result.final_state_fed_last
                     else "EOS not fed")
            if result.final_state_failure is None:
                run.add("golden", final, PASS,
                        f"mean |x| off by {result.final_state_error:.2g} <= "
                        f"{MEAN_ABS_TOLERANCE:g} ({where}){bits}; flyviz's own, stricter than "
                        "parity.mjs on purpose")
            else:
                run.add("golden", final, FAIL,
                        f"prompt {result.prompt!r}, {result.final_state_failure}; flyviz "
                        "compares the final state too (parity.mjs does not): these weights "
                        "do not end where the trace's generator did")
    finally:
        engine.close()


def _dataset_checks(files: Any, anatomy_only: bool, run: _Run) -> list[CheckResult]:
    """The 18 checks, numbered; 13-14 (int16 weights) computed here, after 8-12."""
    from flyviz.model.formats.dataset import check_dataset

    rows = [numbered(r) for r in check_dataset(
        files, hash_files=True, quantised=False, graph=not anatomy_only,
        progress=lambda label, f: run.step(label, 0.2 + 0.4 * f))]
    if anatomy_only:
        return rows
    at = max((i + 1 for i, r in enumerate(rows) if r.authors_check in range(2, 13)),
             default=len(rows))
    if not any(r.authors_check == 2 and r.status == PASS for r in rows):
        return rows  # the graph files do not hold the manifest's counts: nothing to compare
    return rows[:at] + quantised_checks(files) + rows[at:]


def _check_selector(run: _Run, ckpt: Checkpoint) -> None:
    """A release's selector name; flyviz's older names are read with a note, never failed."""
    from flyviz.model.formats.wordbrain import SELECTOR_NAMES

    name = ckpt.metadata.get("selector")
    authors = ", ".join(SELECTOR_NAMES.values())
    if not name:
        run.add("release", "selector name", SKIP, "the safetensors metadata names no selector")
    elif name in SELECTOR_NAMES.values():
        run.add("release", "selector name", PASS, f"{name} (the authors' name)")
    elif name in SELECTOR_NAMES:
        run.add("release", "selector name", PASS,
                f"note: {name!r} is the name older flyviz versions wrote, read as "
                f"{SELECTOR_NAMES[str(name)]!r} (the authors' name); not an error")
    else:
        run.add("release", "selector name", PASS,
                f"note: {name!r} is not one of the authors' selectors ({authors}); not an error")


# ------------------------------------------------------------------------ the whole
def verify_checkpoint(ckpt: Checkpoint, *, golden: bool = True, progress: Progress | None = None,
                      should_stop: Callable[[], bool] | None = None,
                      kernel: str | None = None) -> VerificationReport:
    """Run every check on a loaded checkpoint and replay its golden traces.

    Parameters
    ----------
    ckpt
        A checkpoint from :func:`flyviz.model.resolve.load_model` (it knows its
        folder, layout and dataset).
    golden
        Replay the golden traces (the slow part: one engine run per trace).
    progress
        ``progress(label, fraction)`` before each stage.
    should_stop
        Polled between checks; when it returns True the report comes back
        with ``cancelled`` set.
    kernel
        Sparse kernel of the engine that replays the golden traces
        (``None``: ``FLYVIZ_KERNEL``, else the default).

    Returns
    -------
    VerificationReport
        :attr:`VerificationReport.passed` is True only when nothing failed.
    """
    dataset = ckpt.metadata.get("dataset")
    report = VerificationReport(model=ckpt.name, layout=ckpt.layout,
                                source=str(ckpt.source) if ckpt.source is not None else None,
                                dataset=str(dataset) if dataset else None)
    run = _Run(report, progress, should_stop)
    try:
        run.step("hashing the model's files", 0.0)
        manifest = _check_model_files(run, ckpt)
        dataset_files = None
        if dataset and Path(str(dataset)).is_dir():
            from flyviz.model.formats.dataset import DatasetFiles

            run.step("checking the connectome dataset", 0.2)
            try:
                dataset_files = DatasetFiles.open(str(dataset))
                report.checks.extend(_dataset_checks(dataset_files,
                                                     ckpt.layout == "fly-llm-hf", run))
            except CheckpointError as exc:
                run.add("dataset", "dataset files", FAIL, str(exc))
        run.step("comparing the frozen-graph digests", 0.6)
        _check_binding(run, ckpt, dataset_files)
        if ckpt.layout == "wordbrain":
            _check_selector(run, ckpt)
        run.step("checking shapes, index ranges and values", 0.65)
        try:
            validate_checkpoint(ckpt)
            run.add("checkpoint", "shapes, index ranges, finite values", PASS,
                    f"{ckpt.config.neurons:,} neurons, {ckpt.n_edges:,} edges, "
                    f"{ckpt.parameter_count():,} parameters")
        except CheckpointError as exc:
            run.add("checkpoint", "shapes, index ranges, finite values", FAIL, str(exc))
        # A release's web/ is hashed whether or not its golden traces are replayed.
        golden_manifest = _golden_source(run, ckpt, manifest)
        if golden:
            try:
                _check_golden(run, ckpt, golden_manifest, kernel)
            except FlyvizError as exc:
                run.add("golden", "golden traces", FAIL, str(exc))
        elif not any(c.group == "golden" for c in report.checks):
            run.add("golden", "golden traces", SKIP, "not replayed (asked not to)")
        run.step("verified", 1.0)
    except _Stopped:
        report.cancelled = True
    return report
