#!/usr/bin/env bash
# Everything the course measures on a CUDA GPU, in one go (a few minutes on one H100):
#   1. the training tests on the GPU (CUDA-graph step against the op-by-op step, resumption, presets);
#   2. the training benchmark (per-run loop against the batched core, op by op and as a CUDA graph);
#   3. both paper-scale sweeps, Figures 2-4 (isotropic) and 6-8 (KMS), with their wall times.
#
#   bash benchmarks/gpu.sh [OUT_DIR]        (default results/gpu; artifacts land there)
#   SWEEP_MINUTES=3 bounds each sweep (default 3; a stopped sweep resumes from its checkpoint)
#
# Each part is bounded in time and the next one runs whatever happened before.
set -u -o pipefail
out=${1:-results/gpu}
python=${PYTHON:-python3}
minutes=${SWEEP_MINUTES:-3}
cd "$(dirname "$0")/.."
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"

echo "== device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$python -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"

echo "== training tests on the GPU"
# The captured step first: without it the paper-scale sweeps would run op by op, far too slowly.
if ! timeout 150 $python -m pytest -q -p no:cacheprovider tests/test_train.py -k cuda_graph 2>&1 | tail -n 15; then
    echo "the CUDA-graph step fails: stopping before the benchmark and the sweeps"
    exit 1
fi
timeout 150 $python -m pytest -q -p no:cacheprovider tests/test_train.py -k "cuda and not cuda_graph" 2>&1 | tail -n 15

echo "== training benchmark"
timeout 150 $python benchmarks/bench_train.py --device cuda --steps 200

for figures in "fig2 fig3 fig4" "fig6 fig7 fig8"; do
    echo "== paper-scale sweep: $figures"
    start=$(date +%s)
    log="$out/sweep_${figures%% *}.log"
    timeout "$(awk "BEGIN { print int(60 * $minutes + 60) }")" $python -m softmax_as_linear reproduce $figures --preset paper --device cuda \
        --out "$out" --max-minutes "$minutes" 2>&1 | tr '\r' '\n' > "$log"
    grep "step/s" "$log" | tail -n 1
    grep -v "step/s" "$log" | grep -v "^\s*$" | tail -n 8
    echo "wall time: $(( $(date +%s) - start )) s"
done
