// The lab page: builds the knob controls from /api/knobs, asks /api/audit for the report of
// `specops audit --json` (its fast variant) whenever a knob moves, and lays the report out.
// No mathematics here: every number shown is a field of the report, only formatted.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const SLIDER = 1000;          // slider positions for the continuous knobs

// ------------------------------------------------------------------ formatting
const pct = (v) => (100 * v).toFixed(2) + "%";
const fix = (v, d) => (typeof v === "number" ? v.toFixed(d) : String(v));
const sci = (v, d) => (typeof v === "number"          // Python's exponent: two digits at least
  ? v.toExponential(d).replace(/e([+-])(\d)$/, (m, sign, digit) => `e${sign}0${digit}`) : String(v));
function num(v) {               // a check's value, as `specops audit` prints it (_fmt)
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return String(v);
  if (v !== 0 && (Math.abs(v) < 1e-3 || Math.abs(v) >= 1e5)) return v.toExponential(3);
  return String(Number(v.toPrecision(4)));
}
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function setText(id, text, value) {   // value: the raw number, kept for tests and tooltips
  const e = $(id);
  e.textContent = text;
  if (value !== undefined) e.dataset.value = String(value);
}

// ------------------------------------------------------------------ knobs
// Slider <-> value maps: linear for certainty, match, gamma, seed (0..999); cubic for cost and
// length, whose ranges are wide but whose interesting values are small.  The text box holds
// the exact value sent to the server, so every value of the knob's range can be typed.
const MAPS = {
  cubic: (k) => ({
    max: SLIDER,
    toValue: (s) => {
      const v = Number(k.lo) + (Number(k.hi) - Number(k.lo)) * Math.pow(s / SLIDER, 3);
      return k.kind === "int" ? String(Math.round(v)) : String(Number(v.toPrecision(2)));
    },
    toSlider: (v) => Math.round(SLIDER * Math.cbrt((v - Number(k.lo)) / (Number(k.hi) - Number(k.lo)))),
  }),
  linear: (k) => {
    const hi = k.name === "seed" ? 999 : Number(k.hi);
    const steps = k.kind === "int" ? hi - Number(k.lo) : SLIDER;
    return {
      max: steps,
      toValue: (s) => (k.kind === "int" ? String(Number(k.lo) + s)
                       : String(Number((Number(k.lo) + (hi - Number(k.lo)) * s / steps).toFixed(3)))),
      toSlider: (v) => Math.round((v - Number(k.lo)) / (hi - Number(k.lo)) * steps),
    };
  },
};
const KNOBS = [];               // {name, text, range, map}

function buildKnobs(table) {
  const rows = $("knob-rows");
  const given = new URLSearchParams(location.search);
  for (const k of table) {
    const map = (k.name === "cost" || k.name === "length" ? MAPS.cubic : MAPS.linear)(k);
    const row = el("div", { class: "knob" });
    row.append(el("label", { for: "k-" + k.name }, k.name));
    const range = el("input", { type: "range", id: "k-" + k.name + "-range", min: "0",
                                max: String(map.max), step: "1", "aria-label": k.name + " slider" });
    const text = el("input", { type: "text", id: "k-" + k.name, inputmode: "decimal",
                               spellcheck: "false", value: given.get(k.name) ?? k.initial });
    row.append(range, text,
               el("div", { class: "what" }, `${k.what}: ${k.range} (default ${k.default})`));
    rows.append(row);
    const knob = { name: k.name, text, range, map, default: k.default };
    KNOBS.push(knob);
    syncSlider(knob);
    range.addEventListener("input", () => {
      text.value = map.toValue(Number(range.value));
      request();
    });
    let timer = null;
    text.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(request, 300); });
    text.addEventListener("change", () => { clearTimeout(timer); syncSlider(knob); request(); });
  }
}
function syncSlider(knob) {
  const v = Number(knob.text.value);
  if (knob.text.value.trim() !== "" && Number.isFinite(v)) {
    knob.range.value = String(Math.max(0, Math.min(knob.map.max, knob.map.toSlider(v))));
  }
}
const query = () => new URLSearchParams(KNOBS.map((k) => [k.name, k.text.value])).toString();

