#!/usr/bin/env bash
# The GPU check, one prepared script for a lent machine (an H200): installs CuPy, nccl4py and the NCCL wheel into the
# project venv, runs the CuPy transport's tests and the NCCL comparison, and writes the figures under OUT.
#   bash bench/gpu_check.sh [OUT]        (OUT defaults to $OUT, else ./gpu_figures)
# Exit status: that of the tests, or of the comparison when the tests pass. Every step has a time limit.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-${OUT:-gpu_figures}}"
mkdir -p "$OUT"
PY=.venv/bin/python
if [ ! -x "$PY" ]; then
    python3 -m venv .venv && timeout 900 .venv/bin/pip install -q -e '.[test]' || exit 2
fi
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi: none"
} > "$OUT/machine.txt" 2>&1
# CuPy for CUDA 12, nccl4py (import nccl.core) and NCCL 2.30+ (several ranks on one GPU needs 2.30)
timeout 900 .venv/bin/pip install -q "cupy-cuda12x>=13" "nccl4py==0.6.*" "nvidia-nccl-cu12>=2.30" \
    > "$OUT/install.txt" 2>&1 || { echo "install failed: see $OUT/install.txt"; exit 3; }
$PY - >> "$OUT/machine.txt" 2>&1 <<'PYEOF'
import cupy, importlib.metadata as md
print("cupy", cupy.__version__, "devices", cupy.cuda.runtime.getDeviceCount())
for d in ("nccl4py", "nvidia-nccl-cu12"):
    try:
        print(d, md.version(d))
    except md.PackageNotFoundError:
        print(d, "absent")
PYEOF
timeout 900 $PY -m pytest -q -p no:cacheprovider tests/test_cupy_transport.py -rs > "$OUT/tests.txt" 2>&1
tests=$?
export NCCL_MULTI_RANK_GPU_ENABLE=1          # 2 ranks on one H200 (NCCL 2.30, experimental, no NVLS)
timeout 900 $PY -m qccl_bench.nccl_compare --ranks 2 --count 4096 --dtypes int32,uint32,int8,int64,float16,float32,float64 \
    --json "$OUT/nccl_compare.json" > "$OUT/nccl_compare.txt" 2>&1
compare=$?
timeout 600 $PY -m qccl_bench.perf all_reduce all_gather -b 4 -e 256 -g 2 --transport cupy \
    -d all -J "$OUT/perf_cupy.json" > "$OUT/perf_cupy.txt" 2>&1
echo "tests exit $tests, comparison exit $compare; figures in $OUT"
[ "$tests" -ne 0 ] && exit "$tests"
exit "$compare"
