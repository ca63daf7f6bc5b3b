// The trained denoiser in the browser: DDIM sampling with the int32 arithmetic of the QwenGPUs' kernels
// (examples/points_ddpm/denoiser.cu; its numpy replay is split.py), in plain JavaScript. webgpu.js runs the same
// arithmetic as a compute shader. The decoder (8 -> 128 -> 784) runs in float32, as on the CPU.
"use strict";

// rshift(v, m) = (v + 2^(m-1)) >> m: >> truncates to int32 first, so a sum that wrapped in int32 wraps here too.
function rshift(v, m) {
  return ((v + (1 << (m - 1))) | 0) >> m;
}

// One checkpoint as flat Int32Arrays per rank: w1[i * hr + k] (n1 x hr), w2[k * D + j] ((hr + 1) x D).
function flatCheckpoint(ck) {
  return {
    step: ck.step,
    w1: ck.w1.map((rows) => Int32Array.from(rows.flat())),
    w2: ck.w2.map((rows) => Int32Array.from(rows.flat())),
  };
}

// The AllReduce's result for one sample: the sum over ranks of each rank's partial output.
function predictNoise(model, ck, x, t) {
  const D = model.D, hr = model.hr, n1 = D + 2;
  const u = new Int32Array(n1);
  u.set(x);
  u[D] = model.F[t];
  u[D + 1] = 256;                                   // the bias rows' input, 1.0
  const e = new Int32Array(D);
  for (let r = 0; r < model.ranks; r++) {
    const w1 = ck.w1[r], w2 = ck.w2[r];
    for (let j = 0; j < D; j++) e[j] = (e[j] + w2[hr * D + j]) | 0;
    for (let k = 0; k < hr; k++) {
      let z = 0;
      for (let i = 0; i < n1; i++) z = (z + Math.imul(w1[i * hr + k], u[i])) | 0;
      const h = Math.max(rshift(z, 8), 0);
      for (let j = 0; j < D; j++) e[j] = (e[j] + rshift(Math.imul(w2[k * D + j], h), 8)) | 0;
    }
  }
  return e;
}

// DDIM (eta = 0) from x_T (Int32Array of D Q8 numbers) to x_0.
function sampleJS(model, ck, xT) {
  const D = model.D;
  const x = Int32Array.from(xT);
  for (let t = model.T; t >= 1; t--) {
    const e = predictNoise(model, ck, x, t);
    for (let i = 0; i < D; i++) {
      x[i] = rshift((Math.imul(model.C1[t], x[i]) + Math.imul(model.C2[t], e[i])) | 0, 8);
    }
  }
  return x;
}

// Fresh Q8 noise from a seeded generator (mulberry32 + Box-Muller): new digits, not compared with anything.
function noise(seed, n, D) {
  let a = seed >>> 0;
  const uniform = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const out = [];
  for (let s = 0; s < n; s++) {
    const x = new Int32Array(D);
    for (let i = 0; i < D; i++) {
      const g = Math.sqrt(-2 * Math.log(1 - uniform())) * Math.cos(2 * Math.PI * uniform());
      x[i] = Math.round(g * 256);
    }
    out.push(x);
  }
  return out;
}

// The decoder in float32: pixels = sigmoid(relu(z W1 + b1) W2 + b2), z = x_0 / 256.
function decode(dec, x0) {
  const [L, Hd] = dec.shapes.W1, P = dec.shapes.W2[1];
  const h = new Float32Array(Hd);
  for (let k = 0; k < Hd; k++) {
    let s = dec.b1[k];
    for (let i = 0; i < L; i++) s += (x0[i] / 256) * dec.W1[i * Hd + k];
    h[k] = Math.max(s, 0);
  }
  const img = new Float32Array(P);
  for (let p = 0; p < P; p++) {
    let s = dec.b2[p];
    for (let k = 0; k < Hd; k++) s += h[k] * dec.W2[k * P + p];
    img[p] = 1 / (1 + Math.exp(-s));
  }
  return img;
}

// decoder.bin: float32 little-endian W1, b1, W2, b2 in that order, shapes from model.json.
function splitDecoder(buffer, shapes) {
  const all = new Float32Array(buffer);
  const out = { shapes };
  let at = 0;
  for (const name of ["W1", "b1", "W2", "b2"]) {
    const n = shapes[name].reduce((a, b) => a * b, 1);
    out[name] = all.subarray(at, at + n);
    at += n;
  }
  if (at !== all.length) throw new Error(`decoder.bin holds ${all.length} floats, model.json names ${at}`);
  return out;
}

if (typeof module !== "undefined") module.exports = { rshift, predictNoise, sampleJS, noise, decode, flatCheckpoint };
