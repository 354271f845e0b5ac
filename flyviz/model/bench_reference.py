"""The reference engine (``engine.js`` under node) timed on a checkpoint, for ``flyviz bench``.

``engine.js`` (the Fly Recital web page's engine, ``../shared/reference/engine.js``) is
the yardstick the Fly LLM's speed has been quoted against. :class:`ReferenceEngine` writes
the checkpoint once as a web export and a connectome dataset (what the page loads), starts
one node process that imports the given ``engine.js`` (never a copy) and steps it on
request, so that its rounds can alternate with flyviz's own in one run. Nothing of it is
imported by the engine; it only measures.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from flyviz.fileio import check_regular, short_path
from flyviz.model.checkpoint import Checkpoint
from flyviz.model.errors import InputError

# The driver: loads the export as tests/oracle/trace.mjs does, then answers each line
# "K" on stdin with the seconds of K steps on pseudo-random tokens, one JSON list a line.
_DRIVER = r"""
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { createInterface } from "node:readline";

const [enginePath, modelDir, datasetDir, seedText] = process.argv.slice(2);
const { FlyEngine } = await import(pathToFileURL(enginePath).href);
function typed(path, Kind) {
  const bytes = readFileSync(path);
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return new Kind(copy.buffer);
}
const manifest = JSON.parse(readFileSync(join(modelDir, "manifest.json"), "utf8"));
const config = manifest.config;
const params = {};
for (const [name, entry] of Object.entries(manifest.files)) {
  params[name] = typed(join(modelDir, entry.file), Float32Array);
}
const graph = {
  offsets: typed(join(datasetDir, "graph/edges_offsets.i32"), Int32Array),
  source: typed(join(datasetDir, "graph/edges_source.u16"), Uint16Array),
  weight: typed(join(datasetDir, "graph/edges_weight.f32"), Float32Array),
  inIndex: typed(join(datasetDir, "interface/in_index.i32"), Int32Array),
};
const engine = new FlyEngine({ params, graph, config });
let seed = Number(seedText) >>> 0;
function token() {
  seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
  return 3 + (seed % (config.vocabulary - 3));
}
process.stdout.write("ready\n");
for await (const line of createInterface({ input: process.stdin })) {
  const count = Number.parseInt(line, 10);
  if (!(count > 0)) break;
  const seconds = [];
  for (let i = 0; i < count; i += 1) {
    const id = token();
    const start = process.hrtime.bigint();
    engine.step(id);
    seconds.push(Number(process.hrtime.bigint() - start) / 1e9);
  }
  process.stdout.write(JSON.stringify(seconds) + "\n");
}
"""


def check_engine_js(engine_js: str | Path) -> tuple[str, Path]:
    """node's path and ``engine_js`` resolved, or an :class:`InputError` saying what is missing."""
    node = shutil.which("node")
    if node is None:
        raise InputError("--engine-js needs node on PATH (https://nodejs.org); install "
                         "it or leave the option out")
    path = Path(engine_js).expanduser().resolve()
    try:
        check_regular(path, "JavaScript file")
    except FileNotFoundError:
        raise InputError(f"--engine-js {short_path(engine_js)}: no such file; give the "
                         "reference engine's engine.js") from None
    return node, path


class ReferenceEngine:
    """``engine.js`` stepping ``ckpt`` in a node process, timed a run of steps at a time.

    Parameters
    ----------
    engine_js
        The reference engine's file (``engine.js``).
    ckpt
        The checkpoint; it must have the web export's shape (a rank-r or dense head over
        LayerNorm, one leak, no extensions), as the Fly LLM has.

    Raises
    ------
    InputError
        When node is missing, the file is not there, or the checkpoint is not one the
        reference engine runs.
    """

    def __init__(self, engine_js: str | Path, ckpt: Checkpoint) -> None:
        from flyviz.model.writers import write_connectome_dataset, write_recital_web

        node, path = check_engine_js(engine_js)
        missing = unsupported(ckpt)
        if missing:
            raise InputError(f"engine.js runs the rank-r Fly LLM only; {ckpt.name} has "
                             f"{', '.join(missing)}: leave --engine-js out for it")
        self._folder = Path(tempfile.mkdtemp(prefix="flyviz-bench-js-"))
        self._process: subprocess.Popen[str] | None = None
        try:
            # The driver reads the manifest's config and files only: no golden traces (which
            # would run every prompt greedily twice before anything is timed).
            write_recital_web(ckpt, self._folder / "web", golden_prompts=())
            write_connectome_dataset(ckpt, self._folder / "dataset")
            driver = self._folder / "driver.mjs"
            driver.write_text(_DRIVER, encoding="utf-8")
            self._process = subprocess.Popen(
                [node, str(driver), str(path), str(self._folder / "web"),
                 str(self._folder / "dataset"), "1"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True)
            self._expect_line("ready")
        except BaseException:
            self.close()
            raise

    def _expect_line(self, what: str) -> str:
        assert self._process is not None and self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            assert self._process.stderr is not None
            self._process.wait()
            lines = [line.strip() for line in self._process.stderr.read().splitlines()
                     if line.strip()]
            # node prints the source line, a caret, the error, its stack and its version:
            # the error's own line says what went wrong.
            errors = [line for line in lines if re.match(r"^[A-Za-z]*Error\b", line)]
            reason = (errors or lines or ["no output"])[0]
            raise InputError(f"engine.js stopped before {what}: {reason}")
        return line

    def time_steps(self, steps: int) -> np.ndarray:
        """Seconds per token of ``steps`` more steps of the reference engine."""
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write(f"{int(steps)}\n")
        self._process.stdin.flush()
        return np.asarray(json.loads(self._expect_line(f"{steps} steps")), dtype=np.float64)

    def close(self) -> None:
        """Stop node and delete the export."""
        process, self._process = self._process, None
        if process is not None:
            try:
                if process.stdin is not None:
                    process.stdin.close()
                process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                process.kill()
                process.wait()
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()
        shutil.rmtree(self._folder, ignore_errors=True)


def unsupported(ckpt: Checkpoint) -> list[str]:
    """What of ``ckpt`` engine.js does not compute (empty for a rank-r Fly LLM): it reads
    16-bit sources, normalises every neuron and applies two readout factors."""
    found = list(ckpt.operator_extensions())
    if ckpt.config.readout_rank is None:
        found.append("a dense readout")
    if not ckpt.out_index_is_identity():
        found.append("a readout over part of the neurons")
    if ckpt.config.neurons > 2**16:
        found.append(f"{ckpt.config.neurons:,} neurons (16-bit sources hold 65,536)")
    return found
