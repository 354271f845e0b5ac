"""``flyviz neuron ATLAS ID``: one neuron's atlas card in the terminal (or as JSON)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz neuron``."""
    parser.add_argument("atlas", metavar="ATLAS", help="an atlas made by 'flyviz atlas'")
    parser.add_argument("neuron", metavar="ID", type=int, help="neuron index (0-based)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.epilog = ("examples:\n  flyviz neuron stories.atlas 1234\n"
                     "  flyviz neuron stories.atlas 1234 --json")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def _highlight(context: Any) -> str:
    a, b = context.span
    text = context.text
    return (text[:a] + "[[" + text[a:b] + "]]" + text[b:]).replace("\n", "⏎ ")


def _bar(counts: Any, width: int = 50) -> str:
    blocks = " ▁▂▃▄▅▆▇█"
    peak = max(1, int(max(counts)))
    return "".join(blocks[min(8, int(round(8 * c / peak)))] if c else " " for c in counts)[:width]


def format_card(card: Any) -> str:
    """The card as terminal text."""
    lines = [f"neuron {card.neuron}  ({card.model_name}; {card.count:,} positions)",
             f"  mean {card.mean:+.4f}  std {card.std:.4f}  max {card.max:+.4f}  "
             f"density {card.density:.2%} (|x| >= {card.density_threshold:g})  "
             f"selectivity {card.selectivity:+.2f}",
             f"  histogram -1 |{_bar(card.histogram)}| +1"]
    lines.append("  top contexts:")
    for c in card.top_contexts:
        lines.append(f"    {c.value:+.4f}  {_highlight(c)}")
    for (lo, hi), samples in card.quantile_samples:
        lines.append(f"  samples {lo:.1%}-{hi:.1%}:")
        for c in samples:
            # A fill-in from a bin the band touches, beyond the band's own values.
            mark = "  (outside the band)" if c.outside else ""
            lines.append(f"    {c.value:+.4f}  {_highlight(c)}{mark}")

    def tokens(label: str, scores: list, fmt: str) -> None:
        shown = ", ".join(f"{s.text!r} {format(s.value, fmt)}" for s in scores) or "none"
        lines.append(f"  {label}: {shown}")

    tokens("driving tokens (mean x)", card.driving_tokens, "+.3f")
    # Direct logit effects can be far below 1e-3 per unit of x: significant digits, not decimals.
    tokens("promotes (logit per unit x)", card.promoted_tokens, "+.3g")
    tokens("suppresses (logit per unit x)", card.suppressed_tokens, "+.3g")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the card."""
    import sys

    from flyviz.analysis.atlas import Atlas

    atlas = Atlas(args.atlas)
    card = atlas.card(args.neuron)
    print(json.dumps(card.to_dict(), indent=1) if args.json else format_card(card))
    if atlas.integrity_note:  # after the card: an error reading it stays the only line
        print(f"flyviz: note: {atlas.integrity_note}", file=sys.stderr)
    return 0
