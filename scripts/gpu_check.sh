#!/usr/bin/env bash
# GPU check at the benchmark's scale on one GPU, with nothing to download: random-init Qwen2.5-1.5B and
# Qwen2.5-7B (the architectures of configs/models/), trained as configs/bench/alfworld_*.yaml says. For
# each model: one PPO update of 16 tasks x 8 samples at ALFWorld-length prompts (1,500 tokens) and
# 512-token responses (the planner's prediction next to torch.cuda.max_memory_allocated), `vllm bench
# throughput` on the same shapes, and one full iteration of the recipe with vLLM rollouts forced to
# 512 tokens (rollout tokens/s, weight sync time and check, memory with vLLM's share). One summary
# table at the end (OUT/summary.md). The phase limits add up to 8 minutes on one H200.
#
#   pip install torch -e ".[vllm]"           # on the GPU machine (CUDA torch, vLLM >= 0.16)
#   bash scripts/gpu_check.sh [OUT_DIR]
#   bash scripts/gpu_check.sh --dry-run OUT  # on a CPU: build 1-layer models, update them, print the table
set -uo pipefail
cd "$(dirname "$0")/.."
dry_run=0
if [ "${1:-}" = "--dry-run" ]; then dry_run=1; shift; fi
out=${1:-${OUT:-gpu_check_out}}
mkdir -p "$out"
export OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1 VLLM_ALLOW_INSECURE_SERIALIZATION=1
python=${PYTHON:-python3}

phase() {  # name, time limit (s), command...
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s)"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1 || echo "   $name failed or timed out: see $out/$name.log"
}

if [ "$dry_run" = 1 ]; then
  for model in qwen2.5-1.5b qwen2.5-7b; do
    phase "build_$model" 600 $python scripts/gpu_check.py build "$out" "$model" --layers 1 --vocab 8192 --device cpu
    phase "update_$model" 600 $python scripts/gpu_check.py update "$out" "$model" --device cpu \
      --samples 2 --prompt-tokens 24
  done
  $python scripts/gpu_check.py summary "$out"
  exit 0
fi

$python -c "import vllm, torch; assert torch.cuda.is_available()" || {
  echo "gpu_check needs a CUDA GPU and vLLM: pip install -e '.[vllm]' (or --dry-run on a CPU)" >&2; exit 2; }
read -r prompt_len output_len requests < <($python scripts/gpu_check.py shapes "$out" qwen2.5-1.5b)

check_model() {  # model, limits: build, update, bench, iteration
  local model=$1 path
  phase "build_$model" "$2" $python scripts/gpu_check.py build "$out" "$model"
  path=$($python -c "import json,sys; print(json.load(open(sys.argv[1]))['path'])" "$out/build_$model.json") || return
  phase "update_$model" "$3" $python scripts/gpu_check.py update "$out" "$model"
  phase "vllm_bench_$model" "$4" vllm bench throughput --model "$path" --tokenizer "$path" \
    --dataset-name random --random-input-len "$prompt_len" --random-output-len "$output_len" \
    --num-prompts "$requests" --dtype bfloat16 --gpu-memory-utilization 0.35 \
    --output-json "$out/vllm_bench_$model.json"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 > "$out/gpu_memory_$model.csv" &
  local smi=$!
  phase "iteration_$model" "$5" $python scripts/gpu_check.py iteration "$out" "$model"
  kill "$smi" 2>/dev/null
}

check_model qwen2.5-1.5b 30 50 60 80    # 220 s
check_model qwen2.5-7b 40 70 60 90      # 260 s
rm -rf "$out/models"                    # 18 GB of random weights
$python scripts/gpu_check.py summary "$out"