// ------------------------------------------------------------------ requests
// At most one request in flight; moves made meanwhile collapse into one follow-up request
// with the latest values, so a dragged slider never queues stale work on the server.  Each
// setting is asked twice: /api/audit/quick (everything but the exact laws, whose enumeration
// is the slow part) and then /api/audit (the whole report, laws cached per model).
let inflight = false;
let pending = null;
function request() {
  pending = query();
  document.body.dataset.state = "busy";
  if (!inflight) pump();
}
async function ask(path, q) {
  const t0 = performance.now();
  try {
    const resp = await fetch(path + "?" + q);
    const body = await resp.json();
    if (!resp.ok) { showError(body.error, body.knob); return false; }
    showError(null, null);
    render(body, performance.now() - t0);
    return true;
  } catch (err) {
    showError(`the lab server did not answer (${err}); is \`specops lab\` still running?`, null);
    return false;
  }
}
async function pump() {
  inflight = true;
  while (pending !== null) {
    const q = pending;
    pending = null;
    if (!(await ask("/api/audit/quick", q)) || pending !== null) continue;
    if (!(await ask("/api/audit", q))) continue;
    history.replaceState(null, "", "?" + q);
    document.body.dataset.knobs = q;
  }
  inflight = false;
  if ($("error").hidden) document.body.dataset.state = "ready";
}
function showError(message, knob) {
  const box = $("error");
  for (const k of KNOBS) k.text.classList.toggle("bad", k.name === knob);
  $("main").classList.toggle("stale", message !== null);
  if (message === null) { box.hidden = true; box.textContent = ""; return; }
  box.hidden = false;
  box.textContent = message;
  document.body.dataset.state = "error";
}

// ------------------------------------------------------------------ rendering
function render(r, ms) {
  const h = r.headline, a = r.article, s = r.sequence, o = r.one_token, e = r.exact_law;
  const isDefault = KNOBS.every((k) => String(r.knobs[k.name]) === k.default);
  $("status").textContent = `computed in ${Math.round(ms)} ms on the ${r.backend} backend` +
    (r.exact_law ? "" : "; the exact laws follow");
  $("variant").textContent = `The page's audit: ${r.page.variant}. ${r.page.full}.`;
  setText("h-alpha", pct(h.alpha), h.alpha);
  setText("h-wrong-tv", pct(h.wrong_fallback_tv), h.wrong_fallback_tv);
  setText("h-exact-tv", sci(h.corrected_tv, 1), h.corrected_tv);
  setText("h-length", String(h.length), h.length);
  setText("h-target-calls", String(h.target_calls), h.target_calls);
  setText("h-draft-calls", String(h.draft_calls), h.draft_calls);
  setText("h-toy", fix(h.toy_speedup, 2) + "x", h.toy_speedup);
  setText("h-est", fix(h.estimated_speedup, 2) + "x", h.estimated_speedup);
  setText("h-checks", `${r.summary.passed}/${r.summary.total}`, r.summary.passed);
  $("h-checks").className = "big " + (r.summary.all_passed ? "good-num" : "bad-num");
  $("h-backend").textContent = `on ${r.backends.join(", ")}`;
  setText("h-best", `gamma ${s.curve.best_gamma}: ${fix(s.curve.best_speedup, 2)}x`,
          s.curve.best_gamma);
  $("h-planner").textContent = s.planner ? `planner on the chain's rates: K = ${s.planner.best_k}, ` +
    `${fix(s.planner.speedup, 2)}x` : "";
  $("r-alpha").textContent = `essay: ${pct(a.alpha)}`;
  $("r-wrong-tv").textContent = `essay: ${pct(a.wrong_fallback_tv)} vs ${sci(a.corrected_tv, 1)}`;
  $("r-calls").textContent = `essay: ${a.target_calls} / ${a.draft_calls} for ${a.length}`;
  $("r-speed").textContent = `essay: ${fix(a.toy_speedup, 2)}x vs ${fix(a.estimated_speedup, 2)}x`;
  $("defaults-note").textContent = isDefault ? "" : "(the essay's figures are for the default knobs)";
  $("state-token").textContent = o.token;
  drawChart(r);
  $("one-token-note").textContent =
    `alpha = ${fix(o.alpha, 6)} = 1 - TV(p, q); rejection mass ${fix(o.rejection_mass, 6)} = ` +
    `residual mass ${fix(o.residual_mass, 6)}; corrected = min(p, q) + (1 - alpha) residual is ` +
    `p (TV ${sci(o.corrected_tv, 1)}); the wrong fallback min(p, q) + (1 - alpha) p is off by ` +
    `TV ${fix(o.wrong_tv, 6)}.`;
  renderChecks(r);
  renderTrace(r);
  renderSpeed(r);
  if (e) renderLaws(e); else lawsPending();
  renderArticle(r);
  renderEnv(r);
}

