"""Turn a model spec (folder, Hugging Face repo id or ``"demo"``) into a Checkpoint.

Specs
-----
``./some/folder``
    Any layout :func:`flyviz.model.formats.detect_layout` recognises; a
    connectome dataset is looked for next to it when the layout needs one.
``ngxson/fly-llm-hf``
    The original model (284 MB): config, weights and tokenizer.
``fernandofernandes/fly-wordbrain-rank64``
    The rank-64 fly-wordbrain model. By default its ``corpus-10k/web`` export
    (the weights Fly Recital runs, 16 MB), with the graph from
    ``fernandofernandes/fly-connectome-49k`` and ngxson's tokenizer fetched
    alongside.
``owner/name@revision/sub/folder``
    Any revision (branch, tag or commit) and subfolder of a hub repository,
    e.g. ``fernandofernandes/fly-wordbrain-rank64@main/web``; ``/.`` picks the
    repository root (the parameters-only ``min-ce.safetensors``).
``./release/max-accuracy.safetensors``, ``owner/name[@revision][/sub]/FILE.safetensors``
    One selector's weights of a fly-wordbrain release folder (the folder
    alone loads ``min-ce.safetensors``). :func:`selector_spec` writes this
    form for a selector named by its manifest key (``--selector``).
``demo``
    The embedded demo brain (:func:`flyviz.demo.load_demo`).

Downloads go through ``huggingface_hub`` into its standard cache (honouring
``HF_HUB_CACHE``/``HF_HOME``) and fetch only the files needed. With
``HF_HUB_OFFLINE=1`` or no network, only the cache is used; if the files are
not there, :class:`ModelNotFoundError` says which files to fetch by hand and
where to put them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flyviz.errors import CheckpointError, InputError, ModelNotFoundError
from flyviz.model.checkpoint import Checkpoint, validate_checkpoint
from flyviz.model.formats import (LAYOUT_FLYGPT, LAYOUT_HF, LAYOUT_WORDBRAIN, detect_layout,
                                  load_folder)
from flyviz.model.formats.flygpt import HUB_REPO as FLYGPT_REPO
from flyviz.model.formats.malecns import MALECNS_REPO
from flyviz.model.formats.common import find_tokenizer, read_json
from flyviz.model.formats.wordbrain import selector_file

#: Progress callback: ``progress(label, fraction)`` with fraction in [0, 1].
Progress = Callable[[str, float], None]

DEMO_SPEC = "demo"
NGXSON_REPO = "ngxson/fly-llm-hf"
WORDBRAIN_REPO = "fernandofernandes/fly-wordbrain-rank64"
DATASET_REPO = "fernandofernandes/fly-connectome-49k"
#: The export Fly Recital streams: I32rank64fixed10k.
WORDBRAIN_DEFAULT_SUBFOLDER = "corpus-10k/web"

#: Files of the dataset the engine and the viewer read (not the trainer's groups.npz
#: nor the browser-only int16 weights).
DATASET_FILES = ("manifest.json", "graph/edges_offsets.i32", "graph/edges_source.u16",
                 "graph/edges_weight.f32", "interface/*", "neurons/*")
ANATOMY_FILES = ("manifest.json", "neurons/*")
HF_FILES = ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json")
WEB_FILES = ("manifest.json", "*.f32", "tokenizer.json")
WORDBRAIN_FILES = ("manifest.json", "min-ce.safetensors", "tokenizer.json")
#: A FlyGPT folder's data files (its configuration_flygpt.py and modeling_flygpt.py are
#: never fetched, nor imported).
FLYGPT_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                "generation_config.json", "graph_metadata.json")

#: What a model spec can be, as the "no model" and "no such folder" errors say it (one line).
#: QuixiAI/FlyGPT's published models: the root and three subfolders (fly-family-2026.md).
FLYGPT_SUBFOLDERS = ("", "scrambled", "init", "full-cns")

SPEC_KINDS = (f"a folder (a checkpoint or a Fly Recital web export), a hub repo id ({NGXSON_REPO}, "
              f"{WORDBRAIN_REPO}, {FLYGPT_REPO} or its /scrambled, /init, /full-cns) or 'demo'")

_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*(@[^/\s]+)?(/.*)?$")


@dataclass(frozen=True)
class HubSpec:
    """A parsed hub spec: ``owner/name[@revision][/subfolder]``."""

    repo_id: str
    revision: str | None = None
    subfolder: str = ""
    explicit_subfolder: bool = False
    #: One ``.safetensors`` weights file of the subfolder (a wordbrain selector), or "".
    file: str = ""

    @property
    def display(self) -> str:
        """The spec as a user would write it."""
        text = self.repo_id + (f"@{self.revision}" if self.revision else "")
        text += f"/{self.subfolder}" if self.subfolder else ""
        return text + (f"/{self.file}" if self.file else "")


def parse_hub_spec(spec: str) -> HubSpec | None:
    """Parse ``owner/name[@revision][/subfolder]``; ``None`` if it is not one."""
    spec = spec.strip()
    if not _REPO_RE.match(spec) or spec.startswith(("./", "../", "/", "~")):
        return None
    owner, rest = spec.split("/", 1)
    name, _, subfolder = rest.partition("/")
    revision = None
    if "@" in name:
        name, revision = name.split("@", 1)
    explicit = bool(subfolder)
    subfolder = subfolder.strip("/")
    if subfolder in (".", ""):
        subfolder = ""
    if any(part in ("..",) for part in subfolder.split("/")):
        return None
    file = ""
    if subfolder.endswith(".safetensors"):  # one selector's weights file
        subfolder, _, file = subfolder.rpartition("/")
    if not explicit and f"{owner}/{name}" == WORDBRAIN_REPO:
        subfolder = WORDBRAIN_DEFAULT_SUBFOLDER
    return HubSpec(f"{owner}/{name}", revision or None, subfolder, explicit, file)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _cache_dir() -> str | None:
    return os.environ.get("HF_HUB_CACHE") or None


def _hub_errors() -> tuple[type[BaseException], ...]:
    """What ``huggingface_hub`` raises when a repository or file cannot be had.

    Network failures, HTTP errors, files missing from the cache or the hub
    and offline mode are all ``OSError`` subclasses there; a malformed repo id
    is its ``HFValidationError`` (a ``ValueError``), and in some versions a
    missing file is an ``EntryNotFoundError`` that is neither. Anything else
    is a bug and must not be reported as "model not found".
    """
    errors: list[type[BaseException]] = [OSError]
    for module_name in ("huggingface_hub.errors", "huggingface_hub.utils"):
        try:
            module = __import__(module_name, fromlist=["_"])
        except ImportError:
            continue
        for name in ("HFValidationError", "EntryNotFoundError", "HfHubHTTPError"):
            error = getattr(module, name, None)
            if isinstance(error, type) and issubclass(error, BaseException):
                errors.append(error)
    return tuple(dict.fromkeys(errors))


def _hub_error_text(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return first[:160]


def _download(repo_id: str, patterns: list[str], *, revision: str | None,
              repo_type: str | None, manual: str) -> Path:
    """``snapshot_download`` with only ``patterns``, or a ModelNotFoundError naming ``manual``."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - a declared dependency
        raise ModelNotFoundError(f"huggingface_hub is not installed; {manual}") from None
    try:
        path = snapshot_download(repo_id, repo_type=repo_type, revision=revision,
                                 allow_patterns=patterns, cache_dir=_cache_dir(),
                                 local_files_only=_offline())
    except _hub_errors() as exc:  # network, offline, missing repo: all end the same way
        reason = "offline (HF_HUB_OFFLINE is set)" if _offline() else _hub_error_text(exc)
        raise ModelNotFoundError(f"cannot get {repo_id} from the Hugging Face Hub and it is not "
                                 f"in the cache ({reason}); {manual}") from None
    return Path(path)


