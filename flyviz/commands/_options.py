"""Options shared by the subcommands that run a model (``generate``, ``export``)."""

from __future__ import annotations

import argparse
from typing import Any


def add_generation_options(group: Any) -> None:
    """Add ``--max-new-tokens``, ``--temperature``, ``--top-p`` and ``--seed``."""
    group.add_argument("--max-new-tokens", type=int, default=80, metavar="N",
                       help="stop after N generated tokens (default 80; EOS stops earlier)")
    group.add_argument("--temperature", type=float, default=0.0, metavar="T",
                       help="0 = greedy (default); otherwise sample at temperature T")
    group.add_argument("--top-p", type=float, default=1.0, metavar="P",
                       help="nucleus sampling mass in (0, 1] (default 1)")
    group.add_argument("--seed", type=int, default=None, metavar="S",
                       help="random seed for sampling (reproducible runs)")


def generation_settings(args: argparse.Namespace) -> Any:
    """The validated :class:`~flyviz.record.run.GenerationSettings` of parsed options."""
    from flyviz.record.run import GenerationSettings

    return GenerationSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                              top_p=args.top_p, seed=args.seed).validate()