function drawChart(r) {
  const o = r.one_token, svg = $("chart"), W = 640, H = 280, L = 40, B = 30, T = 10;
  const series = [["target p", o.p, "p"], ["draft q", o.q, "q"],
                  ["residual (normalised)", o.residual, "res"],
                  ["rejection mass max(0, q - p)", o.rejection, "rej"]];
  const top = Math.max(0.05, ...series.flatMap((x) => x[1]), ...o.wrong);
  const ymax = Math.ceil(top * 10) / 10;
  const y = (v) => T + (H - T - B) * (1 - v / ymax);
  const gw = (W - L - 6) / r.tokens.length, bw = (gw - 10) / series.length;
  svg.replaceChildren();
  for (let t = 0; t <= 4; t++) {
    const v = ymax * t / 4;
    svg.append(svgEl("line", { x1: L, x2: W - 4, y1: y(v), y2: y(v), class: "grid" }));
    svg.append(svgEl("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" }, v.toFixed(2)));
  }
  r.tokens.forEach((tok, i) => {
    const x0 = L + i * gw + 5;
    series.forEach(([name, vals, color], j) => {
      const rect = svgEl("rect", { x: x0 + j * bw, y: y(vals[i]), width: bw - 1,
                                   height: Math.max(0, y(0) - y(vals[i])), class: "bar " + color });
      rect.append(svgEl("title", {}, `${name}(${tok}) = ${fix(vals[i], 6)}`));
      svg.append(rect);
    });
    for (const [vals, cls, name] of [[o.corrected, "corrected", "corrected"],
                                     [o.wrong, "wrong", "wrong fallback"]]) {
      const line = svgEl("line", { x1: x0 - 2, x2: x0 + gw - 8, y1: y(vals[i]), y2: y(vals[i]),
                                   class: "mark " + cls });
      line.append(svgEl("title", {}, `${name}(${tok}) = ${fix(vals[i], 6)}`));
      svg.append(line);
    }
    svg.append(svgEl("text", { x: x0 + gw / 2 - 5, y: H - 10, "text-anchor": "middle" }, tok));
  });
  svg.append(svgEl("line", { x1: L, x2: W - 4, y1: y(0), y2: y(0), class: "axis" }));
  const legend = $("chart-legend");
  legend.replaceChildren();
  for (const [name, , cls] of series) {
    const item = el("span");
    item.append(el("span", { class: "sw " + cls }), name);
    legend.append(item);
  }
  legend.append(el("span", { class: "corrected" }, "— corrected (= p)"),
                el("span", { class: "wrong" }, "- - wrong fallback"));
}

function renderChecks(r) {
  $("summary").textContent = `${r.summary.passed}/${r.summary.total} passed`;
  const body = $("checks").tBodies[0];
  body.replaceChildren();
  for (const c of r.checks) {
    const tr = el("tr", { "data-check": c.name });
    tr.append(el("td", { class: c.passed ? "pass" : "fail" }, c.passed ? "PASS" : "FAIL"),
              el("td", {}, c.name), el("td", { class: "value" }, num(c.value)));
    body.append(tr);
  }
}

const SHOWN = 240;              // tokens drawn; the stats cover the whole trace
function renderTrace(r) {
  const s = r.sequence, g = r.knobs.gamma;
  $("trace-stats").textContent =
    `${s.length} tokens on ${s.backend} (seed ${r.knobs.seed}, offset = step): ` +
    `${s.target_calls} target calls, ${s.draft_calls} draft calls, ${s.accepted}/${s.drafted} ` +
    `drafts accepted, ${fix(s.tokens_per_target_call, 3)} tokens per target call.`;
  const box = $("trace");
  box.replaceChildren();
  let i = 0;
  for (let step = 0; step < s.steps.length && i < SHOWN; step++) {
    const [accepted, kept] = s.steps[step];
    const span = el("span", { class: "step",
                              title: `target call ${step + 1}: ${accepted} of ${g} drafts accepted` });
    for (let j = 0; j < kept && i < SHOWN; j++, i++) {
      const kind = j < accepted ? "acc" : (accepted < g ? "cor" : "bon");
      span.append(el("span", { class: "chip " + kind }, r.tokens[s.tokens[i]]));
    }
    box.append(span);
  }
  if (s.length > SHOWN) {
    box.append(el("span", { class: "muted" }, ` … ${s.length - SHOWN} more tokens`));
  }
}

