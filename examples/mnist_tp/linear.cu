// mnist_tp's row-parallel linear layer (Megatron's RowParallelLinear) in Q8 fixed point (1.0 = 256), int32 words.
// Rank r holds features x[8] (its 8 of the image's 32) and the weights that read them, W[8][10] row-major
// (W[f * 10 + c]); logits[10] is the word block the AllReduce sums.
// rshift(v, m) = (v + 2^(m-1)) >> m, arithmetic.
//
// tp_forward:   logits[c] += rshift(sum_f W[f][c] x[f], 8)   (rank 0's loader writes -t[c] first, the others 0, so
//               after the AllReduce logits[c] holds the error e[c] = z[c] - t[c])
// tp_update:    W[f][c] -= rshift(x[f] g[c], shift), g[c] = e[c]                      (least squares)
// tp_update_hinge: as tp_update with g[c] = min(e[c], 0) for c == label, max(e[c], 0) otherwise
//               (one-vs-rest squared hinge with targets +-1: the gradient is 2 g; the 2 is in the shift)
// The numpy replay is examples/mnist_tp/replay.py.

#define F 8     // features per rank
#define C 10    // classes

// Thread c (10 threads: three warps, the last with two lanes) computes class c's partial logit.
extern "C" __global__ void tp_forward(const int *W, const int *x, int *logits)
{
    int c = threadIdx.x;
    int acc = 0;
#pragma unroll 1
    for (int f = 0; f < F; f++)
        acc += W[f * C + c] * x[f];
    logits[c] += (acc + 128) >> 8;
}

// Thread c updates class c's 8 weights from the error e = logits.
extern "C" __global__ void tp_update(int *W, const int *x, const int *logits, int shift)
{
    int c = threadIdx.x;
    int g = logits[c];
    int half = 1 << (shift - 1);
#pragma unroll 1
    for (int f = 0; f < F; f++)
        W[f * C + c] -= (x[f] * g + half) >> shift;
}

extern "C" __global__ void tp_update_hinge(int *W, const int *x, const int *logits, int shift, int label)
{
    int c = threadIdx.x;
    int e = logits[c];
    int g = c == label ? min(e, 0) : max(e, 0);
    int half = 1 << (shift - 1);
#pragma unroll 1
    for (int f = 0; f < F; f++)
        W[f * C + c] -= (x[f] * g + half) >> shift;
}
