"""Options shared by the subcommands: the model's dataset and kernel, generation, recordings.

Every command that loads a model adds ``--dataset`` with
:func:`add_dataset_option` and loads through :func:`load_model_from_args`
(or :func:`model_from_args`, which also applies ``--kernel``, for the commands
that run it), so the options mean the same everywhere.
"""

from __future__ import annotations

import argparse
import sys
import math
from pathlib import Path
from typing import Any, NamedTuple

from flyviz.fileio import KEPT_RECORDING_HELP

DATASET_HELP = ("connectome dataset folder (fernandofernandes/fly-connectome-49k: manifest.json, "
                "graph/, interface/, neurons/) to join fly-wordbrain weights or a web export "
                "to; for ngxson's checkpoint it adds soma positions. Default: a dataset folder "
                "next to the model, or the hub's. Example: --dataset ~/fly-models/dataset")


SELECTOR_HELP = ("for a fly-wordbrain release folder or repository, the weights to load by "
                 "the key of its manifest's selectors (default: min-ce.safetensors, the "
                 "minimum_validation_ce selector; a SPEC may also name one .safetensors file). "
                 "Example: --selector maximum_validation_accuracy")


def add_dataset_option(parser: Any, *, selector: bool = True) -> None:
    """Add ``--dataset DIR`` and, for a command given a model SPEC, ``--selector NAME``."""
    parser.add_argument("--dataset", metavar="DIR", type=Path, default=None, help=DATASET_HELP)
    if selector:
        parser.add_argument("--selector", metavar="NAME", default=None, help=SELECTOR_HELP)


COLOUR_MODE_HELP = ("colour a language model's signed x (diverging) or |x| (sequential); "
                    "default signed. A spiking brain's rates have no sign: they are coloured "
                    "from 0 Hz, and --mode is refused there")


def add_colour_mode_option(parser: Any) -> None:
    """``--mode signed|abs``, left ``None`` when not given so that :func:`colour_mode_for`
    can tell a request from the default."""
    parser.add_argument("--mode", choices=("signed", "abs"), default=None, help=COLOUR_MODE_HELP)


def colour_mode_for(mode: str | None, kind: Any, name: str) -> str:
    """``--mode`` for a recording of ``kind`` named ``name``: the colour mode to use.

    A kind whose state has no sign (a spiking brain's rate) has one colouring; a ``--mode``
    given for it would be ignored without a word, so it is refused in one line instead.
    """
    if mode is None:
        return "signed"
    if mode not in kind.state_quantities:
        from flyviz.errors import InputError

        what = {"signed": "signed x", "abs": "|x|"}.get(mode, "state")
        raise InputError(f"--mode {mode} colours a language model's {what}; {name} "
                         f"is a {kind.title or kind.key} recording, coloured by its "
                         f"{kind.state_label} from 0: leave --mode out")
    return mode


def load_model_from_args(args: argparse.Namespace, spec: str | None = None,
                         progress: Any = None) -> Any:
    """Load ``spec`` (default ``args.spec``) with the dataset ``--dataset`` names."""
    from flyviz.model.resolve import load_model

    checkpoint = load_model(str(spec if spec is not None else args.spec), progress,
                            dataset_dir=getattr(args, "dataset", None))
    request = getattr(args, "nulls", None)
    if isinstance(request, NullsRequest) and request.number:
        # A null kind the model cannot have (type-pairs without cell types) is refused now,
        # not after the real run.
        from flyviz.analysis.nulls import check_null_fits

        check_null_fits(checkpoint, request.kind or getattr(args, "null_kind", None)
                        or "degree")
    return checkpoint


KERNEL_HELP = ("sparse kernel for W @ x: auto (default: the FLYVIZ_KERNEL environment "
               "variable, else scipy), scipy, or llvm (compiled on first use, bit-identical "
               "results; needs flyviz[fast]; scipy runs where it cannot compile). "
               "Example: --kernel llvm")