function renderSpeed(r) {
  const s = r.sequence, k = r.knobs, c = s.curve;
  $("speed-text").textContent =
    `cost = ${s.target_calls} target calls x 1 + ${s.draft_calls} draft calls x ${k.cost} = ` +
    `${Number(s.total_cost.toPrecision(4))} against ${s.length} for autoregressive decoding: toy ` +
    `speed-up ${fix(s.toy_speedup, 3)}x. Estimate (1 - a^(g+1)) / ((1 - a)(g c + 1)) with the mean ` +
    `alpha a = ${fix(s.alpha_mean, 4)} along the target chain: ${fix(s.estimated_speedup, 3)}x; ` +
    `best gamma ${c.best_gamma} (${fix(c.best_speedup, 3)}x).`;
  const p = s.planner;
  $("planner-text").textContent = p ? `specops.best_num_draft_tokens on the chain's per-position ` +
    `rates picks K = ${p.best_k}: ${fix(p.expected_tokens, 3)} tokens per step, ` +
    `${fix(p.speedup, 3)}x.` : "";
  const svg = $("curve"), W = 640, H = 260, L = 40, B = 30, T = 10;
  const ymax = Math.ceil(Math.max(...c.speedups, s.toy_speedup, 1) + 0.25);
  const x = (gm) => L + (W - L - 14) * (gm - 1) / 15;
  const y = (v) => T + (H - T - B) * (1 - v / ymax);
  svg.replaceChildren();
  for (let t = 0; t <= ymax; t += Math.max(1, Math.round(ymax / 5))) {
    svg.append(svgEl("line", { x1: L, x2: W - 10, y1: y(t), y2: y(t), class: "grid" }));
    svg.append(svgEl("text", { x: L - 6, y: y(t) + 4, "text-anchor": "end" }, t + "x"));
  }
  c.gammas.forEach((gm) => svg.append(
    svgEl("text", { x: x(gm), y: H - 10, "text-anchor": "middle" }, gm)));
  svg.append(svgEl("line", { x1: x(c.best_gamma), x2: x(c.best_gamma), y1: T, y2: y(0),
                             class: "best" }));
  const points = c.gammas.map((gm, i) => `${x(gm)},${y(c.speedups[i])}`).join(" ");
  svg.append(svgEl("polyline", { class: "curve", points }));
  c.gammas.forEach((gm, i) => {
    const dot = svgEl("circle", { cx: x(gm), cy: y(c.speedups[i]), r: 3, class: "bar p" });
    dot.append(svgEl("title", {}, `gamma ${gm}: ${fix(c.speedups[i], 3)}x expected`));
    svg.append(dot);
  });
  const toy = svgEl("circle", { cx: x(k.gamma), cy: y(s.toy_speedup), r: 6, class: "bar rej" });
  toy.append(svgEl("title", {}, `the toy trace: ${fix(s.toy_speedup, 3)}x at gamma ${k.gamma}`));
  svg.append(toy);
  svg.append(svgEl("text", { x: W - 12, y: T + 12, "text-anchor": "end" },
                   "line: expected speed-up by gamma; red: the toy trace; dashed: best gamma"));
}

function lawsPending() {
  const note = "computing the exact laws…";
  $("laws").tBodies[0].replaceChildren(el("tr", {}, undefined));
  $("laws").tBodies[0].firstChild.append(el("td", { class: "muted" }, note));
  $("length-law").tHead.replaceChildren();
  $("length-law").tBodies[0].replaceChildren();
  $("summary").textContent += " (exact-law checks computing…)";
  setText("h-checks", "…");
}

