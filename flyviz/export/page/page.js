// A shared flyviz run, drawn with plain WebGL2: the page flyviz.share writes.
//
// The data (header JSON and zlib-compressed base64 arrays) sits in the page's script
// elements; nothing is fetched. The cloud's shaders are flyviz's lean cloud shaders
// (flyviz/render/cloud.py) in WebGL2's dialect, and the camera is vispy's turntable
// camera (dorsal up, azimuth about +y, elevation about the screen's right axis), so the
// page draws what flyviz's still of the same state draws.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);

  // What the page says where it cannot open, in place of "opening…" (and for a test).
  function fail(error) {
    const message = String((error && error.message) || error);
    $("status").textContent = `this page could not open: ${message}`;
    window.flyviz = Object.assign(window.flyviz || {}, { error: message });
  }

  // The data is read before anything else: a page whose data does not parse says so
  // (it stayed on "opening…", the error only in the console).
  let header;
  try {
    header = JSON.parse($("flyviz-data").textContent);
    if (!header || !Array.isArray(header.layers) || !Array.isArray(header.tokens)) {
      throw new Error("it holds no flyviz run");
    }
  } catch (error) {
    fail(`its data cannot be read (${error.message})`);
    return;
  }
  const canvas = $("brain");
  const look = header.look;

  // ------------------------------------------------------------ the data
  function bytesOf(text) {
    const raw = atob(text.trim());
    const out = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    return out;
  }

  async function inflate(name) {
    const element = document.querySelector(`script[data-name="${name}"]`);
    const stream = new Blob([bytesOf(element.textContent)]).stream()
      .pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  function halfToFloat(bits) {
    const out = new Float32Array(bits.length);
    for (let i = 0; i < bits.length; i++) {
      const h = bits[i], sign = h & 0x8000 ? -1 : 1, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
      out[i] = exp === 0 ? sign * frac * 5.960464477539063e-8
        : exp === 31 ? (frac ? NaN : sign * Infinity)
          : sign * (1 + frac / 1024) * Math.pow(2, exp - 15);
    }
    return out;
  }

  // ------------------------------------------------------------ the shaders
  // _NEURON_LOOK and the lean shaders of flyviz.render.cloud, line for line; the
  // colormap is flyviz.render.colormaps.glsl_colormap's, from the same control points.
  const VERTEX = `#version 300 es
in vec3 a_position;
in float a_code;
in float a_emphasis;
uniform mat4 u_mvp;
uniform float u_scale;     // value = (code - 128) * u_scale
uniform float u_low;
uniform float u_inv_span;
uniform float u_fold;
uniform float u_diverging;
uniform float u_size;
uniform float u_glow;
uniform float u_dim;
uniform float u_selected;
uniform float u_px_scale;
uniform float u_gain;
uniform float u_invisible;
uniform float u_quiet;
uniform vec4 u_stops[5];   // (position, r, g, b)
out vec4 v_color;
out vec2 v_shape;

vec4 colormap(float t) {
    vec3 c = u_stops[0].yzw;
    for (int k = 0; k < 4; k++) {
        c = mix(c, u_stops[k + 1].yzw, clamp((t - u_stops[k].x) / (u_stops[k + 1].x - u_stops[k].x), 0.0, 1.0));
    }
    float m = clamp((u_diverging > 0.5) ? abs(2.0 * t - 1.0) : t, 0.0, 1.0);
    return vec4(c, u_quiet + (1.0 - u_quiet) * sqrt(m));
}

void main() {
    gl_Position = u_mvp * vec4(a_position, 1.0);
    float a_value = (a_code - 128.0) * u_scale;
    float v = (u_fold > 0.5) ? abs(a_value) : a_value;
    float coord = clamp((v - u_low) * u_inv_span, 0.0, 1.0);
    float mag = (u_diverging > 0.5) ? abs(2.0 * coord - 1.0) : coord;
    vec4 c = colormap(coord);
    float lit = sqrt(mag);
    float emphasis = mix(u_dim, 1.0, a_emphasis);
    float core = u_size * (0.8 + 0.7 * lit) * mix(0.7, 1.0, a_emphasis);
    float sprite = core * (1.0 + 1.2 * u_glow * mag * mag * a_emphasis);
    vec3 rgb = c.rgb * (c.a * emphasis * u_gain);
    float halo = clamp(u_glow, 0.0, 2.0) * 0.5 * lit;
    float ring = (abs(float(gl_VertexID) - u_selected) < 0.5) ? 1.0 : 0.0;
    if (ring > 0.5) {
        sprite = max(sprite, max(3.0 * core, 18.0));
    } else {
        float peak = halo * max(max(rgb.r, rgb.g), rgb.b);
        float reach = (peak > u_invisible) ? sqrt(log(peak / u_invisible) / 1.6) : 1.0;
        sprite = min(sprite, core * max(1.0, reach));
    }
    v_color = vec4(rgb, sprite / core);
    v_shape = vec2(halo, ring);
    gl_PointSize = sprite * u_px_scale;
}`;

  const FRAGMENT = `#version 300 es
precision highp float;
in vec4 v_color;
in vec2 v_shape;
out vec4 o_color;

void main() {
    vec2 p = gl_PointCoord * 2.0 - 1.0;
    float r2 = dot(p, p);
    if (r2 > 1.0) discard;
    float rr2 = r2 * v_color.a * v_color.a;
    float disc = 1.0 - smoothstep(0.55, 1.0, sqrt(rr2));
    float halo = v_shape.x * exp2(-2.3083120654223412 * rr2);
    vec3 rgb = v_color.rgb * max(disc, halo);
    if (v_shape.y > 0.5) {
        float r = sqrt(r2);
        float ring = smoothstep(0.70, 0.80, r) * (1.0 - smoothstep(0.90, 1.0, r));
        rgb += vec3(0.45, 1.0, 0.75) * ring;
    }
    o_color = vec4(rgb, 1.0);
}`;

  // ------------------------------------------------------------ the camera
  // vispy's TurntableCamera with up "+y": the camera looks along R (1, 0, 0) from
  // centre - distance * R (1, 0, 0), R = rotate(azimuth, +y) rotate(elevation, -right).
  function rotation(azimuth, elevation) {
    const a = azimuth * Math.PI / 180, e = elevation * Math.PI / 180;
    const ca = Math.cos(a), sa = Math.sin(a), ce = Math.cos(e), se = Math.sin(e);
    const rz = (v) => [ce * v[0] + se * v[1], -se * v[0] + ce * v[1], v[2]];
    const ry = (v) => [ca * v[0] + sa * v[2], v[1], -sa * v[0] + ca * v[2]];
    return (v) => ry(rz(v));
  }

  const dot = (a, b) => a[0] * b[0] + a[1] * b[1] + a[2] * b[2];

  function framing(name, aspect) {
    // flyviz.render.camera.apply_view over the brain's bounds, at this canvas's aspect.
    const [lo, hi] = header.bounds;
    const extent = [0, 1, 2].map((k) => Math.max(hi[k] - lo[k], 1e-6));
    const axes = { front: [0, 1], top: [0, 2], side: [2, 1] }[name];
    const across = extent[axes[0]], up = extent[axes[1]], depth = extent[3 - axes[0] - axes[1]];
    const fit = aspect >= 1 ? Math.max(up, across / aspect) : Math.max(up * aspect, across);
    // perspective_room: the camera steps back so the box's near face fits, not its middle.
    const room = header.fov > 0
      ? depth * Math.tan(header.fov * Math.PI / 360) * Math.min(aspect, 1) : 0;
    const [azimuth, elevation] = header.views[name];
    return { azimuth, elevation, center: [0, 1, 2].map((k) => header.centre[k] + (lo[k] + hi[k]) / 2),
      scale_factor: fit * header.margin + room, fov: header.fov, distance: null };
  }

  function viewOf(cam, width, height) {
    // What the camera shows on a width x height canvas: the basis, the eye and the
    // projection (vispy's PerspectiveCamera: the scale factor fits the shorter side).
    let fx = cam.scale_factor, fy = cam.scale_factor;
    if (width / height > 1) fx *= width / height; else fy *= height / width;
    const f = 1 / Math.tan(Math.max(0.01, cam.fov) * Math.PI / 360);
    const dist = cam.distance || fy * f / 2;
    const R = rotation(cam.azimuth, cam.elevation);
    const forward = R([1, 0, 0]), right = R([0, 0, 1]), up = R([0, 1, 0]);
    const c = cam.center.map((v, k) => v - header.centre[k]);     // positions are centred
    const eye = [0, 1, 2].map((k) => c[k] - dist * forward[k]);
    const near = dist / 3162.3, far = dist * 3162.3, aspect = fx / fy;
    // Column-major clip = P * V, V's rows: right, up, -forward (with the eye moved to 0).
    const rows = [right, up, forward.map((v) => -v)];
    const t = rows.map((r) => -dot(r, eye));
    const p00 = f / aspect, p11 = f, p22 = (far + near) / (near - far), p23 = 2 * far * near / (near - far);
    const m = new Float32Array(16);
    for (let col = 0; col < 3; col++) {
      m[col * 4 + 0] = p00 * rows[0][col];
      m[col * 4 + 1] = p11 * rows[1][col];
      m[col * 4 + 2] = p22 * rows[2][col];
      m[col * 4 + 3] = -rows[2][col];
    }
    m[12] = p00 * t[0]; m[13] = p11 * t[1]; m[14] = p22 * t[2] + p23; m[15] = -t[2];
    return { mvp: m, right, up, forward, fy, dist };
  }

  // ------------------------------------------------------------ state of the page
  const page = {
    token: Math.min(header.index, Math.max(0, header.tokens.length - 1)),
    layer: 0, lag: 0, camera: null, moved: false, size: null, playing: false,
    gainKey: "", gain: 1, ready: false, lost: false,
  };
  let gl, program, uniforms = {}, positions, labels, ids, bodyIds = null, layerBuffers = [],
    emphasisBuffer, layerCodes = [], view = null, dirty = true;
  const layers = header.layers;
  // How the model's kind counts its frames and what the page shows beside the brain: a
  // language model's tokens, text line and next-token bars; a spiking brain's bins alone.
  const axis = header.axis || { name: "token", names: "tokens", text: true, bars: "next token" };

  function readHash() {
    const params = new URLSearchParams(location.hash.replace(/^#/, ""));
    const token = parseInt(params.get("token"), 10);
    if (Number.isFinite(token)) page.token = clamp(token, 0, Math.max(0, header.tokens.length - 1));
    const key = params.get("layer");
    const found = layers.findIndex((l) => l.key === key);
    if (found >= 0) page.layer = found;
    const lag = parseInt(params.get("lag"), 10);
    if (Number.isFinite(lag)) page.lag = Math.max(0, lag);
    const cam = (params.get("cam") || "").split(",").map(Number);
    if (cam.length === 6 && cam.every(Number.isFinite)) {
      page.camera = { azimuth: cam[0], elevation: cam[1], center: cam.slice(2, 5),
        scale_factor: cam[5], fov: header.fov, distance: null };
      page.moved = true;
    }
    const size = /^(\d+)x(\d+)$/.exec(params.get("size") || "");
    page.size = size ? [parseInt(size[1], 10), parseInt(size[2], 10)] : null;
  }

  function writeHash() {
    const params = new URLSearchParams();
    params.set("token", String(page.token));
    params.set("layer", layers[page.layer].key);
    if (layers[page.layer].per === "lag") params.set("lag", String(page.lag));
    if (page.moved) {
      const c = page.camera;
      params.set("cam", [c.azimuth, c.elevation, ...c.center, c.scale_factor]
        .map((v) => +v.toFixed(3)).join(","));
    }
    if (page.size) params.set("size", page.size.join("x"));
    history.replaceState(null, "", "#" + params.toString().replace(/%2C/g, ","));
  }

  const clamp = (v, lo, hi) => Math.min(hi, Math.max(lo, v));

  function frameOf(layer) {
    if (layer.per === "static") return 0;
    if (layer.per === "lag") return clamp(page.lag, 0, layer.frames - 1);
    return clamp(page.token, 0, layer.frames - 1);
  }

  // ------------------------------------------------------------ drawing
  function canvasSize() {
    const dpr = window.devicePixelRatio || 1;
    let w, h;
    if (page.size) [w, h] = page.size;
    else { const r = canvas.getBoundingClientRect(); w = Math.max(16, r.width); h = Math.max(16, r.height); }
    return { w, h, dpr };
  }

  function resize() {
    const { w, h, dpr } = canvasSize();
    document.getElementById("app").classList.toggle("fixed", !!page.size);
    if (page.size) { canvas.style.width = w + "px"; canvas.style.height = h + "px"; }
    const pw = Math.round(w * dpr), ph = Math.round(h * dpr);
    if (canvas.width !== pw || canvas.height !== ph) { canvas.width = pw; canvas.height = ph; }
    // The state's own camera where it has one (as flyviz's stills keep it on any canvas: the
    // scale factor fits the shorter side), else the view preset framed to this canvas.
    if (!page.moved) page.camera = header.camera ? { ...header.camera } : framing(header.view, w / h);
    dirty = true;
  }

  function project(mvp, w, h) {
    // Every shown neuron in canvas pixels (css), with whether it is in front of the camera.
    const n = header.shown, xy = new Float32Array(2 * n), ok = new Uint8Array(n);
    for (let i = 0; i < n; i++) {
      const x = positions[3 * i], y = positions[3 * i + 1], z = positions[3 * i + 2];
      const cw = mvp[3] * x + mvp[7] * y + mvp[11] * z + mvp[15];
      if (!(cw > 0)) continue;
      xy[2 * i] = ((mvp[0] * x + mvp[4] * y + mvp[8] * z + mvp[12]) / cw + 1) * 0.5 * w;
      xy[2 * i + 1] = (1 - (mvp[1] * x + mvp[5] * y + mvp[9] * z + mvp[13]) / cw) * 0.5 * h;
      ok[i] = 1;
    }
    return { xy, ok };
  }

  function densityGain(w, h, layer) {
    // flyviz.render.cloud.density_gain over the neurons as this camera shows them.
    if (look.gain !== null && look.gain !== undefined) return look.gain;
    const key = [w, h, page.layer, JSON.stringify(page.camera)].join("|");
    if (key === page.gainKey) return page.gain;
    const { xy, ok } = project(view.mvp, w, h);
    const cell = Math.max(2, look.cell_px * h / look.reference_height);
    const cells = [];
    let minX = Infinity, minY = Infinity, maxY = -Infinity;
    for (let i = 0; i < header.shown; i++) {
      if (!ok[i]) continue;
      const cx = Math.floor(xy[2 * i] / cell), cy = Math.floor(xy[2 * i + 1] / cell);
      cells.push(cx, cy);
      minX = Math.min(minX, cx); minY = Math.min(minY, cy); maxY = Math.max(maxY, cy);
    }
    let gain = 1;
    const count = cells.length / 2;
    if (count) {
      const counts = new Map(), keys = new Float64Array(count);
      for (let i = 0; i < count; i++) {
        const k = (cells[2 * i] - minX) * (maxY - minY + 1) + (cells[2 * i + 1] - minY);
        keys[i] = k;
        counts.set(k, (counts.get(k) || 0) + 1);
      }
      const crowd = new Float64Array(count);
      for (let i = 0; i < count; i++) crowd[i] = counts.get(keys[i]);
      crowd.sort();
      const at = 0.75 * (count - 1), lo = Math.floor(at), hi = Math.min(count - 1, lo + 1);
      const p75 = crowd[lo] + (crowd[hi] - crowd[lo]) * (at - lo);
      const pointPx = Math.max(1, look.point_size * h / look.reference_height);
      const disc = Math.PI * Math.pow(0.5 * pointPx * layer.size_factor, 2);
      const coverage = p75 * disc / (cell * cell);
      gain = clamp(1 / Math.max(coverage * layer.typical_alpha, 1e-6), 0.05, 1);
    }
    page.gainKey = key; page.gain = gain;
    return gain;
  }

  function draw() {
    dirty = false;
    const { w, h, dpr } = canvasSize();
    view = viewOf(page.camera, w, h);
    const layer = layers[page.layer], frame = frameOf(layer);
    const [low, high] = layer.ranges[frame];
    gl.viewport(0, 0, canvas.width, canvas.height);
    const bg = look.background;
    gl.clearColor(bg[0], bg[1], bg[2], 1);
    gl.clear(gl.COLOR_BUFFER_BIT);
    gl.useProgram(program);
    const u = uniforms;
    gl.uniformMatrix4fv(u.u_mvp, false, view.mvp);
    gl.uniform1f(u.u_scale, layer.scales[frame]);
    gl.uniform1f(u.u_low, low);
    gl.uniform1f(u.u_inv_span, 1 / (high - low));
    gl.uniform1f(u.u_fold, layer.fold ? 1 : 0);
    gl.uniform1f(u.u_diverging, layer.diverging ? 1 : 0);
    gl.uniform1f(u.u_size, Math.max(1, look.point_size * h / look.reference_height));
    gl.uniform1f(u.u_glow, clamp(look.glow, 0, 2));
    gl.uniform1f(u.u_dim, look.dim);
    gl.uniform1f(u.u_selected, header.selected);
    gl.uniform1f(u.u_px_scale, dpr);
    gl.uniform1f(u.u_gain, densityGain(w, h, layer));
    gl.uniform1f(u.u_invisible, look.invisible);
    gl.uniform1f(u.u_quiet, look.quiet);
    gl.uniform4fv(u.u_stops, new Float32Array(layer.stops.flat()));
    const codeAt = gl.getAttribLocation(program, "a_code");
    gl.bindBuffer(gl.ARRAY_BUFFER, layerBuffers[page.layer]);
    gl.vertexAttribPointer(codeAt, 1, gl.UNSIGNED_BYTE, false, 0, frame * header.shown);
    gl.drawArrays(gl.POINTS, 0, header.shown);
  }

  function loop() {
    if (dirty && gl) draw();
    requestAnimationFrame(loop);
  }

  function setupGL() {
    // Called again when the browser gives back a lost context (its GPU process restarted).
    gl = gl || canvas.getContext("webgl2", { alpha: false, antialias: false, depth: false,
      premultipliedAlpha: false, preserveDrawingBuffer: true });
    if (!gl) throw new Error("this browser has no WebGL2");
    uniforms = {};
    layerBuffers = [];
    const shader = (type, text) => {
      const s = gl.createShader(type);
      gl.shaderSource(s, text);
      gl.compileShader(s);
      if (!gl.getShaderParameter(s, gl.COMPILE_STATUS)) throw new Error(gl.getShaderInfoLog(s));
      return s;
    };
    program = gl.createProgram();
    gl.attachShader(program, shader(gl.VERTEX_SHADER, VERTEX));
    gl.attachShader(program, shader(gl.FRAGMENT_SHADER, FRAGMENT));
    gl.linkProgram(program);
    if (!gl.getProgramParameter(program, gl.LINK_STATUS)) throw new Error(gl.getProgramInfoLog(program));
    for (const name of ["u_mvp", "u_scale", "u_low", "u_inv_span", "u_fold", "u_diverging", "u_size",
      "u_glow", "u_dim", "u_selected", "u_px_scale", "u_gain", "u_invisible", "u_quiet", "u_stops"]) {
      uniforms[name] = gl.getUniformLocation(program, name);
    }
    const vao = gl.createVertexArray();
    gl.bindVertexArray(vao);
    const attribute = (name, data, size, type) => {
      const buffer = gl.createBuffer();
      gl.bindBuffer(gl.ARRAY_BUFFER, buffer);
      gl.bufferData(gl.ARRAY_BUFFER, data, gl.STATIC_DRAW);
      const at = gl.getAttribLocation(program, name);
      gl.enableVertexAttribArray(at);
      gl.vertexAttribPointer(at, size, type, false, 0, 0);
      return buffer;
    };
    attribute("a_position", positions, 3, gl.FLOAT);
    emphasisBuffer = attribute("a_emphasis", emphasis, 1, gl.UNSIGNED_BYTE);
    const codeAt = gl.getAttribLocation(program, "a_code");
    gl.enableVertexAttribArray(codeAt);
    for (const codes of layerCodes) {
      const buffer = gl.createBuffer();
      gl.bindBuffer(gl.ARRAY_BUFFER, buffer);
      gl.bufferData(gl.ARRAY_BUFFER, codes, gl.STATIC_DRAW);
      layerBuffers.push(buffer);
    }
    gl.disable(gl.DEPTH_TEST);
    gl.enable(gl.BLEND);
    gl.blendFunc(gl.ONE, gl.ONE);
  }
  let emphasis;

  // ------------------------------------------------------------ the panels
  function fmt(v) {
    // A colour bar's end as a reader says it: 300 and 12,400 (Hz), 0.25 and 1.5 (activations),
    // powers of ten only where digits would run long.
    const a = Math.abs(v);
    if (a === 0) return "0";
    if (a >= 1e6 || a < 1e-3) return v.toExponential(1).replace("e+", "e");
    if (a >= 100) return Math.round(v).toLocaleString("en-US");
    return String(Number(v.toPrecision(3)));
  }

  function buildText() {
    const text = $("text");
    text.textContent = "";
    header.tokens.forEach((t, i) => {
      const span = document.createElement("span");
      span.textContent = t.text;
      span.className = t.phase === "prompt" ? "prompt" : "generation";
      span.dataset.index = String(i);
      // Counted as the label under the slider counts (from 0 to the last index, or the
      // kind's counter).
      span.title = t.counter || `${axis.name} ${i} / ${header.tokens.length - 1}`;
      span.addEventListener("click", () => setToken(i));
      text.appendChild(span);
    });
    // The token the last step chose is read by no step: it follows the text as that step's
    // prediction (the text ended a token short of what the run printed), "[end]" for the
    // end of the text.
    const last = header.tokens.length - 1, then = last >= 0 && header.tokens[last].then;
    if (then) {
      const span = document.createElement("span");
      span.textContent = then.text;
      span.className = "generation prediction" + (then.end ? " end" : "");
      span.dataset.prediction = "true";
      const t = header.tokens[last];
      span.title = `chosen at ${t.counter || `${axis.name} ${last}`}: ${tokenText(t.next)} ` +
        percent(t.p);
      span.addEventListener("click", () => setToken(last));
      text.appendChild(span);
    }
  }

  // A probability as the app's bars write it: "43.2%" (and "<0.1%" for a sampled long shot).
  function percent(p) {
    return p > 0 && p < 0.0005 ? "<0.1%" : (100 * p).toFixed(1) + "%";
  }

  function colourbar(layer, low, high) {
    const bar = $("bar"), ctx = bar.getContext("2d"), img = ctx.createImageData(bar.width, 1);
    for (let x = 0; x < bar.width; x++) {
      const t = x / (bar.width - 1), s = layer.stops;
      let c = s[0].slice(1);
      for (let k = 0; k < 4; k++) {
        const a = clamp((t - s[k][0]) / (s[k + 1][0] - s[k][0]), 0, 1);
        c = c.map((v, j) => v + (s[k + 1][j + 1] - v) * a);
      }
      const m = layer.diverging ? Math.abs(2 * t - 1) : t;
      const alpha = look.quiet + (1 - look.quiet) * Math.sqrt(m);
      for (let j = 0; j < 3; j++) img.data[4 * x + j] = Math.round(255 * Math.min(1, c[j] * alpha));
      img.data[4 * x + 3] = 255;
    }
    for (let y = 0; y < bar.height; y++) ctx.putImageData(img, 0, y);
    $("bar-low").textContent = fmt(low);
    $("bar-high").textContent = fmt(high);
    $("bar-caption").textContent = layer.caption;
  }

  function updatePanels() {
    const n = header.tokens.length, layer = layers[page.layer], frame = frameOf(layer);
    const slider = $("token");
    slider.value = String(page.token);
    const t = header.tokens[page.token];
    // Counted from 0 to the last index, as the window's timeline and #token=K count (the
    // kind's counter: "token 11 / 39", "bin 2 / 9 · 30 ms · 412 spikes"); the last frame
    // reads "token 39 / 39", not "/ 40", which would promise one more.
    $("token-label").textContent = !n ? `no ${axis.names}`
      : t && t.counter ? t.counter : `${axis.name} ${page.token} / ${n - 1}`;
    const trace = header.trace, flows = layer.per === "lag" && trace;
    const step = flows ? trace.position - frame : -1;
    const shade = flows ? Math.max(1e-12, ...trace.token_flows.map(Math.abs)) : 1;
    for (const span of $("text").children) {
      if (span.dataset.prediction) {
        // The last step's choice: shown as the text's end at that step, later before it.
        span.classList.toggle("later", page.token < n - 1 && !flows);
        continue;
      }
      const i = parseInt(span.dataset.index, 10), pos = header.tokens[i].position;
      span.classList.toggle("current", i === page.token);
      span.classList.toggle("later", i > page.token && !flows);
      span.classList.toggle("step", flows && pos === step);
      let background = "";
      if (flows && pos <= trace.position) {
        const f = trace.token_flows[pos] / shade;
        background = f >= 0 ? `rgba(230, 60, 80, ${(0.6 * f).toFixed(3)})`
          : `rgba(80, 110, 255, ${(-0.6 * f).toFixed(3)})`;
      }
      if (!span.classList.contains("current")) span.style.background = background;
      else span.style.background = "";
    }
    const current = $("text").children[page.token];
    if (current && current.scrollIntoView && !page.playing) current.scrollIntoView({ block: "nearest" });
    const list = $("topk");
    list.textContent = "";
    if (t) {
      for (const [text, p] of t.top) {
        const li = document.createElement("li");
        if (text === t.next) li.className = "chosen";
        li.innerHTML = '<div class="bar"></div><span class="t"></span><span class="p"></span>';
        li.querySelector(".bar").style.width = (100 * p).toFixed(1) + "%";
        li.querySelector(".t").textContent = tokenText(text);
        li.querySelector(".p").textContent = percent(p);
        list.appendChild(li);
      }
    }
    // The token the step chose and its probability, named whether or not it is among the
    // bars: a sampled token outside the top k had no bar and was named nowhere.
    const chosen = $("chosen");
    chosen.hidden = !(axis.bars && t && t.generating && t.next);
    if (!chosen.hidden) {
      const among = t.top.some(([text]) => text === t.next);
      chosen.textContent = `chosen: ${tokenText(t.next)} ${percent(t.p)}` +
        (among ? "" : ` (not among the top ${t.top.length})`);
    }
    $("lag-row").hidden = layer.per !== "lag";
    if (layer.per === "lag") {
      $("lag").max = String(layer.frames - 1);
      $("lag").value = String(frame);
      $("lag-label").textContent = `step ${step}`;
    }
    // Said only while the flows are shown: the words are shaded by them only then.
    $("trace-info").hidden = !flows;
    if (flows) {
      $("trace-info").textContent = `why ${tokenText(trace.target)} at step ${trace.position}: ` +
        `L = ${trace.value.toFixed(4)}; the words are shaded by the flow they bring ` +
        "(red adds, blue takes).";
    }
    $("layer").value = String(page.layer);
    colourbar(layer, ...layer.ranges[frame]);
    document.title = `${heading(header.title)} · ${$("token-label").textContent}`;
    refreshTip();
    document.body.dataset.token = String(page.token);
    document.body.dataset.layer = layer.key;
  }

  function changed() {
    dirty = true;
    updatePanels();
    writeHash();
  }

  function setToken(i) {
    page.token = clamp(i, 0, Math.max(0, header.tokens.length - 1));
    changed();
  }

  // ------------------------------------------------------------ hover
  function hover(event) {
    const tip = $("tip");
    if (!view || drag) { tip.hidden = true; return; }
    const rect = canvas.getBoundingClientRect();
    const mx = event.clientX - rect.left, my = event.clientY - rect.top;
    const { w, h } = canvasSize();
    const { xy, ok } = project(view.mvp, w, h);
    const reach = Math.max(6, look.point_size * h / look.reference_height);
    let best = -1, bestD = reach * reach;
    for (let i = 0; i < header.shown; i++) {
      if (!ok[i]) continue;
      const dx = xy[2 * i] - mx, dy = xy[2 * i + 1] - my, d = dx * dx + dy * dy;
      if (d < bestD) { bestD = d; best = i; }
    }
    if (best < 0) { tip.hidden = true; tip.dataset.neuron = ""; hovered = -1; return; }
    hovered = best;
    tip.textContent = tipText(best);
    tip.dataset.neuron = String(ids[best]);
    tip.dataset.bodyId = bodyIds ? String(bodyIds[best]) : "";
    tip.hidden = false;
    tip.style.left = Math.min(mx + 14, rect.width - tip.offsetWidth - 4) + "px";
    tip.style.top = Math.max(0, my - 28) + "px";
  }

  // The shown neuron under the pointer (-1: none): its tooltip follows the shown frame and
  // layer, as the pointer need not move for them to change (a step, play, the menu).
  let hovered = -1;

  function tipText(best) {
    const layer = layers[page.layer], frame = frameOf(layer);
    const code = layerCodes[page.layer][frame * header.shown + best];
    let value = (code - 128) * layer.scales[frame];
    const cell = header.labels.cell_type[labels.cell[best]] || "no cell type";
    const sup = header.labels.superclass[labels.sup[best]] || "no superclass";
    // The value as the page holds it (one of 255 levels over the frame's range, so about):
    // named by the layer's caption, "firing rate in the bin (Hz) ≈ 200", not its key. Values
    // that come in steps (a spike rate: spikes over the bin and the trials) are rounded to
    // their step (one spike in 10 ms read "≈ 99"): "=" where that is the value, as a level
    // is finer than a step and the number is written whole.
    let shown = fmt(Number(value.toPrecision(2))), sign = "≈";
    const step = layer.steps ? layer.steps[frame] : 0;
    if (step > 0) {
      value = Math.round(value / step) * step;
      shown = fmt(value);
      const exact = Math.abs(Number(shown.replace(/,/g, "")) - value) <= 1e-9 * Math.abs(value);
      if (layer.scales[frame] < step && exact) sign = "=";
    }
    // The connectome's id where the model has one, the model's index beside it.
    const who = bodyIds ? `neuron ${bodyIds[best]} (#${ids[best]})` : `neuron ${ids[best]}`;
    return `${who} · ${cell} · ${sup} · ${layer.caption} ${sign} ${shown}`;
  }

  function refreshTip() {
    const tip = $("tip");
    if (hovered >= 0 && !tip.hidden) tip.textContent = tipText(hovered);
  }

  // ------------------------------------------------------------ interaction
  let drag = null;
  function bindControls() {
    canvas.addEventListener("contextmenu", (e) => e.preventDefault());
    canvas.addEventListener("pointerdown", (e) => {
      drag = { x: e.clientX, y: e.clientY, pan: e.shiftKey || e.button === 2,
        cam: JSON.parse(JSON.stringify(page.camera)) };
      canvas.setPointerCapture(e.pointerId);
      canvas.classList.add("dragging");
    });
    canvas.addEventListener("pointermove", (e) => {
      if (!drag) { hover(e); return; }
      const dx = e.clientX - drag.x, dy = e.clientY - drag.y, c = drag.cam;
      if (!dx && !dy) return;
      page.moved = true;
      if (drag.pan) {
        const { h } = canvasSize(), k = view.fy / h;
        page.camera = { ...c, center: c.center.map((v, j) => v - k * (dx * view.right[j] - dy * view.up[j])) };
      } else {
        page.camera = { ...c, azimuth: c.azimuth - 0.5 * dx, elevation: clamp(c.elevation + 0.5 * dy, -90, 90) };
      }
      $("tip").hidden = true;
      hovered = -1;
      dirty = true;
    });
    const end = () => { if (drag) { drag = null; canvas.classList.remove("dragging"); writeHash(); } };
    canvas.addEventListener("pointerup", end);
    canvas.addEventListener("pointercancel", end);
    canvas.addEventListener("pointerleave", () => {
      if (!drag) { $("tip").hidden = true; hovered = -1; }
    });
    canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      const s = Math.pow(1.1, e.deltaY / 100);
      page.camera = { ...page.camera, scale_factor: page.camera.scale_factor * s,
        distance: page.camera.distance ? page.camera.distance * s : null };
      page.moved = true;
      dirty = true;
      writeHash();
    }, { passive: false });
    $("token").addEventListener("input", (e) => { stop(); setToken(parseInt(e.target.value, 10)); });
    $("lag").addEventListener("input", (e) => { page.lag = parseInt(e.target.value, 10); changed(); });
    $("layer").addEventListener("change", (e) => { page.layer = parseInt(e.target.value, 10); changed(); });
    $("play").addEventListener("click", () => (page.playing ? stop() : play()));
    document.addEventListener("keydown", (e) => {
      // A menu's keys choose in it, and a focused slider's arrows move that slider (the
      // token's by one, the lag's and not the token): stepped here as well, one press moved
      // the token slider two tokens, and the lag slider's arrows moved the token too.
      const tag = e.target.tagName;
      if (tag === "SELECT") return;
      if (e.key === " ") { e.preventDefault(); page.playing ? stop() : play(); }
      else if (tag === "INPUT") return;
      else if (e.key === "ArrowRight") { stop(); setToken(page.token + 1); }
      else if (e.key === "ArrowLeft") { stop(); setToken(page.token - 1); }
    });
    window.addEventListener("resize", resize);
    canvas.addEventListener("webglcontextlost", (e) => { e.preventDefault(); page.lost = true; });
    canvas.addEventListener("webglcontextrestored", () => {
      setupGL();
      page.lost = false;
      dirty = true;
    });
    window.addEventListener("hashchange", () => { readHash(); resize(); changed(); });
  }

  let timer = null;
  function play() {
    const n = header.tokens.length;
    if (n < 2) return;
    if (page.token >= n - 1) setToken(0);
    page.playing = true;
    $("play").textContent = "❚❚";
    timer = setInterval(() => {
      if (page.token >= n - 1) { stop(); return; }
      setToken(page.token + 1);
    }, 1000 / header.rate);
  }
  function stop() {
    page.playing = false;
    $("play").textContent = "▶";
    if (timer !== null) clearInterval(timer);
    timer = null;
  }

  // ------------------------------------------------------------ opening
  function heading(title, limit = 80) {
    // A long title (the whole prompt) shortened at the last word that fits, never mid-word
    // unless one word is longer than the limit; the whole title is the heading's tooltip.
    const line = title.split(/\s+/).join(" ").trim();
    if (line.length <= limit) return line;
    const room = line.slice(0, limit + 1), space = room.lastIndexOf(" ");
    const kept = space > 0 ? room.slice(0, space) : line.slice(0, limit);
    return kept.replace(/[\s,;:.]+$/, "") + "…";
  }

  function fitMenu(select) {
    // A select draws its chosen entry cut where it is narrower than the entry: the side panel
    // widens to the menu's widest entry when its own width is not enough.
    const side = $("side"), stretched = select.getBoundingClientRect().width;
    select.style.width = "max-content";
    const needed = select.getBoundingClientRect().width;
    select.style.width = "";
    if (needed > stretched) {
      const panel = side.getBoundingClientRect().width + Math.ceil(needed - stretched);
      $("app").style.setProperty("--side", `${panel}px`);
    }
  }

  async function open() {
    const t0 = performance.now();
    const [pos, idBytes, bodyBytes, cells, sups, emph, ...codes] = await Promise.all([
      inflate("positions"), inflate("ids"),
      header.has_body_ids ? inflate("body_ids") : Promise.resolve(null),
      inflate("cell_type"), inflate("superclass"),
      header.has_emphasis ? inflate("emphasis") : Promise.resolve(null),
      ...layers.map((l) => inflate(l.blob))]);
    positions = halfToFloat(new Uint16Array(pos.buffer, pos.byteOffset, pos.byteLength / 2));
    ids = new Uint32Array(idBytes.buffer, idBytes.byteOffset, idBytes.byteLength / 4);
    // Body or root ids as BigInts: a FlyWire root id is past a number's exact integers.
    bodyIds = bodyBytes && new BigInt64Array(bodyBytes.slice().buffer);
    labels = { cell: new Uint16Array(cells.buffer, cells.byteOffset, cells.byteLength / 2),
      sup: new Uint16Array(sups.buffer, sups.byteOffset, sups.byteLength / 2) };
    emphasis = emph || new Uint8Array(header.shown).fill(1);
    layerCodes = codes;
    $("title").textContent = heading(header.title);
    $("title").title = header.title;
    const select = $("layer");
    layers.forEach((l, i) => {
      const option = document.createElement("option");
      option.value = String(i);
      option.textContent = l.title;
      select.appendChild(option);
    });
    fitMenu(select);
    page.layer = Math.max(0, layers.findIndex((l) => l.key === header.layer));
    readHash();
    $("token").max = String(Math.max(0, header.tokens.length - 1));
    $("token").setAttribute("aria-label", axis.name);
    // A kind whose frames carry no text has no text line, one without bars no bars.
    $("text").hidden = !axis.text;
    $("bars-title").textContent = axis.bars || "";
    $("bars-title").hidden = $("topk").hidden = !axis.bars;
    buildText();
    setupGL();
    bindControls();
    resize();
    draw();
    updatePanels();
    writeHash();
    page.openMs = performance.now() - t0;
    $("status").textContent = "";
    page.ready = true;
    requestAnimationFrame(loop);
  }

  // A token as the app and the command line show it (Python's repr): ' She', '\n', "'s".
  // JSON's quotes showed a quote token as "\"" and disagreed with the app beside it.
  function tokenText(text) {
    const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
    const escapes = { "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t" };
    let body = text.replace(/[\\\n\r\t]/g, (c) => escapes[c])
      .replace(/[\x00-\x1f\x7f]/g, (c) => "\\x" + c.charCodeAt(0).toString(16).padStart(2, "0"));
    if (quote === "'") body = body.replace(/'/g, "\\'");
    return quote + body + quote;
  }

  // What a test or an embedding page may ask of the page.
  window.flyviz = {
    page, header,
    get ready() { return page.ready; },
    setToken, play, stop, tokenText,
    // What hovering shown neuron i (an index into the page's neurons) says now.
    tipText,
    async snapshot() {
      // The picture as drawn now (after a lost context comes back, drawn again).
      while (page.lost || gl.isContextLost()) await new Promise((r) => setTimeout(r, 50));
      draw();
      return canvas.toDataURL("image/png");
    },
    info() {
      const debug = gl.getExtension("WEBGL_debug_renderer_info");
      return { renderer: gl.getParameter(debug ? debug.UNMASKED_RENDERER_WEBGL : gl.RENDERER),
        pointSizes: Array.from(gl.getParameter(gl.ALIASED_POINT_SIZE_RANGE)),
        lost: gl.isContextLost(), gain: page.gain, openMs: page.openMs,
        size: [canvas.width, canvas.height] };
    },
    frameTimes(count) {
      // Milliseconds per drawn frame, each one finished (read back) before the next.
      const out = [], px = new Uint8Array(4);
      for (let k = 0; k < count; k++) {
        page.token = k % Math.max(1, header.tokens.length);
        const t = performance.now();
        draw();
        gl.readPixels(0, 0, 1, 1, gl.RGBA, gl.UNSIGNED_BYTE, px);
        out.push(performance.now() - t);
      }
      dirty = true;
      return out;
    },
  };

  open().catch(fail);
})();
