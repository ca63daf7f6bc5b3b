// The 2-8-1 ReLU MLP of the XOR runs (xor_ddp, xor_zero) in Q8 fixed point (1.0 = 256), 32 parameters, int32 words.
// Round-to-nearest shift: rshift(v, m) = (v + 2^(m-1)) >> m, arithmetic (ties go up, toward +infinity).
// The numpy replay (examples/xor_ddp/replay.py) is written from this comment, not from the PTX.
//
// Parameters p[32] (gradients g[32] have the same layout), k = hidden unit 0..7:
//   p[k] W1[k][0], p[8 + k] W1[k][1], p[16 + k] b1[k], p[24 + k] W2[k]      (no output bias: 32 parameters)
// Batch b[24] of the runs, 8 samples s = 0..7 (a step is one batch):  b[s] x0[s], b[8 + s] x1[s], b[16 + s] e[s]
// Half-batch b[12] (examples/torch_q8), up to 4 samples:               b[s] x0[s], b[4 + s] x1[s], b[8 + s] e[s]
// The loader writes e[s] = -t[s] (the target, negated, is how the data set stores it); the forward adds the network's
// output y[s], so e[s] ends as the error y - t, which is dL/dy for L = 1/2 sum (y - t)^2.
//
// Forward:  z[k] = rshift(W1[k][0] x0 + W1[k][1] x1, 8) + b1[k];  h[k] = max(z[k], 0);  y = sum_k rshift(W2[k] h[k], 8)
// Backward: dW2[k] += rshift(e h[k], 8);  d = rshift(e W2[k] min(h[k], 1), 8);  db1[k] += d;  dW1[k][j] += rshift(d x_j, 8)
// Loss:     *loss += (uint32)(e e + 256) >> 9            (the Q8 value of e^2 / 2)
// Correct:  *count += (-128 < e <= 128)                  (y > 128 is "true"; the target is 0 or 256)
// SGD:      p[i] -= rshift(g[i], 6)
// Sums over samples (and hidden units) are atomicAdds or a lane's register sums: integer addition mod 2^32, so the
// order does not matter.
//
// Cost (model tokens: 9 a record, 3 more per lane that stores). The runs' kernels, xor_forward_samples and
// xor_backward_units, put a sample on each lane for the forward (a lane sums its output over the hidden units in a
// register) and a hidden unit on each lane for the backward (a lane sums its gradients over the samples: two in
// registers, two with atomicAdd on words no other lane touches, as the 32-block ROM does not hold four register
// sums); the backward recomputes z, as memory has no room for the 64 h words. The half-batch kernels xor_forward
// (a hidden unit a lane, atomicAdd into the errors), xor_loss and xor_backward (a sample a lane, atomicAdd into the
// gradients) cost about a third more per sample.

#define H 8     // hidden units
#define S 4     // sample stride of the half-batch
#define NS 8    // sample stride of the batch

// Thread s (8 threads, two warps; or fewer) owns sample s of the batch b[24]: its output over the hidden units, its error (stored over the
// negated target) and its loss term (atomicAdd into *loss).
extern "C" __global__ void xor_forward_samples(const int *p, int *b, int *loss)
{
    int s = threadIdx.x;
    int x0 = b[s], x1 = b[NS + s], e = b[2 * NS + s];
#pragma unroll 2
    for (int k = 0; k < H; k++) {
        int z = ((p[k] * x0 + p[H + k] * x1 + 128) >> 8) + p[2 * H + k];
        e += (p[3 * H + k] * max(z, 0) + 128) >> 8;
    }
    b[2 * NS + s] = e;
    atomicAdd(loss, (int)(((unsigned)(e * e) + 256u) >> 9));
}

// Thread t (4 threads: one warp) owns hidden unit k = u + t and sums its four gradients over the 8 samples of the
// batch b[24]:
// g[t] dW1[k][0] and g[4 + t] dW1[k][1] (summed in registers, stored after the loop), a[t] db1[k] and a[4 + t] dW2[k]
// (atomicAdd on words no other lane touches, so a[0..7] must be 0 at the launch: the 32-block ROM does not hold four
// register sums). g may be the batch's x0 words: they are stored after the last read. Launched twice a step (u = 0
// and u = 4). relu'(z) is min(h, 1): h is an integer >= 0. The batch and the biases are read through volatile
// pointers so that each load feeds one operation (the machine folds such a load into it).
extern "C" __global__ void xor_backward_units(const int *p, const int *b, int *g, int *a, int u)
{
    const volatile int *pv = p, *bv = b;
    int t = threadIdx.x, k = u + t;
    int w0 = p[k], w1 = p[H + k], w2 = p[3 * H + k];
    int gw0 = 0, gw1 = 0;
#pragma unroll 1
    for (int s = 0; s < NS; s++) {
        int z = ((bv[s] * w0 + bv[NS + s] * w1 + 128) >> 8) + pv[2 * H + k];
        int h = max(z, 0);
        atomicAdd(&a[4 + t], (bv[2 * NS + s] * h + 128) >> 8);
        int d = (bv[2 * NS + s] * w2 * min(h, 1) + 128) >> 8;
        atomicAdd(&a[t], d);
        gw0 += (bv[s] * d + 128) >> 8;
        gw1 += (bv[NS + s] * d + 128) >> 8;
    }
    g[t] = gw0;
    g[4 + t] = gw1;
}

// Thread k (8 threads: two warps) owns hidden unit k and adds its term into e[s] with atomicAdd, for s < ns.
extern "C" __global__ void xor_forward(const int *p, int *b, int ns)
{
    int k = threadIdx.x;
    int w0 = p[k], w1 = p[H + k], bias = p[2 * H + k], w2 = p[3 * H + k];
#pragma unroll 1
    for (int s = 0; s < ns; s++) {
        int z = ((w0 * b[s] + w1 * b[S + s] + 128) >> 8) + bias;
        int h = max(z, 0);
        atomicAdd(&b[2 * S + s], (w2 * h + 128) >> 8);
    }
}

// Thread s (ns threads, one warp) owns sample s; it loops over the hidden units and adds its gradients into g with
// atomicAdd (the lanes add into the same words). relu'(z) is min(h, 1): h is an integer >= 0.
extern "C" __global__ void xor_backward(const int *p, const int *b, int *g)
{
    int s = threadIdx.x;
    int x0 = b[s], x1 = b[S + s], e = b[2 * S + s];
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

// Thread s adds its squared error to the loss word.
extern "C" __global__ void xor_loss(const int *b, int *loss)
{
    int e = b[2 * S + threadIdx.x];
    atomicAdd(loss, (int)(((unsigned)(e * e) + 256u) >> 9));
}

// Thread s adds 1 to *count when its sample is classified right.
extern "C" __global__ void xor_correct(const int *b, int *count)
{
    int e = b[2 * S + threadIdx.x];
    atomicAdd(count, (int)((e > -128) & (e <= 128)));
}

// Thread i updates p[i] -= rshift(g[i], 6): 32 threads for the whole model, 8 for a ZeRO shard (p, g offset).
extern "C" __global__ void xor_sgd(int *p, const int *g)
{
    int i = threadIdx.x;
    p[i] -= (g[i] + 32) >> 6;
}
