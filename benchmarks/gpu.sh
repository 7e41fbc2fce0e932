#!/usr/bin/env bash
# Everything the course measures on a CUDA GPU, in one go:
#   tests      the GPU tests (CUDA-graph step against the op-by-op step, fused softmax kernel against the
#              tensor formulas, resumption, exact risks, sampler);
#   bench      the training benchmark (per-run loop against the batched core; 1 and 10 seeds at once);
#   profile    where a step's time goes: its kernels by region, 10 seeds (benchmarks/profile_step.py);
#   isotropic  the paper-scale isotropic sweep (Figures 2-4), SEEDS seeds;
#   kms        the paper-scale KMS sweep with the paper's sampler (Figures 6-8), SEEDS seeds;
#   published  the paper-scale KMS sweep with the published code's sampler (Figures 6-8), SEEDS seeds.
#   beyond     Chapter 6 (not in the default list): the covariate-law sweeps, uniform and Rademacher inputs,
#              softmax and linear attention and their infinite-prompt limits, SEEDS seeds, L up to 3000
#              (benchmarks/beyond_gaussian.py; about a minute per law on one H100-class GPU), writing
#              beyond_uniform_PRESET.json and beyond_rademacher_PRESET.json.
#
#   bash benchmarks/gpu.sh [DEST]            (default DEST=results: where the chapters read)
#
# Settings (environment):
#   PARTS="tests bench profile isotropic kms published"  the parts to run, in this order (default: these;
#                       add beyond for Chapter 6: PARTS=beyond bash benchmarks/gpu.sh)
#   SEEDS=10            seeds per sweep (327 first)      PRESET=paper   (smoke: a CPU check in a minute)
#   DEVICE=cuda         (cpu for the check)              PYTHON=python3
#   SWEEP_MINUTES=6     bounds each sweep's training; a stopped sweep resumes from its checkpoint in DEST
#   DEADLINE=S          the whole script should end within S seconds: each sweep's training stops early
#                       enough to leave MARGIN seconds (default 120) for its final evaluation
#   COMMIT=<hash>       the commit recorded in the result files where DEST's tree is not a git checkout
#   OUT=...             when set (the device runner sets it), DEST's figure files, logs and final risks are
#                       packed into $OUT/results.tar.gz after every part (a few hundred kB; the sweeps and
#                       checkpoints, tens of MB, stay in DEST, where a second call on the same machine resumes)
#
# CPU check of the whole script (about a minute):
#   DEVICE=cpu PRESET=smoke SEEDS=3 bash benchmarks/gpu.sh /tmp/gpu-check
#
# Each part is bounded in time and the next one runs whatever happened before.
set -u -o pipefail
dest=${1:-results}
python=${PYTHON:-python3}
preset=${PRESET:-paper}
seeds=${SEEDS:-10}
device=${DEVICE:-cuda}
minutes=${SWEEP_MINUTES:-6}
margin=${MARGIN:-120}
parts=" ${PARTS:-tests bench profile isotropic kms published} "
start_all=$(date +%s)
deadline=$(( start_all + ${DEADLINE:-86400} ))
cd "$(dirname "$0")/.."
mkdir -p "$dest"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
[ -n "${COMMIT:-}" ] && export SOFTMAX_AS_LINEAR_COMMIT=$COMMIT

