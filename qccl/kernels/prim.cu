// qccl's one primitive: a step of NCCL's Simple protocol on a ring channel, launched with a mode per step.
// One warp (4 threads) moves up to 4 words per launch; thread i owns word i of the chunk.
// rslot/sslot are the same FIFO slot address on every rank (a symmetric heap): loads read the local copy that the
// previous rank sent, stores to sslot cross QLink to the next rank.
#define RECV  1
#define SEND  2
#define LOCAL 4
#define SPLIT 8
#define COPY  16
// Reduction op, in bits 5..7 of mode (NCCL's ncclRedOp_t order: sum, prod, max, min; avg is sum then DIV).
#define OP_SHIFT 5
#define OP_SUM  0
#define OP_PROD 1
#define OP_MAX  2
#define OP_MIN  3
#define UNSIGNED 256   // max/min compare as uint32
#define DIV      512   // divide the value by `divisor` before it is stored (NCCL's avg post-op)

extern "C" __global__ void prim(int mode, int n,
                                volatile int *rtail, int rwait, volatile int *rhead, int swait,
                                const int *rslot, const int *x, int *y, int *sslot,
                                volatile int *stail, int spost, volatile int *shead, int rpost, int divisor)
{
    int i = threadIdx.x;
    if (mode & RECV)
        while (*rtail < rwait) {}           // the chunk has arrived
    if ((mode & SEND) && swait > 0)
        while (*rhead < swait) {}           // a slot is free at the next rank
    if (i < n) {
        int r = 0, v = 0;
        if (mode & RECV) r = rslot[i];
        if (mode & LOCAL) v = x[i];
        if (!(mode & SPLIT)) {
            if (!(mode & RECV)) v = v;
            else if (!(mode & LOCAL)) v = r;
            else {
                int op = (mode >> OP_SHIFT) & 7;
                if (op == OP_SUM) v = v + r;
                else if (op == OP_PROD) v = v * r;
                else if (mode & UNSIGNED) {
                    unsigned a = (unsigned)v, b = (unsigned)r;
                    v = (int)(op == OP_MAX ? (a > b ? a : b) : (a < b ? a : b));
                } else {
                    v = op == OP_MAX ? (v > r ? v : r) : (v < r ? v : r);
                }
            }
        }
        if (mode & DIV) {
            if (mode & UNSIGNED) v = (int)((unsigned)v / (unsigned)divisor);
            else v = v / divisor;
        }
        if (mode & COPY) y[i] = (mode & SPLIT) ? r : v;
        if (mode & SEND) sslot[i] = v;      // these stores cross QLink
    }
    __threadfence_system();
    __syncthreads();
    if (i != 0) return;
    if (mode & SEND) *stail = spost;        // -> next rank: data is there
    if (mode & RECV) *shead = rpost;        // -> previous rank: slot is free
}
