"""Options shared by the subcommands: the model's dataset, generation, recordings.

Every command that loads a model adds ``--dataset`` with
:func:`add_dataset_option` and loads through :func:`load_model_from_args`, so
the option means the same everywhere.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

DATASET_HELP = ("connectome dataset folder (fernandofernandes/fly-connectome-49k: manifest.json, "
                "graph/, interface/, neurons/) to join fly-wordbrain weights or a web export "
                "to; for ngxson's checkpoint it adds soma positions. Default: a dataset folder "
                "next to the model, or the hub's. Example: --dataset ~/fly-models/dataset")


def add_dataset_option(parser: Any) -> None:
    """Add ``--dataset DIR``."""
    parser.add_argument("--dataset", metavar="DIR", type=Path, default=None, help=DATASET_HELP)


def load_model_from_args(args: argparse.Namespace, spec: str | None = None,
                         progress: Any = None) -> Any:
    """Load ``spec`` (default ``args.spec``) with the dataset ``--dataset`` names."""
    from flyviz.model.resolve import load_model

    return load_model(str(spec if spec is not None else args.spec), progress,
                      dataset_dir=getattr(args, "dataset", None))


def add_generation_options(group: Any) -> None:
    """Add ``--max-new-tokens``, ``--temperature``, ``--top-p`` and ``--seed``."""
    group.add_argument("--max-new-tokens", type=int, default=80, metavar="N",
                       help="stop after N generated tokens (default 80; EOS stops earlier)")
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

    return GenerationSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                              top_p=args.top_p, seed=args.seed).validate()


def add_recording_options(group: Any) -> None:
    """Add ``--record FILE`` and ``--states {float16,float32}``."""
    group.add_argument("--record", metavar="FILE", type=Path, default=None,
                       help="also save the run as a recording (.flyrec), with its settings, "
                            "seed and model identity, e.g. --record run.flyrec; "
                            "'flyviz replay run.flyrec' re-runs it")
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
    identity = recording.metadata.get("model_identity")
    identity = identity if isinstance(identity, dict) else {}
    if spec:
        return spec, dataset
    named = identity.get("spec") or recording.metadata.get("model")
    if not isinstance(named, str) or not named:
        return None, dataset
    recorded_dataset = identity.get("dataset")
    if dataset is None and named != "demo" and isinstance(recorded_dataset, str) \
            and Path(recorded_dataset).is_dir():
        dataset = Path(recorded_dataset)
    return named, dataset