#: ``--kernel`` of the commands that run the batched engine, whose default is llvm.
BATCH_KERNEL_HELP = ("sparse kernel for W @ X: auto (default: the FLYVIZ_KERNEL environment "
                     "variable, else llvm, the compiled multi-column kernel, where it compiles, "
                     "else scipy), scipy, or llvm; all give bit-identical results. "
                     "Example: --kernel scipy")


def add_kernel_option(parser: Any, help_text: str = KERNEL_HELP) -> None:
    """Add ``--kernel {auto,scipy,llvm}`` (what ``FLYVIZ_KERNEL`` sets, as an option)."""
    parser.add_argument("--kernel", choices=("auto", "scipy", "llvm"), default="auto",
                        help=help_text)


def kernel_from_args(args: argparse.Namespace) -> str | None:
    """The kernel ``--kernel`` names, ``None`` for auto (``FLYVIZ_KERNEL`` decides, and is
    checked now, so that a bad value fails before the model loads)."""
    from flyviz.model.kernels import requested_kernel

    kernel = getattr(args, "kernel", "auto") or "auto"
    if kernel == "auto":
        requested_kernel()
        return None
    if kernel == "llvm":  # asked for by name: say how to get it rather than run scipy
        from flyviz.extras import require

        require("llvm", "--kernel llvm")
    return str(kernel)


def model_from_args(args: argparse.Namespace, spec: str | None = None,
                    progress: Any = None, *, recorded: str | None = None) -> Any:
    """A :class:`~flyviz.record.runner.Model` for ``spec`` (default ``args.spec``), with
    the dataset ``--dataset`` and the kernel ``--kernel`` name.

    ``recorded``: ``spec`` is the model a recording names, not one the user typed, and
    this is how they would give another (e.g. ``"--model SPEC"``): a model not found
    then says so (:func:`~flyviz.kinds.recorded_model_not_found`).
    """
    from flyviz.errors import ModelNotFoundError
    from flyviz.record.runner import Model

    kernel = kernel_from_args(args)
    try:
        checkpoint = load_model_from_args(args, spec, progress)
    except ModelNotFoundError as exc:
        if recorded is None or spec is None:
            raise
        from flyviz.kinds import recorded_model_not_found

        raise recorded_model_not_found(str(spec), exc, recorded) from None
    return Model(checkpoint, spec=str(spec if spec is not None else args.spec), kernel=kernel)


def add_spiking_brain_options(parser: argparse.ArgumentParser) -> None:
    """The files that come with a spiking BRAIN and the weight of one synapse (``flyviz
    simulate`` and ``flyviz screen``; :func:`spiking_brain_from_args` loads it)."""
    parser.add_argument("--connectivity", metavar="FILE", type=Path, default=None,
                        help="the Connectivity parquet, when BRAIN is a completeness CSV "
                             "without it beside")
    parser.add_argument("--coordinates", metavar="FILE", type=Path, default=None,
                        help="soma positions (root_id, position \"[x y z]\")")
    parser.add_argument("--classification", metavar="FILE", type=Path, default=None,
                        help="labels (root_id, super_class, cell_type, side)")
    parser.add_argument("--w-syn", metavar="MV", type=synapse_weight_arg, default=None,
                        help="weight of one synapse in mV (default 0.275 on FlyWire files, "
                             "0.192 on MaleCNS graphs)")


