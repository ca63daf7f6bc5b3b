#!/usr/bin/env bash
# The GPU checks, one prepared script for a lent machine (an H200 with CUDA, PyTorch and CuPy, no network):
#   bash bench/gpu_check.sh [OUT]        (OUT defaults to $OUT, else ./gpu_figures)
# Wheels the machine lacks travel in .whl/ (nccl4py 0.6, cuda-core 1.x, cuda-pathfinder, transformers 5.23: see
# README "GPU figures"); they are installed into /tmp/site, qccl itself with pip -e (no dependencies fetched).
# NCCL: `python -m qccl_bench.nccl_wheel nvidia_nccl_cu13-*.whl --sm 90 -o .whl` writes its wheel with only the H200's
# code (252 MB -> 37 MB), so it travels in .whl with the rest, in one call.
# Any other wheel larger than one call may carry (64 MiB) travels in parts, one call each:
#   bash bench/gpu_check.sh --split WHEEL    writes .whl-parts/NAME.part-00.. (60 MiB each) and NAME.sha256
# Ignored files stay on a warm machine between calls, so carry one part per call (STEPS=none runs nothing), then
# the last with .whl; a wheel whose parts are all there (its sha256 agrees) is joined and installed with the rest.
# Then: the CuPy transport's tests, the NCCL comparison (2 ranks on one GPU), nccl-tests-style CuPy figures, the
# bf16 model's exactness and speed (bench/model_gpu.py), and the merged model: a random base at Qwen3.5-2B's full
# config merged and its kernel suite verified (merge), then its decode figures and the seed's table (merged_table,
# reusing the merge a warm machine still holds in $MERGED). Every step has a time limit; its output lands in OUT.
# STEPS (default "tests float_sums double_library nccl_compare perf_cupy model_gpu model_fla merge merged_table") picks steps
# (none: only the installs); one call may run 600 s, so a lease runs them in groups (README, "On a GPU");
# MODEL_GPU_ARGS adds arguments to the model_gpu and model_fla steps (e.g. --compile), MERGED_ARGS to merged_table's
# (e.g. --compile --no-table). model_fla needs flash-linear-attention's wheels in .whl/fla/ (below).
# Exit status: the first failing step's.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--split" ]; then
    whl=${2:?usage: bash bench/gpu_check.sh --split WHEEL}
    name=$(basename "$whl")
    mkdir -p .whl-parts
    split -b 60M -d "$whl" ".whl-parts/$name.part-" || exit 3
    (cd "$(dirname "$whl")" && sha256sum "$name") > ".whl-parts/$name.sha256" || exit 3
    ls -l .whl-parts
    exit 0
