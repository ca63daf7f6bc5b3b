// spin: wait until *flag >= k (a host write or a peer's store between records releases it), then thread i writes
// out[i] = v + i. The load of *flag is warp-uniform, so the wait is a real loop with a uniform trip count.
extern "C" __global__ void spin(volatile int *flag, int k, int *out, int v)
{
    while (*flag < k) {}
    int i = threadIdx.x;
    out[i] = v + i;
}