def synapse_weight_arg(text: str) -> float:
    """``--w-syn``: a positive number of millivolts. Zero silences every synapse and a negative
    weight turns every excitatory synapse inhibitory (and the input drive negative): the
    brain then stays silent, with no word why."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of mV: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"{text} mV: the weight of one synapse must be a positive number of mV "
            "(0.275 on FlyWire, 0.192 on MaleCNS)")
    return value


def spiking_brain_from_args(args: argparse.Namespace) -> Any:
    """The spiking brain ``args.brain`` names, with the files
    :func:`add_spiking_brain_options` adds."""
    from flyviz.spiking import load_brain

    return load_brain(args.brain, args.connectivity, coordinates=args.coordinates,
                      classification=args.classification)


def spiking_brain_spec(args: argparse.Namespace) -> dict[str, Any]:
    """How a Dask worker loads the brain ``args.brain`` names (as
    :func:`spiking_brain_from_args`): local files as absolute paths (workers may start
    elsewhere), ``demo`` or a name that is not a file as given."""
    def absolute(path: Any) -> str | None:
        return None if path is None else str(Path(path).expanduser().resolve())

    return {"brain": args.brain if args.brain == "demo" or not Path(args.brain).exists()
            else absolute(args.brain),
            "connectivity": absolute(args.connectivity),
            "coordinates": absolute(args.coordinates),
            "classification": absolute(args.classification)}


def add_cluster_options(parser: argparse.ArgumentParser, parts: str, resume: bool = True) -> None:
    """Add ``--workers N | --scheduler ADDRESS`` and ``--resume`` (the commands that run on
    Dask); ``parts`` names where an interrupted run keeps its finished tasks. A command whose
    rerun always continues (``flyviz screen``) has no ``--resume`` (``resume=False``)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, default=None, metavar="N",
                       help="worker processes of a local Dask cluster (default: the usable "
                            "cores); 0 runs in this process without Dask, e.g. --workers 2")
    where.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="run on an existing Dask cluster, e.g. tcp://10.0.0.5:8786")
    if resume:
        parser.add_argument("--resume", action="store_true",
                            help=f"continue an interrupted run from its finished tasks (kept "
                                 f"in {parts})")


def check_cluster_options(args: argparse.Namespace) -> None:
    """Check ``--workers``, and that ``--scheduler`` is not blank and can be reached (before
    any work); a command with ``--workers`` only (build-demo) has no ``--scheduler``."""
    from flyviz.errors import InputError

    if args.workers is not None and not 0 <= args.workers <= 1024:
        raise InputError(f"--workers {args.workers} must be between 0 and 1024")
    scheduler = getattr(args, "scheduler", None)
    if scheduler is not None and not scheduler.strip():
        # An unset variable (--scheduler "$SCHEDULER") would otherwise run the work on a
        # local cluster, not the one the user meant, without a word.
        raise InputError("--scheduler is empty: give a Dask scheduler's address, e.g. "
                         "tcp://10.0.0.5:8786, or leave --scheduler out to run on this "
                         "machine")
    if scheduler:
        from flyviz.analysis.cluster import check_scheduler

        check_scheduler(scheduler)


def worker_spec(spec: str) -> str:
    """The model spec Dask workers load: a local folder as an absolute path (workers may
    start elsewhere), anything else (a hub name) as given."""
    local = Path(spec).expanduser()
    return str(local.resolve()) if local.exists() else spec


def add_generation_options(group: Any) -> None:
    """Add ``--max-new-tokens``, ``--min-new-tokens``, ``--temperature``, ``--top-p`` and
    ``--seed``."""
    group.add_argument("--max-new-tokens", type=int, default=80, metavar="N",
                       help="stop after N generated tokens (default 80; EOS stops earlier "
                            "where the model has one; FlyGPT has none)")
    group.add_argument("--min-new-tokens", type=int, default=0, metavar="N",
                       help="never end the text before N generated tokens: the end-of-text "
                            "token is not chosen until then (default 0; no effect on a model "
                            "with no end-of-text token, such as FlyGPT)")
    group.add_argument("--temperature", type=float, default=0.0, metavar="T",
                       help="0 = greedy (default); otherwise sample at temperature T")
    group.add_argument("--top-p", type=float, default=1.0, metavar="P",
                       help="nucleus sampling mass in (0, 1] (default 1)")
    group.add_argument("--seed", type=int, default=None, metavar="S",
                       help="random seed for sampling (default: drawn at random and stored "
                            "in a saved recording, so the run can be replayed)")