def _manual_instructions(spec: HubSpec) -> str:
    """One sentence saying which files to download by hand and where to put them."""
    url = f"https://huggingface.co/{spec.repo_id}"
    if spec.repo_id == NGXSON_REPO:
        return (f"download config.json, model.safetensors and tokenizer.json from {url} into one "
                "folder (e.g. ~/fly-models/fly-llm-hf) and pass that folder instead")
    sub = f"{spec.subfolder}/" if spec.subfolder else ""
    if spec.repo_id == FLYGPT_REPO:
        # A subfolder of another name may be new, or mistyped: the published ones are named.
        known = "" if spec.subfolder in FLYGPT_SUBFOLDERS else (
            f"'{spec.subfolder}' is none of its published models (the root, "
            f"{', '.join(s + '/' for s in FLYGPT_SUBFOLDERS if s)}); ")
        return (f"{known}download {sub}config.json, {sub}model.safetensors and "
                f"{sub}tokenizer.json from {url} into one folder (e.g. ~/fly-models/flygpt) "
                "and pass that folder instead")
    return (f"download {sub}manifest.json (and {sub}graph-control.json where the release has "
            f"one) and the {sub}*.f32 or {sub}*.safetensors files from "
            f"{url} into a folder (e.g. ~/fly-models/model), the dataset "
            f"https://huggingface.co/datasets/{DATASET_REPO} (manifest.json, graph/, interface/, "
            "neurons/) into a sibling folder (e.g. ~/fly-models/dataset), "
            f"tokenizer.json from https://huggingface.co/{NGXSON_REPO} into the model folder, "
            "and pass the model folder instead")


