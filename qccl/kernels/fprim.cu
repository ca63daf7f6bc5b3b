// qccl's floating-point reduce step: software IEEE arithmetic (integer operations only) on the QwenGPU, which has no
// floating point. It is the combine of prim.cu's recvReduce* steps for float32, bfloat16 and float16; every other
// part of a step (flag posts, copies) is prim's. One warp: thread i owns word i of the chunk (n <= 4 words).
//
// A float add does not fit the machine's 32-block ROM, so a step is several launches ("phases"), each a short
// straight-line program; the state between phases is one word per lane in the scratch words t (local memory the
// host never reads or writes while a step runs), and later phases load the inputs again (loads are cheap: a load
// rides on the block that uses it). The mode is bound as a constant, so each launch holds only its phase's blocks.
//
//   sum:     ALIGN    a = x[i], b = rslot[i] -> t[i] = m, the aligned signed sum of the significands (6 guard bits)
//            ROUND    m -> t[i] = the rounded magnitude (normalised by a binary-search clz, subnormals kept)
//            SIGN     t[i], a, b -> t[i] = the magnitude with overflow to infinity, x + (-x) = +0, and the sign
//            FINAL    t[i], a, b -> infinities and NaN -> the result
//   max/min: MINMAX   a, b -> the result
// bfloat16 and float16 words hold two elements (element 2j in the low half, 2j+1 in the high half, as in memory):
// the phases run on the low halves, then on the high halves; the last compute phase of a half leaves its 16-bit
// result in t[i] and MERGE puts it into its word: after the low halves x[i] = (high half of a | result_lo), so the
// high-half phases still read a's high half, and the high MERGE stores (result_hi << 16 | result_lo). A half element
// is placed in the top 16 bits of a word, so bfloat16 is float32's layout with 16 fewer significand bits, and float16
// the same algorithm with a 5-bit exponent.
//
// Semantics (the GPU's non-FTZ float unit; NCCL's sum is a + b in ring order, its bf16 / f16 sum rounds once per add):
//   round to nearest even; subnormals in and out; overflow to infinity; x + (-x) = +0, (-0) + (-0) = -0;
//   any NaN result is the canonical NaN (0x7fffffff, bf16 / f16 0x7fff), as NVIDIA GPUs produce;
//   max / min as CUDA's fmaxf / fminf: a NaN operand is ignored (both NaN: the canonical NaN); -0 < +0.
#define RECV  1
#define SEND  2
#define LOCAL 4
#define COPY  16
#define OP_SHIFT 5          // NCCL's op numbers, as prim.cu: 0 sum, 2 max, 3 min
#define OP_MAX 2
#define NOWAIT 1024         // a later launch of the same step: its flags were already waited for
#define FMT_SHIFT 12        // 0 float32, 1 bfloat16, 2 float16
#define PHASE_SHIFT 14      // 0 ALIGN, 1 ROUND, 2 SIGN, 3 FINAL, 4 MINMAX
#define HI 131072           // the high halves of a bfloat16 / float16 word (else the low halves)
#define ALIGN 0
#define ROUND 1
#define SIGN 2
#define FINAL 3
#define MINMAX 4
#define MERGE 5             // bfloat16 / float16: put the half's result into its word
#define DOWN(v) (fmt == 0 ? (v) : (v) >> 16)     // placed -> stored bits

// The operand of lane i as a 32-bit pattern: float32 as is, a half element in the top 16 bits (low bits zero).
#define ELEM(w) (fmt == 0 ? (unsigned)(w) : hi ? ((unsigned)(w) & 0xffff0000u) : ((unsigned)(w) << 16))

