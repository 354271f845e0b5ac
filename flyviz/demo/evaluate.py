"""Measure the demo brain against its quality bar.

Run ``python -m flyviz.demo.evaluate [ASSET_DIR] [--json]`` (default: the
installed ``assets/demo``). It loads the demo brain through the same path as
the app (:func:`flyviz.demo.loader.load_demo`) and reports:

* held-out cross-entropy per token of the model, and of unigram and
  interpolated bigram models trained on the same split with the same
  tokenizer (the bar: at least 1.0 nat below unigram, within 0.5 nat of
  bigram), with an engine-versus-batch parity check on a few stories;
* the greedy continuation of "Once upon a time" (80 tokens): share of its
  words that occur in the corpus (bar: 90 %) and whether it collapses into a
  loop of one phrase;
* three samples at temperature 0.7 (they must differ);
* mean |x| per token (real dynamics: neither dead nor saturated);
* first-use preparation time (fresh cache) and warm load time, medians.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

PROMPT = "Once upon a time"
_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")


def words(text: str) -> list[str]:
    """Lower-cased words of ``text``."""
    return [w.lower() for w in _WORD.findall(text)]


def loop_period(tokens: list[int], window: int = 40, longest: int = 20) -> int:
    """Period ``p <= longest`` with which the last ``window`` tokens repeat, or 0.

    A continuation that ends in the same phrase over and over ("and the dog
    was happy and the dog was happy ...") has such a period.
    """
    tail = tokens[-window:]
    if len(tail) < window:
        return 0
    for p in range(1, longest + 1):
        if all(tail[i] == tail[i - p] for i in range(p, len(tail))):
            return p
    return 0


def distinct_ngram_ratio(tokens: list[int], n: int = 4) -> float:
    """Distinct token n-grams over all n-grams (1.0: no phrase repeats)."""
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / max(len(grams), 1)


def _generate(engine, tokenizer, prompt: str, **settings) -> tuple[list[int], str, list[float]]:
    from flyviz.record.run import GenerationSettings, iter_frames

    frames = list(iter_frames(engine, tokenizer, prompt, GenerationSettings(**settings)))
    generated = [f.predicted_token_id for f in frames if f.generation_index is not None]
    return generated, frames[-1].text_so_far, [f.mean_abs_state for f in frames]


def _engine_cross_entropy(engine, sequences: list[np.ndarray]) -> float:
    from flyviz.model.engine import softmax

    total, count = 0.0, 0
    for seq in sequences:
        engine.reset()
        for cur, nxt in zip(seq[:-1], seq[1:]):
            p = softmax(engine.step(int(cur)))
            total -= float(np.log(max(p[int(nxt)], 1e-300)))
            count += 1
    return total / max(count, 1)


def time_loads(asset_dir: Path, repeats: int = 3) -> dict[str, float]:
    """Median first-use (fresh cache) and warm load times of the demo brain, seconds."""
    from flyviz.demo.loader import load_demo

    first, warm = [], []
    saved = os.environ.get("FLYVIZ_CACHE_DIR")
    try:
        for _ in range(repeats):
            with tempfile.TemporaryDirectory(prefix="flyviz-cache-") as cache:
                os.environ["FLYVIZ_CACHE_DIR"] = cache
                t = time.perf_counter()
                load_demo(asset_dir=asset_dir)
                first.append(time.perf_counter() - t)
                for _ in range(2):
                    t = time.perf_counter()
                    load_demo(asset_dir=asset_dir)
                    warm.append(time.perf_counter() - t)
    finally:
        if saved is None:
            os.environ.pop("FLYVIZ_CACHE_DIR", None)
        else:
            os.environ["FLYVIZ_CACHE_DIR"] = saved
    return {"first_use_seconds_median": round(statistics.median(first), 3),
            "warm_load_seconds_median": round(statistics.median(warm), 3),
            "first_use_runs": len(first), "warm_runs": len(warm)}


def evaluate(asset_dir: str | Path | None = None, *, time_loading: bool = True,
             parity_stories: int = 3, log=print) -> dict[str, Any]:
    """Run every check; return the figures (and log them as they come)."""
    from flyviz.demo.corpus import make_corpus, split_stories
    from flyviz.demo.fit import stream_cross_entropy
    from flyviz.demo.loader import demo_asset_dir, load_demo, read_demo_info
    from flyviz.demo.ngram import NGramModel, story_sequences
    from flyviz.demo.reservoir import StreamReservoir
    from flyviz.model.engine import Engine
    from flyviz.model.tokenizer import FlyTokenizer

    asset_dir = Path(asset_dir) if asset_dir is not None else demo_asset_dir()
    info = read_demo_info(asset_dir)
    result: dict[str, Any] = {"asset_dir": str(asset_dir)}
    if time_loading:
        result["loading"] = time_loads(asset_dir)
        log(f"load: first use {result['loading']['first_use_seconds_median']:.2f} s, "
            f"warm {result['loading']['warm_load_seconds_median']:.2f} s (medians)")
    ckpt = load_demo(asset_dir=asset_dir)
    cfg = ckpt.config
    assert ckpt.tokenizer_path is not None  # the demo ships its tokenizer
    tokenizer = FlyTokenizer(ckpt.tokenizer_path)

    # The corpus is regenerated from the recorded seed; its held-out split must
    # be the one shipped, or the figures would not be comparable.
    train, held_regen = make_corpus(int(info["sizes"]["corpus_chars"]), seed=int(info["seed"]))
    held = split_stories((asset_dir / "heldout.txt").read_text(encoding="utf-8"))
    result["held_out_matches_seed"] = held == [s.strip() for s in held_regen]
    bos, eos = cfg.bos_token_id, cfg.eos_token_id
    train_seq = story_sequences([tokenizer.encode(s) for s in train], bos, eos)
    held_seq = story_sequences([tokenizer.encode(s) for s in held], bos, eos)
    ngram = NGramModel(train_seq, cfg.vocabulary)

    t = time.perf_counter()
    res = StreamReservoir(ckpt.w_offsets, ckpt.w_indices, ckpt.w_values, ckpt.wte, ckpt.in_proj,
                          ckpt.gain, ckpt.rec_gain, ckpt.bias, ckpt.in_index,
                          streams=max(1, min(128, len(held_seq) // 4)),
                          leak=cfg.leak, pad_token_id=cfg.pad_token_id)
    model_ce, mean_abs = stream_cross_entropy(
        res, held_seq, np.asarray(ckpt.head_a), np.asarray(ckpt.head_b),
        np.asarray(ckpt.ln_weight), np.asarray(ckpt.ln_bias), cfg.layer_norm_eps)
    res.close()
    ce = {"model": round(model_ce, 4),
          "unigram": round(ngram.unigram_cross_entropy(held_seq), 4),
          "bigram": round(ngram.bigram_cross_entropy(held_seq), 4),
          "held_out_tokens": int(sum(s.size - 1 for s in held_seq)),
          "seconds": round(time.perf_counter() - t, 1)}
    ce["below_unigram"] = round(ce["unigram"] - ce["model"], 4)
    ce["above_bigram"] = round(ce["model"] - ce["bigram"], 4)
    ce["pass"] = ce["below_unigram"] >= 1.0 and ce["above_bigram"] <= 0.5
    engine = Engine(ckpt)
    some = held_seq[:parity_stories]
    res1 = StreamReservoir(ckpt.w_offsets, ckpt.w_indices, ckpt.w_values, ckpt.wte, ckpt.in_proj,
                           ckpt.gain, ckpt.rec_gain, ckpt.bias, ckpt.in_index, streams=4,
                           leak=cfg.leak, pad_token_id=cfg.pad_token_id)
    batch_ce, _ = stream_cross_entropy(res1, some, np.asarray(ckpt.head_a),
                                       np.asarray(ckpt.head_b), np.asarray(ckpt.ln_weight),
                                       np.asarray(ckpt.ln_bias), cfg.layer_norm_eps)
    res1.close()
    engine_ce = _engine_cross_entropy(engine, some)
    ce["engine_vs_batch_difference"] = float(f"{abs(engine_ce - batch_ce):.2e}")
    result["cross_entropy"] = ce
    log(f"held-out cross-entropy (nats/token, {ce['held_out_tokens']} tokens): model "
        f"{ce['model']:.3f}, unigram {ce['unigram']:.3f}, bigram {ce['bigram']:.3f} -> "
        f"{ce['below_unigram']:.3f} below unigram, {ce['above_bigram']:+.3f} vs bigram "
        f"[{'PASS' if ce['pass'] else 'FAIL'}]; engine vs batch "
        f"{ce['engine_vs_batch_difference']:.1e}")

    corpus_words = set(words(" ".join(train + held)))
    ids, text, trace = _generate(engine, tokenizer, PROMPT, max_new_tokens=80)
    ws = words(text)
    known = sum(w in corpus_words for w in ws) / max(len(ws), 1)
    period = loop_period(ids)
    greedy: dict[str, Any] = {"prompt": PROMPT, "text": text, "tokens": len(ids),
              "known_word_fraction": round(known, 4), "loop_period": period,
              "distinct_4gram_ratio": round(distinct_ngram_ratio(ids), 3),
              "mean_abs_state": {"min": round(min(trace), 4),
                                 "median": round(statistics.median(trace), 4),
                                 "max": round(max(trace), 4)}}
    greedy["pass"] = known >= 0.9 and period == 0
    result["greedy"] = greedy
    log(f"greedy '{PROMPT}' ({len(ids)} tokens): {text!r}")
    log(f"  words in corpus {known:.1%}, loop period {period or 'none'}, distinct 4-grams "
        f"{greedy['distinct_4gram_ratio']:.2f}, mean |x| per token "
        f"{greedy['mean_abs_state']['min']:.3f}..{greedy['mean_abs_state']['max']:.3f} "
        f"(median {greedy['mean_abs_state']['median']:.3f}) "
        f"[{'PASS' if greedy['pass'] else 'FAIL'}]")

    samples = []
    for seed in (1, 2, 3):
        _, sample, _ = _generate(engine, tokenizer, PROMPT, max_new_tokens=60,
                                 temperature=0.7, seed=seed)
        samples.append(sample)
        log(f"sample T=0.7 seed {seed}: {sample!r}")
    result["samples"] = {"temperature": 0.7, "texts": samples,
                         "all_different": len(set(samples)) == len(samples)}
    engine.close()
    result["pass"] = bool(ce["pass"] and greedy["pass"] and result["samples"]["all_different"])
    log(f"overall: {'PASS' if result['pass'] else 'FAIL'}")
    return result


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m flyviz.demo.evaluate",
                                     description="Measure the demo brain against its quality bar.")
    parser.add_argument("asset_dir", nargs="?", default=None,
                        help="demo asset folder (default: the installed assets/demo)")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    parser.add_argument("--no-timing", action="store_true", help="skip the load-time measurement")
    args = parser.parse_args(argv)
    from flyviz.model.errors import FlyvizError

    try:
        result = evaluate(args.asset_dir, time_loading=not args.no_timing,
                          log=(lambda *_: None) if args.json else print)
    except FlyvizError as exc:
        print(f"flyviz: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
    return 0 if result["pass"] else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