def _model_patterns(spec: HubSpec) -> list[str]:
    """The files of the model repository to fetch (data only, never code)."""
    prefix = f"{spec.subfolder}/" if spec.subfolder else ""
    if spec.repo_id == NGXSON_REPO:
        files: tuple[str, ...] = HF_FILES
    elif spec.repo_id == WORDBRAIN_REPO:
        files = WEB_FILES + WORDBRAIN_FILES
    elif spec.repo_id == FLYGPT_REPO:
        files = FLYGPT_FILES
    else:  # another repository: every data file of the subfolder; the layout is detected
        files = ("*.json", "*.safetensors", "*.f32")
    if spec.file:  # one selector: its weights and the release's JSON files only
        files = ("*.json", spec.file)
    return sorted({prefix + f for f in files})


def _tokenizer_from_ngxson(manual: str) -> Path | None:
    """ngxson's tokenizer.json from the cache or the hub (the derived models ship none)."""
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(NGXSON_REPO, "tokenizer.json", cache_dir=_cache_dir(),
                                    local_files_only=_offline()))
    except _hub_errors() as exc:
        reason = "offline (HF_HUB_OFFLINE is set)" if _offline() else _hub_error_text(exc)
        raise ModelNotFoundError(f"cannot get tokenizer.json of {NGXSON_REPO} ({reason}); "
                                 f"{manual}") from None


def _report(progress: Progress | None, label: str, fraction: float) -> None:
    if progress is not None:
        progress(label, fraction)


def load_hub_model(spec: HubSpec, progress: Progress | None = None, *,
                   dataset_dir: str | Path | None = None) -> Checkpoint:
    """Download (or find in the cache) and load a hub model.

    ``dataset_dir`` is a local connectome dataset to use instead of
    downloading ``fernandofernandes/fly-connectome-49k``.
    """
    manual = _manual_instructions(spec)
    _report(progress, f"fetching {spec.display}", 0.0)
    snapshot = _download(spec.repo_id, _model_patterns(spec), revision=spec.revision,
                         repo_type=None, manual=manual)
    model_dir = snapshot / spec.subfolder if spec.subfolder else snapshot
    if not model_dir.is_dir():
        raise ModelNotFoundError(f"{spec.display}: the repository has no folder "
                                 f"'{spec.subfolder}'; check the subfolder name")
    try:
        layout = detect_layout(model_dir)
    except CheckpointError:
        raise ModelNotFoundError(f"{spec.display}: the cached copy is incomplete or holds no Fly "
                                 f"LLM checkpoint; {manual}") from None
    tokenizer = None
    if layout == LAYOUT_FLYGPT:  # graph, weights and tokenizer are all in the folder
        _report(progress, "loading", 0.7)
        return load_folder(model_dir, name=spec.display)
    if spec.file and layout != LAYOUT_WORDBRAIN:
        raise ModelNotFoundError(f"{spec.display}: {spec.file} names a fly-wordbrain selector "
                                 f"but {spec.subfolder or 'the repository root'} holds a "
                                 f"{layout} checkpoint; name the folder alone")
    if dataset_dir is None and layout == LAYOUT_HF:
        # ngxson's checkpoint carries the graph but no soma positions: take them from the
        # dataset's neurons/ (2 MB) when it can be had; without it the model still runs.
        _report(progress, f"fetching soma positions from {DATASET_REPO}", 0.5)
        try:
            dataset_dir = _download(DATASET_REPO, list(ANATOMY_FILES), revision=None,
                                    repo_type="dataset", manual="")
        except ModelNotFoundError:
            dataset_dir = None
    elif dataset_dir is None:
        _report(progress, f"fetching {DATASET_REPO}", 0.3)
        dataset_dir = _download(DATASET_REPO, list(DATASET_FILES), revision=None,
                                repo_type="dataset", manual=manual)
    if layout != LAYOUT_HF and find_tokenizer(
            model_dir, Path(dataset_dir) if dataset_dir is not None else None) is None:
        _report(progress, f"fetching the tokenizer of {NGXSON_REPO}", 0.6)
        tokenizer = _tokenizer_from_ngxson(manual)
    _report(progress, "loading", 0.7)
    return load_folder(model_dir, dataset_dir=dataset_dir, tokenizer_path=tokenizer,
                       name=spec.display, filename=spec.file or None)


