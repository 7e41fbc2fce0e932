#!/usr/bin/env bash
# Everything the course measures on a CUDA GPU, in one go:
#   paths      only the test that runs every path of the engine against the reference trainer, fallbacks made
#              errors (tests/engine/test_paths.py; part of tests): the short check before the sweeps;
#   tests      the GPU tests: the CUDA-graph step against the op-by-op step, an interrupt in the record, the
#              forward pass and the optimiser step of every GPU path resumed bit for bit, every path of the engine (tensor
#              formulas, fused softmax, prompt kernel, each with and without the CUDA graph) against the reference
#              trainer in strict mode (tests/engine/test_paths.py), the fused softmax kernel, the prompt
#              kernel (prompts drawn inside it, rng philox) against the reference stream and the tensor formulas,
#              bit-for-bit reproducibility and resumption, exact risks, samplers;
#   bench      the training benchmark (per-run loop against the batched core; 1 and 10 seeds at once, with torch's
#              generators and the fused softmax kernel, the tensor formulas, and the prompt kernel, in one process);
#   profile    where a step's time goes: its kernels, 10 seeds, both random streams (benchmarks/profile_step.py);
#   isotropic  the paper-scale isotropic sweep (Figures 2-4), SEEDS seeds;
#   kms        the paper-scale KMS sweep with the paper's sampler (Figures 6-8), SEEDS seeds;
#   published  the paper-scale KMS sweep with the published code's sampler (Figures 6-8), SEEDS seeds;
#   compare    the new figure files against the ones DEST had when the script started (benchmarks/compare_results.py);
# then, in the time left, the engine's other GPU tests (both random streams run there: auto is the counter-based one).
#   beyond     Chapter 6 (not in the default list): the covariate-law sweeps, uniform and Rademacher inputs,
#              softmax and linear attention and their infinite-prompt limits, SEEDS seeds, L up to 3000
#              (reproduce beyond; about a minute per law on one H100-class GPU), writing
#              beyond_uniform_PRESET.json and beyond_rademacher_PRESET.json.
#
#   bash benchmarks/gpu.sh [DEST]            (default DEST=results: where the chapters read)
#
# Settings (environment):
#   PARTS="tests bench profile isotropic kms published compare"  the parts to run, in this order (default: all)
#                       (add beyond for Chapter 6: PARTS=beyond bash benchmarks/gpu.sh)
#   SEEDS=10            seeds per sweep (327 first)      PRESET=paper   (smoke: a CPU check in a minute)
#   DEVICE=cuda         (cpu for the check)              PYTHON=python3
#   RNG=auto            the sweeps' random stream (reproduce --rng): auto is the counter-based stream drawn inside
#                       the prompt kernel on CUDA; where the prompt kernel's GPU tests fail, the script says so and
#                       the sweeps run with RNG=torch (torch's generators, the fused softmax kernel)
#   SWEEP_MINUTES=6     bounds each sweep's training; a stopped sweep resumes from its checkpoint in DEST
#   DEADLINE=S          the whole script should end within S seconds: tests, benchmark and profile stop early
#                       enough to leave RESERVE seconds (default 270) to the sweeps, and each sweep's training
#                       stops early enough to leave MARGIN seconds (default 60) for its final evaluation
#   COMMIT=<hash>       the commit recorded in the result files where DEST's tree is not a git checkout (the tree
#                       must then be that commit's: the files cannot check it, and say uncommitted_changes: null)
#   ALLOW_DIRTY=1       pass --allow-dirty to the sweeps (files written from a library with uncommitted changes,
#                       saying so); unset, a library with uncommitted changes writes nothing
#   OUT=...             when set (the device runner sets it), DEST's figure files, logs and final risks, with
#                       this script's whole log (gpu.log), are packed into $OUT/results.tar.gz after every part
#                       (a few hundred kB; the sweeps and checkpoints, tens of MB, stay in DEST, where a second
#                       call on the same machine resumes)
#
# CPU check of the whole script (a few minutes):
#   DEVICE=cpu PRESET=smoke SEEDS=3 bash benchmarks/gpu.sh /tmp/gpu-check
#
# Each part is bounded in time and the next one runs whatever happened before.
set -u -o pipefail
dest=${1:-results}
python=${PYTHON:-python3}
preset=${PRESET:-paper}
seeds=${SEEDS:-10}
device=${DEVICE:-cuda}
rng=${RNG:-auto}
minutes=${SWEEP_MINUTES:-6}
margin=${MARGIN:-60}
reserve=${RESERVE:-270}
parts=" ${PARTS:-tests bench profile isotropic kms published compare} "
dirty=(${ALLOW_DIRTY:+--allow-dirty})  # an array: no argument at all when not asked
start_all=$(date +%s)
deadline=$(( start_all + ${DEADLINE:-86400} ))
cd "$(dirname "$0")/.." || exit
mkdir -p "$dest"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
[ -n "${COMMIT:-}" ] && export SOFTMAX_AS_LINEAR_COMMIT=$COMMIT
exec > >(tee -a "$dest/gpu.log") 2>&1  # the whole log also goes into DEST (and so into the archive)

