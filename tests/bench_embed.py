"""Benchmark: what moving napari's token slider and a notebook widget's slider cost (not a test).

    python tests/bench_embed.py [--tokens 200] [--repeats 30]

On the demo brain (49,393 neurons, 44,370 with a soma) and a run of
``--tokens`` tokens saved and reopened (memory-mapped, as the reader opens it):

1. ``BrainSource.rgba``: one token's state to the colours of the shown neurons;
2. the same set as a napari Points layer's ``face_color`` (no viewer, no drawing);
3. ``BrainWidget.get_frame`` at 640x400 on the offscreen OpenGL (a notebook frame);
4. opening the recording for the reader (``BrainSource.open``, the model included).

Prints the median of ``--repeats`` tries of each, in milliseconds, as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def median_ms(fn, repeats: int) -> float:
    times = []
    for i in range(repeats):
        t = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - t) * 1000.0)
    return round(statistics.median(times), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()

    import flyviz
    from flyviz.brain_source import BrainSource

    model = flyviz.load("demo")
    with tempfile.TemporaryDirectory() as tmp:
        path = flyviz.run(model, "Once upon a time", max_new_tokens=args.tokens).save(Path(tmp) / "run.flyrec")
        t = time.perf_counter()
        source = BrainSource.open(path, model=model)
        n = source.tokens
        source.value_range("signed")
        results = {"tokens": n, "open_ms": round((time.perf_counter() - t) * 1000.0, 1)}
        results["rgba_ms"] = median_ms(lambda i: source.rgba("signed", i % n), args.repeats)
        try:
            from napari.layers import Points

            from flyviz.napari._layers import napari_coordinates

            layer = Points(napari_coordinates(source.positions_um), face_color=source.rgba("signed", 0))
            results["napari_face_color_ms"] = median_ms(
                lambda i: setattr(layer, "face_color", source.rgba("signed", i % n)), args.repeats)
        except ImportError:
            results["napari_face_color_ms"] = None
        try:
            from flyviz.notebook import BrainWidget

            widget = BrainWidget(source.recording, model, size=(640, 400))

            def frame(i: int) -> None:
                widget.token = i % n
                widget.get_frame()

            frame(0)
            results["notebook_frame_ms"] = median_ms(frame, args.repeats)
            widget.close()
        except ImportError:
            results["notebook_frame_ms"] = None
    print(json.dumps(results))


if __name__ == "__main__":
    main()