def generation_settings(args: argparse.Namespace) -> Any:
    """The validated :class:`~flyviz.record.run.GenerationSettings` of parsed options."""
    from flyviz.record.run import GenerationSettings

    return GenerationSettings(max_new_tokens=args.max_new_tokens,
                              min_new_tokens=args.min_new_tokens, temperature=args.temperature,
                              top_p=args.top_p, seed=args.seed).validate()


def add_recording_options(group: Any) -> None:
    """Add ``--record FILE`` and ``--states {float16,float32}``."""
    group.add_argument("--record", metavar="FILE", type=Path, default=None,
                       help="also save the run as a recording (.flyrec), with its settings, "
                            "seed and model identity, e.g. --record run.flyrec; "
                            "'flyviz replay run.flyrec' re-runs it; " + KEPT_RECORDING_HELP)
    group.add_argument("--states", choices=("float16", "float32"), default="float16",
                       help="precision of the states stored in --record: float16 (default, "
                            "half the size, about 1e-3 relative error) or float32 (exact, "
                            "for analysis)")


def recording_model(recording: Any, spec: str | None, dataset: Path | None) -> tuple[str | None,
                                                                                   Path | None]:
    """The model SPEC and dataset to load for a recording.

    ``spec``/``dataset`` given on the command line win; otherwise the model
    the recording names (its identity's spec, else its ``model``), with the
    dataset it was recorded with when that folder still exists.
    """
    if spec:
        return spec, dataset
    from flyviz.kinds import LANGUAGE

    named, recorded = LANGUAGE.model_spec(recording)
    return named, dataset if dataset is not None else recorded.get("dataset")


def note_recording_mismatch(kind: Any, recording: Any, model: Any, name: str) -> None:
    """Print ``flyviz: note:`` when ``model`` is not the one ``recording`` was made with
    (:meth:`kind.recording_mismatch <flyviz.kinds.ModelKind.recording_mismatch>`): its
    neurons' labels and places are then another graph's, which the output alone does
    not show. Every command that reads a recording with a model says it the same way."""
    note = kind.recording_mismatch(recording, model, name)
    if note:
        print(f"flyviz: note: {note}", file=sys.stderr)


class _AppendIntervention(argparse.Action):
    """Collect every intervention option into one list, in command-line order (the
    order decides which of two overlapping silences/clamps wins)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        items = list(getattr(namespace, self.dest, None) or [])
        items.append((self.const, values))
        setattr(namespace, self.dest, items)


INTERVENTIONS_HELP = """\
each repeatable, applied in the order given; QUERY selects neurons:
  QUERY terms: id:3,17,100-199  body:ID,...  superclass:NAME  type:GLOB (KC*)
  side:left|right|center  sign:excitatory|inhibitory  input  all
  combined with & | ! and parentheses, e.g. 'superclass:cb_sensory & !side:left'
  (quote the whole value for the shell; 'flyviz select SPEC QUERY' counts a query).
  A token window @FROM:TO ends any of them: positions as in the run (0 is BOS),
  half-open like a Python slice: @10:20 acts on tokens 10..19, @10: from 10 on,
  @:5 on the first five.
  Silences and clamps act after each step (the later option wins on a shared
  neuron); a stimulation is added to the neuron's input after the recurrent
  gain and the input drive, before gain * pre + bias; cuts and scales change
  the synapses W @ x uses (several on one synapse multiply).