fi
OUT="${1:-${OUT:-gpu_figures}}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
join_parts() {      # each wheel of .whl-parts whose parts are all here -> /tmp/wheels/NAME (checked by its sha256)
    local sum name
    for sum in .whl-parts/*.sha256; do
        [ -e "$sum" ] || continue
        name=$(basename "$sum" .sha256)
        mkdir -p /tmp/wheels
        cat ".whl-parts/$name.part-"* > "/tmp/wheels/$name"
        if (cd /tmp/wheels && sha256sum --quiet -c "$OLDPWD/$sum" > /dev/null 2>&1); then
            echo "$name: joined from $(ls ".whl-parts/$name.part-"* | wc -l) parts"
        else
            echo "$name: parts incomplete ($(ls ".whl-parts/$name.part-"* | wc -l) here), not installed"
            rm -f "/tmp/wheels/$name"
        fi
    done
}
join_parts
: > "$OUT/install.txt"
# NCCL's wheel joins the user-site ones below (cuda.pathfinder's search); the others go to /tmp/site
for whl in .whl/nvidia_nccl_*.whl; do [ -e "$whl" ] && mkdir -p /tmp/wheels && cp "$whl" /tmp/wheels/; done
others=$(ls .whl/*.whl 2> /dev/null | grep -v '/nvidia_nccl_')
if [ -n "$others" ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $others \
        >> "$OUT/install.txt" 2>&1 || { echo "wheels failed: see $OUT/install.txt"; exit 3; }
    export PYTHONPATH=/tmp/site
fi
if ls /tmp/wheels/*.whl > /dev/null 2>&1; then
    # the user's site-packages, not /tmp/site: cuda.pathfinder (how nccl4py finds libnccl) searches site-packages
    # directories, the user's before the system's, and never PYTHONPATH
    $PY -m pip install -q --user --no-index --no-deps --no-compile --no-cache-dir --upgrade /tmp/wheels/*.whl \
        >> "$OUT/install.txt" 2>&1 || { echo "joined wheels failed: see $OUT/install.txt"; exit 3; }
fi
# flash-linear-attention (`pip download --no-deps -d .whl/fla fla-core==0.6.0 flash-linear-attention==0.6.0 einops`;
# Triton comes with the machine's torch) goes to a directory of its own: transformers takes its kernels whenever
# they import, so only the model_fla step sees it and every other step measures transformers' torch path
if ls .whl/fla/*.whl > /dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-fla \
        .whl/fla/*.whl >> "$OUT/install.txt" 2>&1 || { echo "fla wheels failed: see $OUT/install.txt"; exit 3; }
fi
$PY -m pip install -q --no-deps --no-build-isolation --no-index -e . >> "$OUT/install.txt" 2>&1 ||
    { cat "$OUT/install.txt"; exit 3; }
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi: none"
    $PY - <<'PYEOF'
import importlib.metadata as md
for d in ("torch", "transformers", "cupy-cuda13x", "cupy-cuda12x", "nccl4py", "nvidia-nccl-cu13", "nvidia-nccl-cu12",
          "cuda-core", "numpy"):
    try:
        print(d, md.version(d))
    except md.PackageNotFoundError:
        pass
PYEOF
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
status=0
STEPS="${STEPS:-tests float_sums double_library nccl_compare perf_cupy model_gpu model_fla merge merged_table}"
MERGED="${MERGED:-/tmp/qccl-merged}"
step() {        # step NAME SECONDS COMMAND...: run with a deadline, output to OUT/NAME.txt, remember a failure
    local name=$1 limit=$2; shift 2
    case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
    local t0=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
    local rc=$?
    echo "$name: exit $rc in $((SECONDS - t0)) s"
    tail -4 "$OUT/$name.txt"
    [ "$status" -eq 0 ] && [ "$rc" -ne 0 ] && status=$rc
    return 0
}
# the float sums held against the QwenGPUs bit for bit are a step of their own: the 2026-12-04 run lost its last six
# to one shared time limit
step tests 360 $PY -m pytest -q -p no:cacheprovider tests/test_cupy_transport.py tests/test_halves.py tests/test_paths.py tests/test_math_library.py tests/test_doubles.py -rs -k "not float_sums and not branching and (cupy or on_a_gpu)"
step float_sums 240 $PY -m pytest -q -p no:cacheprovider tests/test_cupy_transport.py -rs -k "on_a_gpu_float_sums"
# double sin and expm1 bit for bit: each lowers in about 25 s on 2 cores, a step of its own to spare the tests' limit
step double_library 180 $PY -m pytest -q -p no:cacheprovider tests/test_math_library.py -rs -k "on_a_gpu_a_branching"
export NCCL_MULTI_RANK_GPU_ENABLE=1          # 2 ranks on one H200 (NCCL 2.30+, experimental, no NVLS)
# every NCCL dtype and op; 1,024 elements: the CuPy transport took 70 s for 54 rows of 4,096 on 2026-12-04
step nccl_compare 150 $PY -m qccl_bench.nccl_compare --ranks 2 --count 1024 --backends nccl,cupy \
    --dtypes int32,uint32,int8,uint8,int64,uint64,float16,float32,float64,bfloat16 --ops sum,prod,max,min \
    --json "$OUT/nccl_compare.json"
step perf_cupy 40 $PY -m qccl_bench.perf all_reduce all_gather -b 4 -e 256 -g 2 --transport cupy -d int32
step model_gpu 240 $PY -m qccl_bench.model_gpu --steps 200 --ranks 1,4,8 ${MODEL_GPU_ARGS:-}
# the same with flash-linear-attention's Triton kernels: its per-layer report says whether they are exact on a GPU
# (on the CPU, qccl_bench.fla_check runs fla's fused recurrent kernel in Triton's interpreter; a GPU's approximate
# square roots and divisions, and fla's chunked kernel, are what only this step checks)
step model_fla 240 env PYTHONPATH="/tmp/site-fla${PYTHONPATH:+:$PYTHONPATH}" $PY -m qccl_bench.model_gpu --fla \
    --steps 200 --ranks 1,4,8 --no-table ${MODEL_GPU_ARGS:-}
# the seed's model: the compiled layers in front of a 24-layer base (no real Qwen3.5-2B can reach the offline machine)
step merge 300 $PY -m qccl_bench.merge_full "$MERGED" --device cuda --no-text
step merged_table 540 $PY -m qccl_bench.model_gpu --checkpoint "$MERGED/merged" --no-report --steps 200 \
    --ranks 1,4,8 ${MERGED_ARGS:-}
echo "gpu_check: exit $status; figures in $OUT"
exit "$status"