#: How a refusal of ``--selector`` on anything else starts.
_SELECTOR_ONLY = ("--selector applies only to fly-wordbrain releases (selector weights files "
                  "beside their manifest.json)")


#: Hub repositories that hold no selectors, and what they hold.
_NOT_RELEASES = {NGXSON_REPO: "ngxson's Fly LLM (one model.safetensors)",
                 FLYGPT_REPO: "FlyGPT (one model.safetensors per variant)",
                 DATASET_REPO: "a connectome dataset (the graph, no weights)",
                 MALECNS_REPO: "the fly-connectome-malecns-166k dataset (a graph, no weights)"}


def _not_a_release(folder: Path) -> str | None:
    """What a folder is when it is plainly no fly-wordbrain release (no selectors to pick
    from), or ``None`` when it may be one (its manifest says whether)."""
    from flyviz.model.formats.connectorch import is_connectorch_brain
    from flyviz.model.formats.flygpt import is_flygpt_config
    from flyviz.model.formats.malecns import is_malecns_dataset

    if is_connectorch_brain(folder):
        return "a ConnecTorch brain (.ct, a graph with no weights)"
    if is_malecns_dataset(folder):
        return "the fly-connectome-malecns-166k dataset (a graph, no weights)"
    if (folder / "graph" / "edges_offsets.i32").is_file():
        return "a connectome dataset (the graph, no weights)"
    if is_flygpt_config(folder):
        return "a FlyGPT folder (one model.safetensors)"
    if (folder / "config.json").is_file():
        return "an ngxson/fly-llm-hf folder (one model.safetensors)"
    if (folder / "wte.f32").is_file():
        return "a Fly Recital web export (one set of weights)"
    return None