"""


def add_intervention_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--silence``, ``--clamp``, ``--stimulate``, ``--cut`` and ``--scale``."""
    group = parser.add_argument_group("interventions", INTERVENTIONS_HELP)
    options = (
        ("silence", "QUERY[@FROM:TO]", "set these neurons' state to 0 after every step, "
         "e.g. --silence 'sign:inhibitory'"),
        ("clamp", "QUERY=VALUE[@FROM:TO]", "hold these neurons' state at VALUE, |VALUE| < 1, "
         "e.g. --clamp 'type:KC*=0.5@10:20'"),
        ("stimulate", "QUERY=VALUE[@FROM:TO]", "add VALUE to these neurons' input before the "
         "tanh, e.g. --stimulate 'input=0.8@10:15'"),
        ("cut", "QUERY->QUERY[@FROM:TO]", "remove every synapse from the first selection "
         "onto the second, e.g. --cut 'superclass:visual_projection->all'"),
        ("scale", "QUERY->QUERY=FACTOR[@FROM:TO]", "multiply those synapses by FACTOR, "
         "e.g. --scale 'superclass:cb_sensory->superclass:cb_intrinsic=0.5'"),
    )
    for kind, metavar, help_text in options:
        group.add_argument(f"--{kind}", action=_AppendIntervention, const=kind,
                           dest="interventions", default=[], metavar=metavar, help=help_text)
    group.add_argument("--patch", action=_AppendIntervention, const="patch",
                       dest="interventions", default=[], metavar="QUERY[@FROM:TO]",
                       help="set these neurons' state to the source run's state at the same "
                            "position after every step (activation patching; the source is "
                            "--source-prompt or --source), e.g. --patch 'superclass:cb_intrinsic@12:13'")
    source = group.add_mutually_exclusive_group()
    source.add_argument("--source-prompt", default=None, metavar="TEXT",
                        help="the prompt whose untouched run --patch copies from, e.g. "
                             "--source-prompt 'Once upon a time, there was a little girl named Lily'")
    source.add_argument("--source", type=Path, default=None, metavar="REC",
                        help="a recording (.flyrec) whose states --patch copies (record it with "
                             "--states float32 for exact values)")
    group.add_argument("--align", choices=("start", "end"), default="start",
                       help="how --patch lines up the two runs' positions: start (default; the "
                            "prompts must have the same length in tokens) or end (the last "
                            "prompt tokens line up)")


