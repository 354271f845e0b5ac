// Golden traces and sampler picks from the reference engine (engine.js), for flyviz's parity tests.
//
// usage:
//   node trace.mjs ENGINE_JS MODEL_DIR DATASET_DIR REQUEST_JSON
//
// MODEL_DIR is a Fly Recital web export (manifest.json + *.f32) and DATASET_DIR a
// connectome dataset (graph/, interface/), both as flyviz writes them. REQUEST_JSON is
//   {"prompts": [[1, 54, ...], ...], "max_new_tokens": 60}
// or {"picks": [{"logits": [...], "temperature": t, "top_p": p, "draws": [u, ...]}, ...]}.
// Prints one JSON object: {"traces": [{prompt_ids, tokens, steps: [{token,
// top1_probability, mean_abs_state}], final_state_mean_abs}]} or {"picks": [[id, ...], ...]}.
// final_state_mean_abs is the state after the last step run: the last token fed unless it
// is EOS (fly-formats.md section 4.3).
// The engine is imported from the path given, never copied.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [enginePath, modelDir, datasetDir, requestPath] = process.argv.slice(2);
const { FlyEngine } = await import(pathToFileURL(enginePath).href);

function typed(path, Kind) {
  const bytes = readFileSync(path);
  // Copy into a fresh, aligned buffer: a Buffer's byteOffset need not be a multiple of 4.
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return new Kind(copy.buffer);
}

const request = JSON.parse(readFileSync(requestPath, "utf8"));
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

function argmaxProbability(logits) {
  const probabilities = engine.probabilities(logits);
  let best = 0;
  for (let v = 1; v < probabilities.length; v += 1) if (probabilities[v] > probabilities[best]) best = v;
  return probabilities[best];
}

if (request.picks) {
  const picks = request.picks.map((item) => {
    const logits = Float32Array.from(item.logits);
    let at = 0;
    const random = () => item.draws[at++];
    return item.draws.map(() => engine.pick(logits, { temperature: item.temperature, topP: item.top_p, random }));
  });
  process.stdout.write(JSON.stringify({ picks }));
} else {
  const traces = [];
  const started = process.hrtime.bigint();
  let stepsRun = 0;
  for (const promptIds of request.prompts) {
    engine.reset();
    let logits;
    for (const id of promptIds) { logits = engine.step(id); stepsRun += 1; }
    const tokens = [];
    const steps = [];
    while (tokens.length < request.max_new_tokens) {
      const token = engine.pick(logits);
      steps.push({ token, top1_probability: argmaxProbability(logits), mean_abs_state: engine.meanAbsState });
      tokens.push(token);
      if (token === config.eos_token_id) break;
      // As the authors' generator: every token but EOS is fed, the last one too, so the
      // final state is the state after the last step it ran.
      logits = engine.step(token);
      stepsRun += 1;
    }
    let absolute = 0;
    for (let i = 0; i < engine.state.length; i += 1) absolute += Math.abs(engine.state[i]);
    traces.push({ prompt_ids: promptIds, tokens, steps, final_state_mean_abs: absolute / engine.state.length });
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  process.stdout.write(JSON.stringify({ traces, steps_run: stepsRun, seconds }));
}