function renderLaws(e) {
  const rows = [
    [`token-wise verification, K = ${e.K} drafts`, `TV to the target ${sci(e.tv, 1)}`,
     `wrong fallback: TV ${fix(e.wrong_fallback_tv, 6)}`],
    [`block verification (method="block"), K = ${e.K}`, `TV to the target ${sci(e.block_tv, 1)}`,
     `E[accepted] ${fix(e.expected_accepted_block, 4)} vs token-wise ` +
     fix(e.expected_accepted_token, 4)],
    ["tree verification: 2 siblings at the root", `TV to the target ${sci(e.tree_tv, 1)}`,
     `P(accept) rsd ${fix(e.tree_accept.rsd, 4)}, mss ${fix(e.tree_accept.mss, 4)} vs one ` +
     `draft ${fix(e.single_accept, 4)}`],
    [`traversal verification: tree ${JSON.stringify(e.traversal_tree)}`,
     `TV to the target ${sci(e.traversal_tv, 1)}`,
     "E[accepted] " + Object.entries(e.traversal_expected_accepted)
       .map(([m, v]) => `${m} ${fix(v, 4)}`).join(", ")],
    ["SGLang's relaxed thresholds (not exact): 2 siblings at the root",
     "TV to the target " + Object.entries(e.sglang_threshold_tv)
       .map(([m, v]) => `${m} ${sci(v, 2)}`).join(", "), "threshold_single / threshold_acc"],
  ];
  const body = $("laws").tBodies[0];
  body.replaceChildren();
  for (const row of rows) {
    const tr = el("tr");
    row.forEach((cell) => tr.append(el("td", {}, cell)));
    body.append(tr);
  }
  const t = $("length-law");
  const head = el("tr");
  head.append(el("th", {}, "n"));
  e.length_law.forEach((_, n) => head.append(el("th", {}, String(n))));
  t.tHead.replaceChildren(head);
  t.tBodies[0].replaceChildren();
  for (const [name, law] of [["token-wise (exact law)", e.length_law],
                             ["alpha chain", e.length_law_markov],
                             ["block (exact law)", e.block_length_law]]) {
    const tr = el("tr");
    tr.append(el("td", {}, name));
    law.forEach((v) => tr.append(el("td", {}, fix(v, 4))));
    t.tBodies[0].append(tr);
  }
}

const ARTICLE_ROWS = [
  ["alpha", "one-token alpha at the start", pct],
  ["corrected_tv", "TV(corrected, p)", (v) => sci(v, 1)],
  ["wrong_fallback_tv", "wrong-fallback TV", pct], ["length", "trace length", String],
  ["gamma", "gamma (drafts per call)", String], ["target_calls", "target calls", String],
  ["draft_calls", "draft calls", String], ["toy_speedup", "toy speed-up", (v) => fix(v, 2)],
  ["estimated_speedup", "accounting estimate", (v) => fix(v, 2)]];
function renderArticle(r) {
  const body = $("article").tBodies[0];
  body.replaceChildren();
  for (const [key, label, f] of ARTICLE_ROWS) {
    const tr = el("tr");
    tr.append(el("td", {}, label), el("td", {}, f(r.headline[key])), el("td", {}, f(r.article[key])));
    body.append(tr);
  }
  const src = r.article_source;
  $("source").textContent = `The essay: ${src.essay}, which builds on ${src.papers.join("; and ")}. ` +
    `Its grid figures (worst exact TV ${sci(r.article.worst_exact_tv, 2)} over ` +
    `${r.article.grid_settings} settings) are for \`specops audit\`, which runs the grid.`;
}

function renderEnv(r) {
  const body = $("backends").tBodies[0];
  body.replaceChildren();
  for (const b of r.backend_status) {
    const tr = el("tr");
    tr.append(el("td", {}, b.name), el("td", { class: b.available ? "pass" : "fail" },
              b.available ? "available" : "unavailable"), el("td", { class: "value" }, b.detail));
    body.append(tr);
  }
  const b = r.build, c = b.cpp;
  $("build").textContent = `specops ${b.version}; Python ${b.python}, torch ${b.torch}, numpy ` +
    `${b.numpy}, Triton ${b.triton || "not installed"}; C++ ` +
    (c.built ? `${c.isa || "no ISA level"} selected of ${c.isa_levels.join(", ")}` +
               (c.openmp ? `, OpenMP ${b.openmp_threads} threads` : ", no OpenMP")
             : "extension not loaded") +
    (c.error ? `; ${c.error}` : "");
}

// ------------------------------------------------------------------ start
fetch("/api/knobs").then((resp) => resp.json()).then((info) => {
  buildKnobs(info.knobs);
  request();
}).catch((err) => showError(`cannot load the knobs: ${err}`, null));