def patch_source_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~flyviz.model.patching.PatchSource` of ``--source-prompt``/``--source``
    and ``--align``, or ``None`` when neither is given."""
    from flyviz.model.patching import PatchSource

    text, path = getattr(args, "source_prompt", None), getattr(args, "source", None)
    align = getattr(args, "align", "start")
    if text is not None:
        return PatchSource.from_prompt(text, align)
    if path is not None:
        from flyviz.kinds import refuse_without_tokens
        from flyviz.record.recording import Recording

        recording = Recording.load(Path(path).expanduser())
        refuse_without_tokens(recording, Path(path).name,
                              "a patch copies a language model's states token by token")
        return PatchSource.from_recording(recording, align, name=Path(path).name)
    return None


def interventions_from_args(args: argparse.Namespace) -> list[Any]:
    """The interventions the options name, in order, checked for form (queries are
    checked against the model when it is loaded; a patch's source is read now)."""
    from flyviz.errors import InputError
    from flyviz.model.interventions import parse_intervention
    from flyviz.model.patching import parse_patch

    items = getattr(args, "interventions", [])
    patches = [text for kind, text in items if kind == "patch"]
    given = getattr(args, "source_prompt", None) is not None or \
        getattr(args, "source", None) is not None
    if patches and not given:
        raise InputError("--patch needs the run to copy from: --source-prompt TEXT or "
                         "--source REC")
    if given and not patches:
        raise InputError("--source-prompt/--source name the run that --patch copies from; "
                         "add --patch QUERY[@FROM:TO]")
    source = patch_source_from_args(args) if patches else None
    return [parse_patch(text, source) if kind == "patch" and source is not None
            else parse_intervention(kind, text) for kind, text in items]


def warn_idle_interventions(applied: list[dict[str, Any]]) -> None:
    """Say on stderr which interventions never acted (their token window lies past the run)."""
    import sys

    for item in applied:
        if item.get("steps") == 0:
            window = f"@{item.get('from', '')}:{item.get('to', '')}"
            print(f"flyviz: note: the {item['kind']} with window {window} never acted: the run "
                  f"has only positions before {item.get('from', 0)}", file=sys.stderr)


NULLS_HELP = """\
run the same work on N null models of the brain (the same parameters on a randomised
graph, see 'flyviz null') and print the headline numbers real vs nulls: the nulls'
mean ± sd, z = (real - mean) / sd and the empirical p = (1 + #nulls at least as
extreme) / (1 + N). --nulls KIND:N picks the kind (degree, degree-sign, type-pairs,
weights, sign, erdos; what each keeps: 'flyviz null --help'); plain --nulls N takes
--null-kind's. Each null is written to a temporary folder beside the result (the
system's without one), loaded like any model (by every worker) and removed after its run.
"""

#: :data:`NULLS_HELP` for a command whose p-values are two-sided and whose nulls are made
#: in memory from their seeds (``flyviz dynamics``).
NULLS_HELP_TWO_SIDED = """\
run the same work on N null models of the brain (the same parameters on a randomised
graph, see 'flyviz null') and print each number real vs nulls: the nulls' mean ± sd,
z = (real - mean) / sd and the empirical two-sided p = (1 + #nulls at least as far
from the nulls' mean as the real value, either way) / (1 + N). --nulls KIND:N picks the
kind (degree, degree-sign, type-pairs, weights, sign, erdos; what each keeps: 'flyviz
null --help'); plain --nulls N takes --null-kind's. Each null is made in memory from
its seed, in this process or on each worker (nothing is written).
"""


class NullsRequest(NamedTuple):
    """``--nulls [KIND:]N`` as parsed: the kind it names (``None``: ``--null-kind``'s) and N."""

    kind: str | None
    number: int


def _nulls_option(text: str) -> NullsRequest:
    """argparse's type for ``--nulls``: ``N`` or ``KIND:N``, bounded, checked at parse time
    (a bad or huge count is one line and exit 2 before anything loads)."""
    from flyviz.analysis.nulls import parse_nulls
    from flyviz.errors import InputError

    try:
        kind, count = parse_nulls(text)
    except InputError as exc:
        # argparse names the option itself: "argument --nulls: 5000 is more than 1,000 ..."
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--nulls ")) from None
    return NullsRequest(kind, count)


def add_null_options(parser: argparse.ArgumentParser, description: str = NULLS_HELP) -> None:
    """Add ``--nulls [KIND:]N``, ``--null-kind KIND`` and ``--null-seed S`` (real vs null
    models); read them back with :func:`null_seeds_from_args` (which also settles
    ``args.null_kind``). ``description`` heads the group in the help: what the p-values
    count and where the nulls live (:data:`NULLS_HELP`, :data:`NULLS_HELP_TWO_SIDED`)."""
    from flyviz.analysis.nulls import MAX_NULLS, NULL_KINDS

    group = parser.add_argument_group("null models", description)
    group.add_argument("--nulls", type=_nulls_option, default=NullsRequest(None, 0),
                       metavar="[KIND:]N",
                       help=f"also run on N seeded null models, at most {MAX_NULLS:,} (default "
                            "0: none), e.g. --nulls 5 or --nulls degree-sign:5")
    group.add_argument("--null-kind", choices=NULL_KINDS, default=None,
                       help="the nulls' kind for a plain --nulls N (default degree: every in- "
                            "and out-degree and the sign counts; see 'flyviz null --help')")
    # default None, not 0: a --null-seed given without --nulls is refused, not ignored
    group.add_argument("--null-seed", type=int, default=None, metavar="S",
                       help="the first null's seed; the others follow (default 0)")


def null_seeds_from_args(args: argparse.Namespace) -> list[int]:
    """The seeds ``--nulls``/``--null-seed`` name (``[]`` without ``--nulls``), checked.

    Also settles ``args.null_kind`` to the kind the nulls are of: the one
    ``--nulls KIND:N`` names, else ``--null-kind``'s, else ``degree``; the two
    naming different kinds is an :class:`InputError`. ``--null-kind`` or ``--null-seed``
    without nulls to apply to is an :class:`InputError` too (they would be ignored).
    """
    from flyviz.analysis.nulls import check_kind, null_seeds
    from flyviz.errors import InputError

    request = args.nulls if isinstance(args.nulls, NullsRequest) else NullsRequest(None,
                                                                                 args.nulls)
    named = getattr(args, "null_kind", None)
    start = getattr(args, "null_seed", None)
    if request.number == 0:
        given = [f"{option} {value}" for option, value in (("--null-kind", named),
                                                           ("--null-seed", start))
                 if value is not None]
        if given:
            raise InputError(f"{' and '.join(given)} appl{'ies' if len(given) == 1 else 'y'} "
                             "only to the nulls --nulls N runs, and none run here; add --nulls "
                             f"N (e.g. --nulls 3) or leave {'it' if len(given) == 1 else 'them'} "
                             "out")
        return []   # args.null_kind stays as given: nothing runs on nulls
    if request.kind is not None and named is not None and named != request.kind:
        raise InputError(f"--nulls {request.kind}:{request.number} and --null-kind {named} name "
                         "different kinds; give one")
    args.null_kind = check_kind(request.kind or named or "degree")
    return null_seeds(request.number, 0 if start is None else start)


def lesion_headlines(rows: list[Any], baseline_cross_entropy: float
                     ) -> dict[str, tuple[float, bool]]:
    """The headline numbers of a lesion map (exact or estimated): name -> (value,
    higher_is_more). The untouched cross-entropy counts lower as more extreme (a null
    that predicts the text as well as the real wiring); a lesion's cost higher."""
    costs = sorted((float(r.delta_ce) for r in rows), reverse=True)
    top = min(5, len(costs))
    return {"untouched CE": (float(baseline_cross_entropy), False),
            "top group dCE": (costs[0] if costs else 0.0, True),
            f"top-{top} dCE sum": (float(sum(costs[:top])), True)}


def null_comparisons(real: dict[str, tuple[float, bool]],
                     nulls: list[dict[str, tuple[float, bool]]]) -> dict[str, Any]:
    """Each headline number (name -> (value, higher_is_more)) real vs the nulls' values:
    name -> :class:`~flyviz.analysis.nulls.NullComparison`."""
    from flyviz.analysis.nulls import compare_to_nulls

    return {name: compare_to_nulls(value, [null[name][0] for null in nulls],
                                   higher_is_more=higher)
            for name, (value, higher) in real.items()}


def print_null_comparisons(real: dict[str, tuple[float, bool]],
                           nulls: list[dict[str, tuple[float, bool]]],
                           args: argparse.Namespace, unit: str = "nats/token") -> dict[str, Any]:
    """Print one row per headline number, real vs nulls; return the comparisons."""
    seeds = null_seeds_from_args(args)
    comparisons = null_comparisons(real, nulls)
    span = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}"
    print(f"\nreal vs {len(nulls)} {args.null_kind} null(s) ({span}), {unit}:")
    width = max(len(name) for name in comparisons)
    for name, comparison in comparisons.items():
        print(f"  {name:<{width}}  {comparison.line()}")
    return comparisons


def run_nulls_from_args(args: argparse.Namespace, checkpoint: Any, work: Any,
                        workdir: Path | None, log: Any = None) -> list[Any]:
    """``work(null)`` on each null ``--nulls``/``--null-kind``/``--null-seed`` name, written
    in a temporary folder under ``workdir`` (``None``: the system's; see
    :func:`flyviz.analysis.nulls.run_on_nulls`)."""
    from flyviz.analysis.nulls import run_on_nulls

    return run_on_nulls(checkpoint, args.null_kind, null_seeds_from_args(args), work,
                        workdir=workdir, log=log)
