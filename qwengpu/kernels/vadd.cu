// vadd: c[i] = a[i] + b[i] (int32, wrap-around) for every global thread index i < n.
// Pointers are device word addresses; launch with any number of threads (warps of 4 run one after another).
extern "C" __global__ void vadd(const int *a, const int *b, int *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}
