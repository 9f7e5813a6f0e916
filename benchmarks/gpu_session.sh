#!/usr/bin/env bash
# The GPU measurements of docs/benchmarks.md in prepared runs, for a machine with a CUDA GPU and many cores whose
# python3 has torch. From the repository root, in order of what the GPU work is judged by:
#
#   bash benchmarks/gpu_session.sh learner [OUT_DIR]    # about 4 minutes: the learner alone (MLP, IMPALA CNN,
#                                                       # Nature CNN; 1-64 rollouts), the compiled update against
#                                                       # the eager one on CUDA, two CUDA learners on one GPU
#   bash benchmarks/gpu_session.sh pong [OUT_DIR]       # about 4 minutes: Pong with 14 actors acting on the CPU
#                                                       # and on the GPU, beside the raw env's ceiling
#   bash benchmarks/gpu_session.sh compiled [OUT_DIR]   # about 4 minutes: compiled (CUDA graphs) and bf16 updates
#
# OUT_DIR (default $OUT, else gpu_session/) receives a log per step and summary.txt. The packages such a machine
# lacks travel as wheels in .whl/ (the `.whl` folder is git-ignored), fetched beforehand on a machine with an
# index, e.g. for Python 3.12:
#
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
#       gymnasium==1.4.0 farama-notifications==0.0.6 hydra-core==1.3.8 omegaconf==2.3.1 pettingzoo==1.27.0 ale-py==0.12.1
#   pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3
#
# Each step has its own time limit and writes its own log and table, so a step that fails or runs out of time
# leaves the others' results. Without a GPU, `--device cpu` versions of the same scripts run in the tests
# (tests/test_benchmarks.py).
set -uo pipefail
part="${1:-}"
if [ "$part" != learner ] && [ "$part" != pong ] && [ "$part" != compiled ]; then
    echo "usage: bash benchmarks/gpu_session.sh learner|pong|compiled [OUT_DIR]" >&2
    exit 2
fi
out="${2:-${OUT:-gpu_session}}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site2 . || exit 1
export PYTHONPATH=/tmp/site2${PYTHONPATH:+:$PYTHONPATH}

step() {  # step NAME SECONDS COMMAND...: the command's output in NAME.log, its exit code in summary.txt
    local name=$1 limit=$2
    shift 2
    local started=$SECONDS
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    local code=$?
    echo "$name: exit $code after $((SECONDS - started)) s: $*" | tee -a "$out/summary.txt"
    tail -n 30 "$out/$name.log"
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; python3 -c "import torch; print(torch.__version__)"; } \
    >"$out/machine.txt" 2>&1
case "$part" in
learner)
    for model in mlp impala nature; do  # a model at a time: each prints its table when it ends
        step "learner_$model" 100 python3 benchmarks/gpu.py --device cuda --models "$model" --rollouts 1 4 16 64 \
            --seconds 2 --json "$out/learner_$model.json"
    done
    step exact 120 python3 -m pytest -q -p no:cacheprovider --rootdir . -c pyproject.toml \
        tests/test_update_modes.py -k "compiled and cuda"
    step two_learners 60 python3 benchmarks/learners.py --device cuda --learners 2 --seconds 2 --rounds 1
    ;;
pong)
    step pong_cpu_actors 170 python3 benchmarks/throughput.py --env env=atari --device cuda --num-actors 14 \
        --actors-batch-size 4 --learner-batches 4 16 --seconds 10 --repeats 1 --epochs 2 --runners local \
        --json "$out/pong_cpu_actors.json"
    step pong_gpu_actors 170 python3 benchmarks/throughput.py --env env=atari --device cuda --actor-device cuda \
        --num-actors 14 --actors-batch-size 4 --learner-batches 4 --seconds 10 --repeats 1 --epochs 2 --runners local \
        --json "$out/pong_gpu_actors.json"
    ;;
compiled)
    for model in mlp impala; do
        step "compiled_$model" 150 python3 benchmarks/gpu.py --device cuda --models "$model" --rollouts 1 \
            --compile off reduce-overhead --precision float32 bf16 --seconds 2 --json "$out/compiled_$model.json"
    done
    ;;
esac
