// A 2-8-1 ReLU MLP for XOR in Q8 fixed point (1.0 = 256), 32 parameters, every value an int32 (wrap-around).
// Round-to-nearest shift: rshift(v, m) = (v + 2^(m-1)) >> m, arithmetic (ties go up, toward +infinity).
// The numpy replay is tests/reference.py; it must agree bit for bit.
//
// Parameters p[32] (gradients g[32] have the same layout), k = hidden unit 0..7:
//   p[k]      W1[k][0]   weight from input 0 to hidden k
//   p[8 + k]  W1[k][1]   weight from input 1 to hidden k
//   p[16 + k] b1[k]      hidden bias
//   p[24 + k] W2[k]      hidden k to the output (there is no output bias: 16 + 8 + 8 = 32 parameters)
// Minibatch batch[32], up to 8 samples s = 0..7:
//   batch[s] x0[s], batch[8 + s] x1[s], batch[16 + s] target t[s], batch[24 + s] output o[s]
//
// Forward, per sample:  z[k] = rshift(W1[k][0] x0 + W1[k][1] x1, 8) + b1[k];  h[k] = max(z[k], 0)
//                       o    = sum_k rshift(W2[k] h[k], 8)
// Loss L = 1/2 sum_s (o[s] - t[s])^2, so dL/do = e = o - t (Q8); per sample and hidden unit:
//   dW2[k] = rshift(e h[k], 8);  d = z[k] > 0 ? rshift(e W2[k], 8) : 0;  db1[k] = d;
//   dW1[k][j] = rshift(d x_j, 8)
// Loss word (mlp_loss): += (uint32)(e e + 256) >> 9, the Q8 value of e^2 / 2.
// SGD: p[i] -= rshift(g[i], 6).
//
// No kernel needs a barrier: threads of different warps touch different words or add with atomics.

#define H 8     // hidden units
#define S 8     // sample stride of the minibatch arrays

// Thread k (launch with 8 threads: two warps) owns hidden unit k; it loops over the ns samples and adds its term
// into o[s] with atomicAdd. The loader sets o[s] = 0 before the launch.
extern "C" __global__ void mlp_forward(const int *p, int *batch, int ns)
{
    int k = threadIdx.x;
    int w0 = p[k], w1 = p[H + k], b = p[2 * H + k], w2 = p[3 * H + k];
#pragma unroll 1
    for (int s = 0; s < ns; s++) {
        int z = ((w0 * batch[s] + w1 * batch[S + s] + 128) >> 8) + b;
        int h = max(z, 0);
        atomicAdd(&batch[3 * S + s], (w2 * h + 128) >> 8);
    }
}

// Thread s (launch with ns threads, ns <= 8) owns sample s; it loops over the 8 hidden units, recomputes z and h, and
// adds its per-sample gradients into g with atomicAdd: the four lanes of a warp add into the same word. The host zeroes
// g before the first backward of a step (keeping it accumulates). relu'(z) is min(h, 1): h is an integer >= 0, so
// the mask is 1 exactly when z > 0; multiplying by it keeps the kernel free of divergent branches.
extern "C" __global__ void mlp_backward(const int *p, const int *batch, int *g)
{
    int s = threadIdx.x;
    int x0 = batch[s], x1 = batch[S + s];
    int e = batch[3 * S + s] - batch[2 * S + s];
#pragma unroll 1
    for (int k = 0; k < H; k++) {
        int z = ((p[k] * x0 + p[H + k] * x1 + 128) >> 8) + p[2 * H + k];
        int h = max(z, 0);
        atomicAdd(&g[3 * H + k], (e * h + 128) >> 8);
        int d = (e * p[3 * H + k] * min(h, 1) + 128) >> 8;
        atomicAdd(&g[2 * H + k], d);
        atomicAdd(&g[k], (d * x0 + 128) >> 8);
        atomicAdd(&g[H + k], (d * x1 + 128) >> 8);
    }
}

// Thread s (launch with ns threads) adds its squared error to the loss word: *loss += (unsigned)(e e + 256) >> 9,
// the Q8 value of e^2 / 2 (an unsigned shift: e e is a square). The host zeroes *loss when it wants a fresh sum.
extern "C" __global__ void mlp_loss(const int *batch, int *loss)
{
    int s = threadIdx.x;
    int e = batch[3 * S + s] - batch[2 * S + s];
    atomicAdd(loss, (int)(((unsigned)(e * e) + 256u) >> 9));
}

// Thread i (launch with one thread per parameter, e.g. 32: eight warps) updates p[i] -= round(g[i] / 2^6).
extern "C" __global__ void sgd(int *p, const int *g)
{
    int i = threadIdx.x;
    p[i] -= (g[i] + 32) >> 6;
}
