// The split denoiser of the diffusion runs (points_ddpm: 3 -> 32 -> 2, latent_ddpm: 9 -> 16 -> 8), one rank's share,
// in Q8 fixed point (1.0 = 256) with round-to-nearest shifts: rshift(v, m) = (v + 2^(m-1)) >> m.
// The specification and its numpy replay are in split.py; the two must agree bit for bit.
//
// One rank holds Hr hidden units; n1 = D + 2 words per sample of input. Memory (fixed device word addresses):
//   w1[n1 * Hr]          w1[i * Hr + k]: input i -> hidden k; row D + 1 is the hidden bias
//   w2[(Hr + 1) * D]     w2[k * D + j]: hidden k -> output j; row Hr is this rank's output bias
//   u[ns * n1]           per sample: the D data numbers, the noise-level input F[t], the constant 256 (1.0)
//   out[ns * D]          the rank's partial output; after qccl's AllReduce, the sum over ranks
//   hbuf[Hr]             training: h, then the back-propagated error d, of each hidden unit
// Each bias is the row of an input that is always 1.0 (u's last word; a word holding 256 for w2's bias row):
// rshift(b 256 + s, 8) is b + rshift(s, 8) exactly, so loops over the rows handle weights and biases alike.
// Sizes, schedule constants and the learning-rate shift L are launch arguments: the driver binds them as
// immediates, so every loop below has the same trip count on every lane.

// Training, before the forward: x_t = rshift(A x0 + S eps, 8) in place of x0 (the loader wrote eps into out). The
// partial output starts at the bias row, minus eps on rank 0 (neg = 1), so the AllReduce yields the error.
// Thread i (launch D threads) owns data number i.
extern "C" __global__ void dn_noise(int *u, int *out, const int *bias, int a, int s, int neg)
{
    int i = threadIdx.x;
    int e = out[i];
    u[i] = (a * u[i] + s * e + 128) >> 8;
    out[i] = neg ? bias[i] - e : bias[i];
}

// Forward: thread k (launch Hr threads) owns hidden unit k; for each sample it adds rshift(w2[k][j] h, 8) into
// out[j] with atomicAdd (out holds the partial's start value: the bias row, see dn_noise and dn_ddim).
extern "C" __global__ void dn_forward(const int *w1, const int *w2, const int *u, int *out, int n1, int hr, int D,
                                      int ns)
{
    int k = threadIdx.x;
#pragma unroll 1
    for (int s = 0; s < ns; s++) {
        int z = 0;
#pragma unroll 1
        for (int i = 0; i < n1; i++)
            z += w1[i * hr + k] * u[s * n1 + i];
        int h = max((z + 128) >> 8, 0);
#pragma unroll 1
        for (int j = 0; j < D; j++)
            atomicAdd(&out[s * D + j], (w2[k * D + j] * h + 128) >> 8);
    }
}

// Backward, one sample, four launches and no communication (every rank holds the whole error e, out after the
// AllReduce, and its own hidden units):
//   1. dn_update(w2 + Hr * D, one, e, 1, D, L): the output bias row, w2[Hr][j] -= rshift(256 e_j, 8 + L)
//   2. dn_hidden: h of each hidden unit into hbuf (recomputed from w1 and u)
//   3. dn_backward: d of each hidden unit through the old w2, then w2's hidden rows; d replaces h in hbuf
//   4. dn_update(w1, u, hbuf, n1, Hr, L): w1[i][k] -= rshift(u_i d_k, 8 + L), the bias row's u being 256
// hbuf needs Hr words only from step 2 to step 4; latent_ddpm, whose 127 words are otherwise full, lends it the
// output bias row (the host copies the row out after step 1 and back after step 4: a copy, no arithmetic).

// Thread k (launch Hr threads): hbuf[k] = h = max(rshift(sum_i w1[i][k] u_i, 8), 0).
extern "C" __global__ void dn_hidden(const int *w1, const int *u, int *hbuf, int n1, int hr)
{
    int k = threadIdx.x;
    int z = 0;
#pragma unroll 1
    for (int i = 0; i < n1; i++)
        z += w1[i * hr + k] * u[i];
    hbuf[k] = max((z + 128) >> 8, 0);
}

// Thread k (launch Hr threads) back-propagates through its row of the old w2, d = rshift(sum_j e_j w2[k][j], 8)
// where z > 0, and updates the row in the same loop: w2[k][j] -= rshift(e_j h, 8 + L). relu'(z) is min(h, 1): h is
// an integer >= 0, so it is 1 exactly when z > 0 (no divergent branch). Each lane reads and writes only hbuf[k].
extern "C" __global__ void dn_backward(int *w2, const int *e, int *hbuf, int hr, int D, int L)
{
    int k = threadIdx.x;
    int h = hbuf[k];
    int g = 0;
#pragma unroll 1
    for (int j = 0; j < D; j++) {
        int ej = e[j], w = w2[k * D + j];       // g reads the old weight, then the update replaces it
        g += ej * w;
        w2[k * D + j] = w - ((ej * h + (1 << (7 + L))) >> (8 + L));
    }
    hbuf[k] = ((g + 128) >> 8) * min(h, 1);
}

// An outer-product update, w[a][b] -= rshift(p[a] q[b], 8 + L) for a < rows, b < cols: thread b (launch cols
// threads) owns column b.
extern "C" __global__ void dn_update(int *w, const int *p, const int *q, int rows, int cols, int L)
{
    int b = threadIdx.x;
    int qb = q[b];
#pragma unroll 1
    for (int a = 0; a < rows; a++)
        w[a * cols + b] -= (p[a] * qb + (1 << (7 + L))) >> (8 + L);
}

// DDIM (eta = 0) from t to t - 1: x = rshift(C1 x + C2 e, 8), e the AllReduce's result (the predicted noise); then
// out is reset to the bias row, the next forward's start value. Thread i (launch D threads) owns data number i of
// every sample. With C1 = 256, C2 = 0 it leaves x as it is and only starts out (before the first step).
extern "C" __global__ void dn_ddim(int *u, int *out, const int *bias, int n1, int D, int ns, int c1, int c2)
{
    int i = threadIdx.x;
    int b = bias[i];
#pragma unroll 1
    for (int s = 0; s < ns; s++) {
        u[s * n1 + i] = (c1 * u[s * n1 + i] + c2 * out[s * D + i] + 128) >> 8;
        out[s * D + i] = b;
    }
}