def selector_spec(spec: str, selector: str) -> str:
    """The SPEC of one selector's weights in a fly-wordbrain release.

    Parameters
    ----------
    spec
        A release folder, or a hub id (``owner/name[@revision][/subfolder]``;
        without a subfolder, the repository root, where the authors'
        packager puts the release).
    selector
        A key of the manifest's ``selectors`` (``minimum_validation_ce``,
        ``maximum_validation_accuracy``).

    Returns
    -------
    str
        ``folder/FILE.safetensors`` or ``owner/name[@revision][/subfolder]/FILE.safetensors``
        (for a hub id, only the release's ``manifest.json`` is fetched here).

    Raises
    ------
    InputError
        For a spec that is no release folder or hub id (a FlyGPT or ngxson model, a
        dataset, a ConnecTorch brain: ``--selector`` applies only to fly-wordbrain
        releases), or names a file already.
    CheckpointError
        When the manifest has no such selector (the message lists its keys).
    """
    text = str(spec).strip()
    local = Path(text).expanduser()
    if local.is_file():
        if local.suffix != ".safetensors":
            raise InputError(f"{_SELECTOR_ONLY}; {text} is a file, not a release folder: leave "
                             "--selector out")
        raise InputError(f"{text} is one weights file already; give the release folder with "
                         "--selector, or the file alone")
    if local.is_dir():
        other = _not_a_release(local)
        if other is not None:
            raise InputError(f"{_SELECTOR_ONLY}; {text} is {other}: leave --selector out")
        manifest = read_json(local / "manifest.json", "the release's manifest.json")
        where = str(local)
    else:
        hub = parse_hub_spec(text)
        if hub is None:
            raise InputError(f"--selector picks one weights file of a fly-wordbrain release; "
                             f"{text!r} is neither a release folder nor a hub id")
        if hub.file:
            raise InputError(f"{text} names one weights file already; give the release alone "
                             "with --selector, or the file alone")
        if hub.repo_id in _NOT_RELEASES:
            raise InputError(f"{_SELECTOR_ONLY}; {hub.repo_id} is "
                             f"{_NOT_RELEASES[hub.repo_id]}: leave --selector out")
        hub = HubSpec(hub.repo_id, hub.revision, hub.subfolder if hub.explicit_subfolder else "",
                      True)
        prefix = f"{hub.subfolder}/" if hub.subfolder else ""
        snapshot = _download(hub.repo_id, [prefix + "manifest.json"], revision=hub.revision,
                             repo_type=None, manual=_manual_instructions(hub))
        manifest = read_json(snapshot / prefix / "manifest.json", "the release's manifest.json")
        where = hub.display
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{where}: manifest.json is not a JSON object; download it again")
    file = selector_file(manifest, selector, where)
    return str(local / file) if local.is_dir() else f"{where}/{file}"


def malecns_folder(spec: str | Path) -> Path | None:
    """The fly-connectome-malecns-166k folder ``spec`` names, or ``None`` when it names none:
    a local folder holding the dataset (or its ``manifest.json``), or the hub's
    ``fernandofernandes/fly-connectome-malecns-166k`` (``@revision`` pins one), fetched with
    ``huggingface_hub`` into its cache (its data files only).

    Raises
    ------
    ModelNotFoundError
        When the hub's dataset can be had neither from the hub nor from the cache.
    """
    from flyviz.model.formats.malecns import MALECNS_REPO, is_malecns_dataset

    text = str(spec).strip()
    local = Path(text).expanduser()
    if local.is_dir():
        return local if is_malecns_dataset(local) else None
    if local.is_file() and local.name == "manifest.json" and is_malecns_dataset(local.parent):
        return local.parent  # the dataset named by its manifest: the folder is meant
    repo, _, revision = text.partition("@")
    if repo.rstrip("/") != MALECNS_REPO or os.path.lexists(local):
        return None
    manual = (f"download manifest.json, graph/, neurons/, populations/ and derived/ from "
              f"https://huggingface.co/datasets/{MALECNS_REPO} into a folder (e.g. "
              "~/fly-models/malecns-166k) and pass that folder instead")
    return _download(MALECNS_REPO, ["manifest.json", "graph/*", "neurons/*", "populations/*",
                                    "derived/*"], revision=revision or None,
                     repo_type="dataset", manual=manual)


def _load_demo(progress: Progress | None) -> Checkpoint:
    try:
        from flyviz.demo import load_demo
    except ImportError as exc:
        if exc.name != "flyviz.demo":  # a module the demo needs is missing: a real problem
            raise
        raise ModelNotFoundError("the demo brain is not built yet in this installation; run "
                                 "'flyviz build-demo' or pass a model folder or hub id") from None
    return load_demo(progress)


def check_spec(spec: str) -> None:
    """Raise :class:`ModelNotFoundError` now (nothing is loaded or downloaded) when ``spec``
    can name no model: empty, or neither ``demo``, an existing path nor a hub repo id.

    What :func:`load_model` would refuse first; the app calls it before its window opens.
    """
    text = str(spec).strip()
    if not text:
        raise ModelNotFoundError(f"no model given: pass {SPEC_KINDS}")
    if text.lower() == DEMO_SPEC or Path(text).expanduser().exists():
        return
    if parse_hub_spec(text) is None:
        raise ModelNotFoundError(f"no such folder: {text}; a model is {SPEC_KINDS}")


