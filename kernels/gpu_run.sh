#!/bin/sh
# kernels/gpu_run.sh: the one device call for the Kimi K3 decode layer:
# build with the machine's own nvcc, check every kernel and both whole
# layers against the C references, then benchmark at tp 8 and tp 16.
# Everything lands in $OUT (default /tmp/k3out): gpu.txt, build.txt,
# check.txt, check16.txt, results-tpT.md, h200-tpT.json (the calibration
# files).
# Run from the repository root; about 3-5 minutes on one H200.
OUT=${OUT:-/tmp/k3out}
mkdir -p "$OUT"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv \
    >"$OUT/gpu.txt" 2>&1
# NCCL from the toolkit, else the nvidia-nccl Python wheel if present.
NCCLW=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null \
        || python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
EXTRA=""
if [ ! -f "$(dirname "$NVCC")/../include/nccl.h" ] && [ -n "$NCCLW" ] && [ -d "$NCCLW/lib" ]; then
    EXTRA="NCCL_LIB=$NCCLW/lib NCCL_INC=$NCCLW/include"
fi
rm -rf build/kernels/cuda build/kernels/agentreplay-kernels
# shellcheck disable=SC2086
make -f kernels/cuda.mk NVCC="$NVCC" $EXTRA >"$OUT/build.txt" 2>&1 || { tail -20 "$OUT/build.txt"; exit 1; }
B=build/kernels/agentreplay-kernels
$B check --tp 8 --batches 1,8 >"$OUT/check.txt" 2>&1
echo "check tp 8 exit $?"; grep -E "FAIL|^ok|comparison" "$OUT/check.txt" | tail -8
$B check --tp 16 --batches 64 >"$OUT/check16.txt" 2>&1
echo "check tp 16 exit $?"; grep -E "FAIL|^ok|comparison" "$OUT/check16.txt" | tail -8
for tp in 8 16; do
    $B bench --tp "$tp" -o "$OUT/h200-tp$tp.json" --results "$OUT/results-tp$tp.md" 2>>"$OUT/bench.txt"
    echo "bench tp $tp exit $?"
done
grep -A10 "Per-layer" "$OUT/results-tp16.md"
