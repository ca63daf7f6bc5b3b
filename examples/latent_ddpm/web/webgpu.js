// The same int32 DDIM sampling as ddpm.js, as a WebGPU compute shader: one invocation per sample. WGSL's i32
// multiplication and addition wrap and >> of an i32 is arithmetic, as in the CUDA kernels.
"use strict";

const SHADER = /* wgsl */ `
struct Params { D: u32, hr: u32, ranks: u32, T: u32, n: u32 };
@group(0) @binding(0) var<storage, read> w: array<i32>;        // per rank: w1 (n1 x hr), then w2 ((hr + 1) x D)
@group(0) @binding(1) var<storage, read> sched: array<i32>;    // F[0..T], C1[0..T], C2[0..T]
@group(0) @binding(2) var<storage, read_write> x: array<i32>;  // n x D: x_T in, x_0 out
@group(0) @binding(3) var<uniform> p: Params;

fn rsh(v: i32, m: u32) -> i32 { return (v + (1i << (m - 1u))) >> m; }

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let s = gid.x;
  if (s >= p.n) { return; }
  let D = p.D; let hr = p.hr; let n1 = D + 2u;
  let per = n1 * hr + (hr + 1u) * D;
  var u: array<i32, 16>;
  var e: array<i32, 16>;
  for (var i = 0u; i < D; i++) { u[i] = x[s * D + i]; }
  for (var t = p.T; t >= 1u; t--) {
    u[D] = sched[t];
    u[D + 1u] = 256i;
    for (var j = 0u; j < D; j++) { e[j] = 0i; }
    for (var r = 0u; r < p.ranks; r++) {
      let b1 = r * per;
      let b2 = b1 + n1 * hr;
      for (var j = 0u; j < D; j++) { e[j] += w[b2 + hr * D + j]; }
      for (var k = 0u; k < hr; k++) {
        var z = 0i;
        for (var i = 0u; i < n1; i++) { z += w[b1 + i * hr + k] * u[i]; }
        let h = max(rsh(z, 8u), 0i);
        for (var j = 0u; j < D; j++) { e[j] += rsh(w[b2 + k * D + j] * h, 8u); }
      }
    }
    for (var i = 0u; i < D; i++) {
      u[i] = rsh(sched[p.T + 1u + t] * u[i] + sched[2u * (p.T + 1u) + t] * e[i], 8u);
    }
  }
  for (var i = 0u; i < D; i++) { x[s * D + i] = u[i]; }
}
`;

// A GPUDevice, or null where the browser has no WebGPU, no adapter, or none within ``ms`` milliseconds (a headless
// browser without a usable GPU may never answer): the page then uses ddpm.js alone and says so.
async function webgpuDevice(ms = 3000) {
  if (typeof navigator === "undefined" || !navigator.gpu) return { device: null, why: "no navigator.gpu" };
  const late = new Promise((resolve) => setTimeout(() => resolve("timeout"), ms));
  try {
    const adapter = await Promise.race([navigator.gpu.requestAdapter(), late]);
    if (adapter === "timeout") return { device: null, why: `no adapter within ${ms} ms` };
    if (!adapter) return { device: null, why: "no adapter" };
    const device = await Promise.race([adapter.requestDevice(), late]);
    return device === "timeout" ? { device: null, why: "no device" } : { device, why: "" };
  } catch (err) {
    return { device: null, why: err.message };
  }
}

// All samples at once on the GPU: returns an array of Int32Array(D), x_0 for each x_T.
async function sampleWebGPU(device, model, ck, xTs) {
  const D = model.D, hr = model.hr, n = xTs.length;
  const weights = new Int32Array(model.ranks * ((D + 2) * hr + (hr + 1) * D));
  let at = 0;
  for (let r = 0; r < model.ranks; r++) {
    weights.set(ck.w1[r], at); at += ck.w1[r].length;
    weights.set(ck.w2[r], at); at += ck.w2[r].length;
  }
  const sched = Int32Array.from([...model.F, ...model.C1, ...model.C2]);
  const xs = new Int32Array(n * D);
  xTs.forEach((x, s) => xs.set(x, s * D));
  const make = (data, usage) => {
    const buf = device.createBuffer({ size: Math.max(16, data.byteLength), usage: usage | GPUBufferUsage.COPY_DST });
    device.queue.writeBuffer(buf, 0, data);
    return buf;
  };
  const wBuf = make(weights, GPUBufferUsage.STORAGE);
  const sBuf = make(sched, GPUBufferUsage.STORAGE);
  const xBuf = make(xs, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC);
  const pBuf = make(new Uint32Array([D, hr, model.ranks, model.T, n, 0, 0, 0]), GPUBufferUsage.UNIFORM);
  const readBuf = device.createBuffer({
    size: xs.byteLength, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
  });
  const pipeline = device.createComputePipeline({
    layout: "auto", compute: { module: device.createShaderModule({ code: SHADER }), entryPoint: "main" },
  });
  const bind = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [wBuf, sBuf, xBuf, pBuf].map((buffer, binding) => ({ binding, resource: { buffer } })),
  });
  const enc = device.createCommandEncoder();
  const pass = enc.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bind);
  pass.dispatchWorkgroups(Math.ceil(n / 64));
  pass.end();
  enc.copyBufferToBuffer(xBuf, 0, readBuf, 0, xs.byteLength);
  device.queue.submit([enc.finish()]);
  await readBuf.mapAsync(GPUMapMode.READ);
  const out = new Int32Array(readBuf.getMappedRange().slice(0));
  readBuf.unmap();
  return xTs.map((_, s) => out.subarray(s * D, (s + 1) * D));
}