def _refuse_another_file_of_a_release(local: Path, spec: str) -> None:
    """A fly-wordbrain release's manifest or tokenizer names no weights: loading its folder's
    default selector for it would run weights the user did not name, without a word."""
    try:
        layout = detect_layout(local.parent)
    except CheckpointError:
        return  # its folder holds no model: load_model says so
    if layout == LAYOUT_WORDBRAIN:
        raise InputError(f"{spec} is the release's {local.name}, not its weights: pass the "
                         f"release folder ({local.parent}, its minimum_validation_ce "
                         "selector) or one of its .safetensors files")


def load_model(spec: str, progress: Progress | None = None, *,
               dataset_dir: str | Path | None = None, selector: str | None = None) -> Checkpoint:
    """Load a model from a folder, a hub repo id or ``"demo"``.

    Parameters
    ----------
    spec
        See the module documentation.
    progress
        Called as ``progress(label, fraction)`` while downloading and loading.
    dataset_dir
        The connectome dataset folder to join the model to (fly-wordbrain
        weights and web exports need one; for ngxson's checkpoint it only adds
        soma positions). Default: one found next to a model folder, or the
        hub's ``fernandofernandes/fly-connectome-49k``.
    selector
        For a fly-wordbrain release, the key of its manifest's ``selectors``
        to load (see :func:`selector_spec`); default: ``min-ce.safetensors``
        or the file the spec names.

    Returns
    -------
    Checkpoint
        Validated.

    Raises
    ------
    ModelNotFoundError
        When nothing can be found locally or in the cache and the hub is out
        of reach; the message says what to download by hand.
    CheckpointError
        When the files are found but damaged or inconsistent.
    """
    spec = str(spec).strip()
    if not spec:
        raise ModelNotFoundError(f"no model given: pass {SPEC_KINDS}")
    if selector is not None:
        spec = selector_spec(spec, selector)
    if dataset_dir is not None:
        dataset_dir = Path(dataset_dir).expanduser()
        if not dataset_dir.is_dir():
            raise CheckpointError(f"connectome dataset folder not found: {dataset_dir}")
    if spec.lower() == DEMO_SPEC and not Path(spec).exists():
        if dataset_dir is not None:
            raise InputError("the demo brain brings its own graph; a dataset folder applies to "
                             "fly-wordbrain weights, web exports and ngxson's checkpoint")
        ckpt = validate_checkpoint(_load_demo(progress))
        _report(progress, "ready", 1.0)
        return ckpt
    local = Path(spec).expanduser()
    if local.exists():
        folder = local.parent if local.is_file() else local
        # A .safetensors file names one selector of a wordbrain release (other layouts
        # have one weights file and ignore it).
        filename = local.name if local.is_file() and local.suffix == ".safetensors" else None
        if local.is_file() and filename is None:
            _refuse_another_file_of_a_release(local, spec)
        _report(progress, f"loading {folder}", 0.1)
        try:
            ckpt = load_folder(folder, name=folder.name, dataset_dir=dataset_dir,
                               filename=filename)
        except CheckpointError as exc:
            if local.is_file() and str(exc).startswith(f"{folder} holds no Fly LLM checkpoint"):
                # "/etc holds no Fly LLM checkpoint" named the folder of a file given.
                raise ModelNotFoundError(f"{spec} is a file, not a model, and its folder "
                                         f"{folder} holds no checkpoint; a model is "
                                         f"{SPEC_KINDS}") from None
            raise
        # Absolute, so that a recording can find the model (and its selector) again.
        ckpt.metadata["spec"] = str((local if filename and ckpt.layout == LAYOUT_WORDBRAIN
                                     else folder).resolve())
    else:
        hub = parse_hub_spec(spec)
        if hub is None:
            raise ModelNotFoundError(f"no such folder: {spec}; a model is {SPEC_KINDS}")
        ckpt = load_hub_model(hub, progress, dataset_dir=dataset_dir)
        ckpt.metadata["spec"] = hub.display
    # Every loader behind load_folder ends with validate_checkpoint; a second
    # pass would stream the 72 MB graph again for nothing.
    _report(progress, "ready", 1.0)
    return ckpt