# the figure files DEST holds now: what the compare part reads the new ones against
before="$dest/before"
mkdir -p "$before"
cp "$dest"/fig*_"$preset"*.json "$before"/ 2>/dev/null || true

copy_out() {  # the figure files, logs and final risks of DEST packed into $OUT/results.tar.gz, when the runner
    # asks for them (few and small files come back); sweeps and checkpoints stay in DEST to resume from
    if [ -n "${OUT:-}" ]; then
        mkdir -p "$OUT"
        (cd "$dest" && tar czf "$OUT/results.tar.gz.part" --ignore-failed-read ./*.json ./*.log ./*_final.npz \
            2>/dev/null) && mv "$OUT/results.tar.gz.part" "$OUT/results.tar.gz"
    fi
}

budget() {  # budget CAP: seconds a part before the sweeps may take, CAP at most, leaving RESERVE to the sweeps
    local left=$(( deadline - $(date +%s) - reserve ))
    [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}

run_part() {  # run_part CAP LOG COMMAND...: the command, bounded by budget CAP, its output in DEST/LOG and here
    local cap log
    cap=$(budget "$1")
    log=$2
    shift 2
    if [ "$cap" -lt 20 ]; then
        echo "skipped: $cap s left before the sweeps' reserve"
        return 124
    fi
    timeout "$cap" "$@" 2>&1 | tee -a "$dest/$log" | grep -v -i "warn"
    return "${PIPESTATUS[0]}"
}

echo "== device"
if [ "$device" = cuda ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
$python -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')"
$python -c "import triton; print('triton', triton.__version__)" 2>/dev/null || echo "triton: not installed"
echo "preset $preset, $seeds seeds, device $device, rng $rng, parts:$parts"

if [[ $parts == *" tests "* ]]; then
    echo "== tests on the device"
    # The captured step first: without it the paper-scale sweeps would run op by op, far too slowly.
    # Then the kernels: where one fails, what comes after goes on without it.
    if [ "$device" = cuda ]; then
        if ! run_part 150 tests.log "$python" -m pytest -q -p no:cacheprovider tests/engine/test_train.py -k cuda_graph; then
            echo "the CUDA-graph step fails: stopping before the benchmark and the sweeps"
            copy_out
            exit 1
        fi
        # every path against the reference trainer, fallbacks made errors: its skips say which path cannot run here
        if ! run_part 240 tests.log "$python" -m pytest -q -p no:cacheprovider -rs tests/engine/test_paths.py; then
            echo "a path of the engine differs from the reference trainer or does not run (see tests.log)"
        fi
        # an interrupt in the record, the forward pass or the optimiser step of every GPU path resumes bit for bit
        if ! run_part 150 tests.log "$python" -m pytest -q -p no:cacheprovider -rs tests/engine/test_interrupts.py -k gpu; then
            echo "a GPU path does not resume exactly after an interrupt (see tests.log)"
        fi
        if ! run_part 150 tests.log "$python" -m pytest -q -p no:cacheprovider tests/engine/test_fused_softmax.py -k cuda; then
            echo "the fused softmax kernel fails: going on with the tensor formulas (SOFTMAX_AS_LINEAR_FUSED=0)"
            export SOFTMAX_AS_LINEAR_FUSED=0
        fi
        if ! run_part 240 tests.log "$python" -m pytest -q -p no:cacheprovider -x tests/engine/test_prompt_kernel.py -k cuda; then
            echo "the prompt kernel fails: the sweeps go on with torch's generators (RNG=torch, SOFTMAX_AS_LINEAR_PROMPT_KERNEL=0)"
            rng=torch
            export SOFTMAX_AS_LINEAR_PROMPT_KERNEL=0
        fi
    else
        run_part 600 tests.log "$python" -m pytest -q -p no:cacheprovider -rs tests/engine/test_paths.py \
            tests/engine/test_evaluation.py tests/engine/test_counter_stream.py
    fi
fi

if [[ $parts == *" paths "* && $parts != *" tests "* ]]; then
    echo "== every path of the engine against the reference trainer, fallbacks made errors"
    if ! run_part 150 tests.log "$python" -m pytest -q -p no:cacheprovider -rs tests/engine/test_paths.py; then
        echo "a path of the engine differs from the reference trainer or does not run (see tests.log)"
    fi
fi

if [[ $parts == *" bench "* ]]; then
    echo "== training benchmark"
    if [ "$device" = cuda ]; then
        run_part 200 bench_train.log "$python" benchmarks/bench_train.py --device cuda --steps 100 --seeds 1 10 --quick
    else  # a check that the script runs, not a measurement
        run_part 300 bench_train.log "$python" benchmarks/bench_train.py --device cpu --steps 2 --seeds 1 2 --quick
    fi
fi
if [[ $parts == *" profile "* ]]; then
    echo "== where a step's time goes"
    if [ "$device" = cuda ]; then
        rngs=(philox torch)
        [ "$rng" = torch ] && rngs=(torch)
        run_part 150 profile_step.log "$python" benchmarks/profile_step.py --seeds "$seeds" --covariance isotropic kms \
            --rng "${rngs[@]}" --steps 100 --top 12
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
    if awk "BEGIN { exit !($budget < 0.3) }"; then
        echo "== $name: skipped, $left s left before the deadline and its margin"
        return
    fi
    echo "== $preset sweep: $name ($*), sampler $sampler, $seeds seeds, rng $rng, at most $budget min of training"
    local start log
    start=$(date +%s)
    log="$dest/sweep_${name}_${preset}.log"
    timeout "$(awk "BEGIN { print int(60 * $budget + $margin + 60) }")" "$python" -m softmax_as_linear reproduce "$@" \
        --preset "$preset" --device "$device" --seeds "$seeds" --sampler "$sampler" --rng "$rng" --out "$dest" \
        --max-minutes "$budget" "${dirty[@]}" 2>&1 | tr '\r' '\n' > "$log"
    local code=$?
    grep "step/s" "$log" | tail -n 1
    grep -v "step/s" "$log" | grep -v "^\s*$" | tail -n 9
    echo "$name: exit code $code, wall time $(( $(date +%s) - start )) s" | tee -a "$log"
    copy_out
}

[[ $parts == *" isotropic "* ]] && sweep isotropic paper fig2 fig3 fig4
[[ $parts == *" kms "* ]] && sweep kms paper fig6 fig7 fig8
[[ $parts == *" published "* ]] && sweep kms_published published fig6 fig7 fig8
if [[ $parts == *" beyond "* && $(( deadline - $(date +%s) - margin )) -lt 30 ]]; then
    echo "== beyond: skipped, $(( deadline - $(date +%s) - margin )) s left before the deadline and its margin"
elif [[ $parts == *" beyond "* ]]; then  # Chapter 6: both laws in one call, bounded like a sweep
    left=$(( deadline - $(date +%s) - margin ))
    budget=$(awk "BEGIN { m = $left / 60; if (m > 2 * $minutes) m = 2 * $minutes; printf \"%.2f\", m }")
    echo "== $preset Chapter 6 sweeps (uniform, Rademacher), $seeds seeds, at most $budget min of training"
    start=$(date +%s)
    log="$dest/beyond_${preset}.log"
    timeout "$(awk "BEGIN { print int(60 * $budget + 2 * $margin + 60) }")" "$python" -m softmax_as_linear reproduce beyond \
        --preset "$preset" --device "$device" --seeds "$seeds" --out "$dest" --max-minutes "$budget" "${dirty[@]}" 2>&1 \
        | tr '\r' '\n' | grep -v "it/s\]$" > "$log"
    code=${PIPESTATUS[0]}
    tail -n 6 "$log"
    echo "beyond: exit code $code, wall time $(( $(date +%s) - start )) s" | tee -a "$log"
    copy_out
fi
if [[ $parts == *" compare "* ]]; then
    echo "== the new figure files against those DEST held before (seeds as independent replicates)"
    timeout 60 "$python" benchmarks/compare_results.py "$dest" "$before" --preset "$preset" 2>&1 | tee "$dest/compare.log"
fi
if [[ $parts == *" tests "* && $device == cuda ]]; then
    left=$(( deadline - $(date +%s) - 10 ))
    echo "== the other GPU tests of the engine, in the time left ($left s)"
    if [ "$left" -gt 30 ]; then
        timeout "$left" "$python" -m pytest -q -p no:cacheprovider tests/engine/test_train.py tests/engine/test_evaluation.py \
            -k "cuda and not cuda_graph" 2>&1 | tee -a "$dest/tests.log" | grep -v -i "warn" | tail -n 15
    fi
fi

echo "== all parts: $(( $(date +%s) - start_all )) s"
copy_out
exit 0
