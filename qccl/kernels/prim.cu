// qccl's one primitive: a step of NCCL's Simple protocol on a channel, launched with a mode per step.
// One warp (4 threads) moves up to 4 words per launch; thread i owns word i of the chunk.
// rslot/sslot are the same FIFO slot address on every rank (a symmetric heap): loads read the local copy that the
// previous rank sent, stores to sslot cross QLink to the next rank.
//
// The driver binds the arguments as constants, so every mode test folds away and a launch runs only the blocks its
// mode needs. qccl launches a step as
//   data launch(es): threads = words of the chunk (<= 4 each; NOWAIT on the later ones), spost = rpost = 0: wait for
//       the chunk (RECV: tail) and for a free slot at the next rank (SEND: head), combine, store;
//   a POST launch, one thread: the next rank's tail (SEND: the chunk is there) and the previous rank's head (RECV: the
//       slot is free). Between the two, the host may copy a received chunk out of its slot.
// Launched with spost/rpost > 0 and without NOWAIT/POST, the kernel is the seed's: thread 0 posts at the end.
#define RECV  1     // the step receives: wait for the previous rank's chunk (*rtail >= rwait)
#define SEND  2     // the step sends: wait for a free slot (*rhead >= swait), store into the next rank's slot
#define LOCAL 4     // read the local input x
#define SPLIT 8     // do not combine: send x as is and store the received value into y (a pipelined send/recv)
#define COPY  16    // store the result into y
// Reduction op, in bits 5..7 of mode (NCCL's ncclRedOp_t order: sum, prod, max, min; avg is sum then DIV; then the
// bitwise ops the machine's ALU has and NCCL lacks).
#define OP_SHIFT 5
#define OP_SUM  0
#define OP_PROD 1
#define OP_MAX  2
#define OP_MIN  3
#define OP_BAND 4
#define OP_BOR  5
#define OP_BXOR 6
#define UNSIGNED 256   // max/min compare as uint32
#define DIV      512   // divide the value by `divisor` before it is stored (NCCL's avg post-op)
#define NOWAIT  1024   // a later data launch of the same step: its flags were already waited for
#define POST    2048   // flags only (launch one thread): *stail = spost (SEND), *shead = rpost (RECV)

extern "C" __global__ void prim(int mode, int n,
                                volatile int *rtail, int rwait, volatile int *rhead, int swait,
                                const int *rslot, const int *x, int *y, int *sslot,
                                volatile int *stail, int spost, volatile int *shead, int rpost, int divisor)
{
    int i = threadIdx.x;
    if (mode & POST) {
        if ((mode & SEND) && spost > 0) *stail = spost;     // -> next rank: the chunk is there
        if ((mode & RECV) && rpost > 0) *shead = rpost;     // -> previous rank: the slot is free
        return;
    }
    if (!(mode & NOWAIT)) {
        if (mode & RECV)
            while (*rtail < rwait) {}           // the chunk has arrived
        if ((mode & SEND) && swait > 0)
            while (*rhead < swait) {}           // a slot is free at the next rank
    }
    if ((mode & (SEND | COPY)) && i < n) {
        int r = 0, v = 0;
        if (mode & RECV) r = rslot[i];
        if (mode & LOCAL) v = x[i];
        if (!(mode & SPLIT) && (mode & RECV)) {
            int op = (mode >> OP_SHIFT) & 7;
            if (!(mode & LOCAL)) v = r;
            else if (op == OP_SUM) v = v + r;
            else if (op == OP_PROD) v = v * r;
            else if (op >= OP_BAND) v = op == OP_BAND ? (v & r) : op == OP_BOR ? (v | r) : (v ^ r);
            else if (mode & UNSIGNED) {
                unsigned a = (unsigned)v, b = (unsigned)r;
                v = (int)(op == OP_MAX ? (a > b ? a : b) : (a < b ? a : b));
            } else {
                v = op == OP_MAX ? (v > r ? v : r) : (v < r ? v : r);
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
    if ((mode & SEND) && spost > 0) *stail = spost;     // a flag is a count of chunks: 0 posts nothing
    if ((mode & RECV) && rpost > 0) *shead = rpost;
}