copy_out() {  # the figure files, logs and final risks of DEST packed into $OUT/results.tar.gz, when the runner
    # asks for them (few and small files come back); sweeps and checkpoints stay in DEST to resume from
    if [ -n "${OUT:-}" ]; then
        mkdir -p "$OUT"
        (cd "$dest" && tar czf "$OUT/results.tar.gz.part" --ignore-failed-read ./*.json ./*.log ./*_final.npz 2>/dev/null) \
            && mv "$OUT/results.tar.gz.part" "$OUT/results.tar.gz"
    fi
}

echo "== device"
if [ "$device" = cuda ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
$python -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')"
echo "preset $preset, $seeds seeds, device $device, parts:$parts"

if [[ $parts == *" tests "* ]]; then
    echo "== tests on the device"
    # The captured step first: without it the paper-scale sweeps would run op by op, far too slowly.
    # Then the fused softmax kernel: where it fails, everything after runs on the tensor formulas.
    if [ "$device" = cuda ]; then
        if ! timeout 150 $python -m pytest -q -p no:cacheprovider tests/engine/test_train.py -k cuda_graph 2>&1 \
                | tee "$dest/tests.log" | tail -n 15; then
            echo "the CUDA-graph step fails: stopping before the benchmark and the sweeps"
            copy_out
            exit 1
        fi
        if ! timeout 150 $python -m pytest -q -p no:cacheprovider tests/engine/test_fused_softmax.py -k cuda 2>&1 \
                | tee -a "$dest/tests.log" | tail -n 15; then
            echo "the fused softmax kernel fails: going on with the tensor formulas (SOFTMAX_AS_LINEAR_FUSED=0)"
            export SOFTMAX_AS_LINEAR_FUSED=0
        fi
        timeout 150 $python -m pytest -q -p no:cacheprovider tests/engine/test_train.py tests/engine/test_evaluation.py \
            -k "cuda and not cuda_graph" 2>&1 | tee -a "$dest/tests.log" | tail -n 15
    else
        timeout 300 $python -m pytest -q -p no:cacheprovider tests/engine/test_evaluation.py 2>&1 | tee "$dest/tests.log" | tail -n 5
    fi
fi

if [[ $parts == *" bench "* ]]; then
    echo "== training benchmark"
    if [ "$device" = cuda ]; then
        timeout 240 $python benchmarks/bench_train.py --device cuda --steps 100 --seeds 1 10 2>&1 | tee "$dest/bench_train.log"
    else  # a check that the script runs, not a measurement
        timeout 300 $python benchmarks/bench_train.py --device cpu --steps 2 --seeds 1 2 --quick 2>&1 | tee "$dest/bench_train.log"
    fi
fi
if [[ $parts == *" profile "* ]]; then
    echo "== where a step's time goes"
    if [ "$device" = cuda ]; then
        timeout 180 $python benchmarks/profile_step.py --seeds "$seeds" --covariance isotropic kms 2>&1 \
            | grep -v -i "warn" | tee "$dest/profile_step.log"
    else
        echo "skipped: needs CUDA"
    fi
fi
copy_out  # the tests', the benchmark's and the profile's logs

sweep() {  # sweep NAME SAMPLER FIGURES...
    local name=$1 sampler=$2
    shift 2
    local left=$(( deadline - $(date +%s) - margin ))
    local budget
    budget=$(awk "BEGIN { m = $left / 60; if (m > $minutes) m = $minutes; printf \"%.2f\", m }")
    if awk "BEGIN { exit !($budget < 0.5) }"; then
        echo "== $name: skipped, $left s left before the deadline and its margin"
        return
    fi
    echo "== $preset sweep: $name ($*), sampler $sampler, $seeds seeds, at most $budget min of training"
    local start log
    start=$(date +%s)
    log="$dest/sweep_${name}_${preset}.log"
    timeout "$(awk "BEGIN { print int(60 * $budget + $margin + 60) }")" $python -m softmax_as_linear reproduce "$@" \
        --preset "$preset" --device "$device" --seeds "$seeds" --sampler "$sampler" --out "$dest" \
        --max-minutes "$budget" 2>&1 | tr '\r' '\n' > "$log"
    local code=$?
    grep "step/s" "$log" | tail -n 1
    grep -v "step/s" "$log" | grep -v "^\s*$" | tail -n 9
    echo "$name: exit code $code, wall time $(( $(date +%s) - start )) s" | tee -a "$log"
    copy_out
}

[[ $parts == *" isotropic "* ]] && sweep isotropic paper fig2 fig3 fig4
[[ $parts == *" kms "* ]] && sweep kms paper fig6 fig7 fig8
[[ $parts == *" published "* ]] && sweep kms_published published fig6 fig7 fig8

if [[ $parts == *" beyond "* ]]; then  # Chapter 6: both laws in one call, bounded like a sweep
    left=$(( deadline - $(date +%s) - margin ))
    budget=$(awk "BEGIN { m = $left / 60; if (m > 2 * $minutes) m = 2 * $minutes; printf \"%.2f\", m }")
    echo "== $preset Chapter 6 sweeps (uniform, Rademacher), $seeds seeds, at most $budget min of training"
    start=$(date +%s)
    log="$dest/beyond_${preset}.log"
    timeout "$(awk "BEGIN { print int(60 * $budget + 2 * $margin + 60) }")" $python benchmarks/beyond_gaussian.py \
        --preset "$preset" --device "$device" --seeds "$seeds" --out "$dest" --max-minutes "$budget" 2>&1 \
        | tr '\r' '\n' | grep -v "it/s\]$" > "$log"
    code=${PIPESTATUS[0]}
    tail -n 6 "$log"
    echo "beyond: exit code $code, wall time $(( $(date +%s) - start )) s" | tee -a "$log"
    copy_out
fi
echo "== all parts: $(( $(date +%s) - start_all )) s"
exit 0