extern "C" __global__ void fprim(int mode, int n,
                                 volatile int *rtail, int rwait, volatile int *rhead, int swait,
                                 const int *rslot, int *x, int *y, int *sslot,
                                 volatile int *stail, int spost, volatile int *shead, int rpost, int *t)
{
    int i = threadIdx.x;
    if (!(mode & NOWAIT)) {
        if (mode & RECV)
            while (*rtail < rwait) {}           // the chunk has arrived
        if ((mode & SEND) && swait > 0)
            while (*rhead < swait) {}           // a slot is free at the next rank
    }
    if (i >= n) return;
    const int fmt = (mode >> FMT_SHIFT) & 3;
    const int phase = (mode >> PHASE_SHIFT) & 7;
    const int hi = (mode & HI) != 0;
    const int op = (mode >> OP_SHIFT) & 7;
    // the format, with its element in the top bits of a word
    const int mb = fmt == 0 ? 23 : fmt == 1 ? 7 : 10;           // significand bits (without the implicit one)
    const int mpos = fmt == 2 ? 26 : 23;                         // where the exponent field starts in the word
    const unsigned inf = fmt == 2 ? 0x7c000000u : 0x7f800000u;  // +infinity, placed
    const int down = fmt == 0 ? 0 : 16;                          // placed -> stored bits
    const unsigned nan = fmt == 0 ? 0x7fffffffu : 0x7fffu;       // the canonical NaN, stored bits
    const unsigned sbit = fmt == 0 ? 0x80000000u : 0x8000u;      // the sign, stored bits
    if (phase == MERGE) {           // t[i] holds this half's result (16 bits)
        unsigned w = (unsigned)x[i], h = (unsigned)t[i] & 0xffffu;
        if (!hi) {                  // keep it beside a's high half for the HI phases
            x[i] = (int)((w & 0xffff0000u) + h);
            return;
        }
        unsigned r = (h << 16) + (w & 0xffffu);
        if (mode & COPY) y[i] = (int)r;
        if (mode & SEND) sslot[i] = (int)r;
        return;
    }
    unsigned a = ELEM(x[i]), b = ELEM(rslot[i]);
    unsigned ma = a & 0x7fffffffu, mb2 = b & 0x7fffffffu;
    unsigned X = ma > mb2 ? ma : mb2;                            // the larger magnitude
    int ex1m = (int)(X >> mpos) - 1;                             // its exponent - 1, at least 0 (subnormals: 1 - 1)
    ex1m = ex1m > 0 ? ex1m : 0;
    unsigned r;

    if (phase == ALIGN) {
        unsigned Y = ma > mb2 ? mb2 : ma;
        int ey1m = (int)(Y >> mpos) - 1;
        ey1m = ey1m > 0 ? ey1m : 0;
        // significands with the implicit one (none for a subnormal), the leading bit at 29
        unsigned mx = (X - ((unsigned)ex1m << mpos)) << (29 - mpos);
        unsigned my = (Y - ((unsigned)ey1m << mpos)) << (29 - mpos);
        unsigned d = (unsigned)(ex1m - ey1m);
        d = d < 31u ? d : 31u;
        unsigned sh = my >> d;
        sh |= (my - (sh << d) + 0x7fffffffu) >> 31;              // sticky: a bit was shifted out (both < 2^30)
        int neg = (int)(a ^ b) >> 31;                            // -1: the signs differ, subtract
        t[i] = (int)(mx + (sh ^ (unsigned)neg) - (unsigned)neg);
        return;
    }
    if (phase == ROUND) {
        // s = clz(m) - 1 (m < 2^31, the leading bit goes to 30), at most the exponent - 1 (a result below the
        // normal range stays subnormal): a floor bit at 30 - (exponent - 1) stops the search there. A binary search;
        // (v - T) >> 31 is v < T for v, T < 2^31, as arithmetic (a select costs the machine two blocks).
        unsigned m = (unsigned)t[i];
        // the larger exponent from the words: the element's magnitude shifted to the top (its sign dropped)
        unsigned ea = (unsigned)x[i] << (fmt != 0 && !hi ? 17 : 1), eb = (unsigned)rslot[i] << (fmt != 0 && !hi ? 17 : 1);
        int e1m = (int)((ea > eb ? ea : eb) >> (mpos + 1)) - 1;
        e1m = e1m > 0 ? e1m : 0;
        unsigned v = m | (0x40000000u >> (unsigned)(e1m + 1));
        unsigned k = ((v - 0x00008000u) >> 31) << 4;
        unsigned s = k; v <<= k;
        k = ((v - 0x00800000u) >> 31) << 3; s += k; v <<= k;
        k = ((v - 0x08000000u) >> 31) << 2; s += k; v <<= k;
        k = ((v - 0x20000000u) >> 31) << 1; s += k; v <<= k;
        s += (v - 0x40000000u) >> 31;
        unsigned mn = (unsigned)((volatile int *)t)[i] << s;    // m again (a load rides on its op)
        unsigned keep = 30 - mb;                                 // bits below the result's last significand bit
        unsigned mr = (mn + ((1u << (keep - 1)) - 1u) + ((mn >> keep) & 1u)) >> keep;   // round to nearest even
        t[i] = (int)((((unsigned)e1m + 1u - s) << mb) + mr);    // exponent - 1 plus significand: a carry rounds up
        return;
    }
    if (phase == SIGN) {
        unsigned ab = a ^ b;
        unsigned sign = (a >> 31) ^ ((ab >> 31) & (ma < mb2));  // the sign of the larger magnitude
        unsigned keepm = (ab == 0x80000000u) - 1u;               // all ones unless x + (-x) (then +0)
        unsigned infs = inf >> down;
        unsigned mag = (unsigned)t[i];
        mag = mag < infs ? mag : infs;                           // overflow to infinity
        t[i] = (int)((mag | (sign << (fmt == 0 ? 31 : 15))) & keepm);
        return;
    }
    if (phase == FINAL) {
        unsigned opp = (a ^ b) == 0x80000000u;                   // inf - inf: NaN
        unsigned special = ((X - inf) >> 31) - 1u;               // all ones: an operand is an infinity or a NaN
        unsigned Xs = DOWN((X | (fmt == 0 ? opp : opp << 16)) & special);   // inf - inf becomes a NaN pattern
        unsigned v = (unsigned)t[i];
        unsigned infs = inf >> down;
        unsigned mag = v & (fmt == 0 ? 0x7fffffffu : 0x7fffu);
        mag = mag > Xs ? mag : Xs;                               // an infinity or a NaN operand
        r = mag > infs ? nan : (mag | (v & sbit));               // any NaN is the canonical one
    } else {                                                     // MINMAX
        // order-preserving keys (-0 < +0), a NaN operand loses
        int ka = (int)(a ^ ((unsigned)((int)a >> 31) & 0x7fffffffu));
        int kb = (int)(b ^ ((unsigned)((int)b >> 31) & 0x7fffffffu));
        int nankey = op == OP_MAX ? (int)0x80000000 : 0x7fffffff;
        if (ma > inf) ka = nankey;
        if (mb2 > inf) kb = nankey;
        int takeb = op == OP_MAX ? kb > ka : kb < ka;
        unsigned w = takeb ? b : a;
        r = (w & 0x7fffffffu) > inf ? nan : w >> down;
    }
    if (fmt != 0) {                 // MERGE puts it into its word
        t[i] = (int)r;
        return;
    }
    if (mode & COPY) y[i] = (int)r;
    if (mode & SEND) sslot[i] = (int)r;      // these stores cross QLink
}
