// qccl's multicast primitive: stores into a multicast window land in local memory and at every peer (QLink's
// multicast aperture, NVLink SHARP's multimem.st), so each word is written once. Flags are one word per rank in the
// same multicast region: rank r posts flags[r] = seq, the others wait for it.
// As for prim, the arguments are constants for the driver: only the blocks of the launch's mode remain.
#define PRE_WAIT 1      // wait for flags[b] >= wait for every b in mask, before storing
#define STORE    2      // win[i] = x[i]   (threads = words, <= 4)
#define POST     4      // *flag = seq     (one thread)
#define WAIT     8      // wait for flags[b] >= wait for every b in mask, at the end

__device__ __forceinline__ void wait_flags(volatile int *flags, int mask, int wait)
{
    if (mask & 1)   while (flags[0] < wait) {}
    if (mask & 2)   while (flags[1] < wait) {}
    if (mask & 4)   while (flags[2] < wait) {}
    if (mask & 8)   while (flags[3] < wait) {}
    if (mask & 16)  while (flags[4] < wait) {}
    if (mask & 32)  while (flags[5] < wait) {}
    if (mask & 64)  while (flags[6] < wait) {}
    if (mask & 128) while (flags[7] < wait) {}
}

extern "C" __global__ void mcast(int mode, const int *x, int *win, volatile int *flag, int seq,
                                 volatile int *flags, int mask, int wait)
{
    int i = threadIdx.x;
    if (mode & PRE_WAIT) wait_flags(flags, mask, wait);
    if (mode & STORE) win[i] = x[i];
    if (mode & POST) *flag = seq;
    if (mode & WAIT) wait_flags(flags, mask, wait);
}
