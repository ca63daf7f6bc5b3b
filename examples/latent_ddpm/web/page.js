// The page: load the model files, draw 32 digits for the chosen checkpoint, and run the replay check (the
// QwenGPUs' starting noise through this page's integers must give the integers the QwenGPUs wrote).
// ?test=1 also writes the integers it computed into #test-result for the headless-browser test.
"use strict";

const COLS = 8, ROWS = 4, SCALE = 2;
const state = { model: null, decoder: null, checkpoints: [], gpu: null, noGpu: "", seed: 1, deadline: 10000 };

// WebGPU with a deadline: a device that never finishes (seen in headless browsers) must not hang the page.
// ?deadline=MS sets it (a software GPU in a test browser is slow).
async function gpuSample(ck, xTs, ms = state.deadline) {
  const late = new Promise((_, reject) => setTimeout(() => reject(new Error(`no result within ${ms} ms`)), ms));
  return Promise.race([sampleWebGPU(state.gpu, state.model, ck, xTs), late]);
}

async function sampleAll(ck, xTs) {
  if (state.gpu) {
    try {
      return { path: "WebGPU", x0: await gpuSample(ck, xTs) };
    } catch (err) {
      state.gpu = null;           // said on the page, never silent: the path label shows JavaScript from now on
      state.noGpu = `failed: ${err.message}`;
    }
  }
  return { path: "JavaScript", x0: xTs.map((x) => sampleJS(state.model, ck, x)) };
}

function draw(images) {
  const canvas = document.getElementById("grid");
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  const img = ctx.createImageData(28, 28);
  images.forEach((pixels, s) => {
    for (let p = 0; p < 784; p++) {
      const v = 255 - Math.round(255 * pixels[p]);
      img.data.set([v, v, v, 255], 4 * p);
    }
    const tmp = document.createElement("canvas");
    tmp.width = tmp.height = 28;
    tmp.getContext("2d").putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(tmp, (s % COLS) * 28 * SCALE + 2, Math.floor(s / COLS) * 28 * SCALE + 2, 28 * SCALE - 4,
                  28 * SCALE - 4);
  });
}

async function render() {
  const i = Number(document.getElementById("checkpoint").value);
  const ck = state.checkpoints[i];
  document.getElementById("checkpoint-label").textContent =
    `step ${ck.step} of ${state.checkpoints[state.checkpoints.length - 1].step}` +
    (ck.step === 0 ? " (untrained)" : "");
  const { path, x0 } = await sampleAll(ck, noise(state.seed, COLS * ROWS, state.model.D));
  document.getElementById("path").textContent =
    `sampled with ${path}` + (state.gpu ? "" : ` (WebGPU: ${state.noGpu})`);
  draw(x0.map((x) => decode(state.decoder, x)));
}

// The QwenGPUs' noise through the final checkpoint: the page's integers must equal the ones the QwenGPUs wrote.
async function replayCheck() {
  const final = state.checkpoints[state.checkpoints.length - 1];
  const xTs = state.model.replay.xT.map((x) => Int32Array.from(x));
  const want = state.model.replay.x0;
  const results = { JavaScript: xTs.map((x) => sampleJS(state.model, final, x)) };
  if (state.gpu) results.WebGPU = (await sampleAll(final, xTs)).x0;
  const lines = [];
  let ok = true;
  for (const [path, got] of Object.entries(results)) {
    let same = 0, total = 0;
    got.forEach((x, s) => x.forEach((v, i) => { total++; if (v === want[s][i]) same++; }));
    ok = ok && same === total;
    lines.push(`${path}: ${same} of ${total} integers equal the QwenGPUs'`);
  }
  const el = document.getElementById("replay");
  el.className = ok ? "pass" : "fail";
  el.textContent = `Replay check ${ok ? "passed" : "FAILED"} (${want.length} digits from the QwenGPUs' noise, ` +
    `step ${final.step}): ${lines.join("; ")}`;
  return { ok, results };
}

async function testReport(check) {
  // every checkpoint through the replay's noise, both paths where there are two
  const xTs = state.model.replay.xT.map((x) => Int32Array.from(x));
  const out = { replay_ok: check.ok, webgpu: Boolean(state.gpu), webgpu_absent: state.noGpu || "", checkpoints: [] };
  for (const ck of state.checkpoints) {
    const row = { step: ck.step, js: xTs.map((x) => Array.from(sampleJS(state.model, ck, x))) };
    if (state.gpu) {
      try {
        row.webgpu = (await gpuSample(ck, xTs)).map((x) => Array.from(x));
      } catch (err) {
        state.gpu = null;
        out.webgpu = false;
        out.webgpu_absent = `failed: ${err.message}`;
      }
    }
    out.checkpoints.push(row);
  }
  await testDone(out);
}

// The test's result in #test-result; with ?post=1 also sent back to the page's own server, for a test that waits in
// real time (a browser's virtual time, used with --dump-dom, runs the deadlines' timers ahead of a GPU that answers
// in real time).
async function testDone(result) {
  const pre = document.getElementById("test-result");
  pre.textContent = JSON.stringify(result);
  pre.dataset.done = "1";
  if (new URLSearchParams(location.search).get("post") === "1") {
    await fetch("result", { method: "POST", body: pre.textContent });
  }
}

async function start() {
  const params = new URLSearchParams(location.search);
  try {
    state.model = await (await fetch("model.json")).json();
    const bin = await (await fetch(state.model.decoder.file)).arrayBuffer();
    state.decoder = splitDecoder(bin, state.model.decoder.shapes);
    state.checkpoints = state.model.checkpoints.map(flatCheckpoint);
    state.deadline = Number(params.get("deadline")) || state.deadline;
    const gpu = params.get("webgpu") === "0" ? { device: null, why: "off (?webgpu=0)" } : await webgpuDevice(
      params.get("deadline") ? state.deadline : undefined);
    state.gpu = gpu.device;
    state.noGpu = gpu.why;
    const slider = document.getElementById("checkpoint");
    slider.max = String(state.checkpoints.length - 1);
    slider.value = slider.max;
    slider.addEventListener("input", render);
    document.getElementById("resample").addEventListener("click", () => { state.seed++; render(); });
    const f = state.model.figures;
    document.getElementById("figures").textContent =
      `On the QwenGPUs, after ${f.steps} steps, an MNIST classifier recognised ` +
      `${Math.round(100 * f.recognised_qwengpu)}% ` +
      `of ${f.samples} samples (float64 training on the same draws: ${Math.round(100 * f.recognised_float64)}%).`;
    await render();
    const check = await replayCheck();
    if (params.get("test") === "1") await testReport(check);
  } catch (err) {
    const el = document.getElementById("replay");
    el.className = "fail";
    el.textContent = `The page could not run: ${err.message}`;
    await testDone({ error: String(err.message) });
  }
}

start();
