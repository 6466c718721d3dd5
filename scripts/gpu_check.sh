#!/usr/bin/env bash
# The GPU path checked at the benchmark's scale on one GPU, with nothing to download: random-init
# Qwen2.5-1.5B (full fine-tuning) and Qwen2.5-7B (LoRA r 64), the architectures of configs/models/,
# trained as configs/bench/alfworld_*.yaml say. Per model: the sync check's noise floor, one PPO update
# at 16 tasks x 8 samples of 1,500 + 512 tokens (planner against torch.cuda.max_memory_allocated, the
# micro-batch gradient against one pass), one training iteration with transformers rollouts
# (decisions/s, tokens/s, checkpoint size and time); with vLLM installed also `vllm bench throughput`
# and an iteration on vLLM rollouts (the weight sync). Phases run riskiest first, each in its own
# process under its own time limit, each writes OUT/<phase>_<model>.json as it goes, and
# OUT/summary.md is made from whatever exists. Without vLLM the check takes about 8 minutes on one H200
# (docs/results/gpu-check/ holds a run).
#
#   bash scripts/make_wheelhouse.sh .whl                     # where pip works: the dependencies the node lacks
#   bash scripts/gpu_check.sh --wheelhouse .whl [OUT]        # on an air-gapped node with torch and transformers
#   bash scripts/gpu_check.sh [OUT]                          # where the project is installed
#   bash scripts/gpu_check.sh --dry-run OUT                  # on a CPU: every phase at toy sizes, the table
set -uo pipefail
cd "$(dirname "$0")/.."
dry_run=0 wheelhouse=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1; shift ;;
    --wheelhouse) wheelhouse=${2:?--wheelhouse needs a folder made by scripts/make_wheelhouse.sh}; shift 2 ;;
    -*) echo "usage: bash scripts/gpu_check.sh [--dry-run] [--wheelhouse DIR] [OUT]" >&2; exit 2 ;;
    *) break ;;
  esac
done
out=${1:-${OUT:-gpu_check_out}}
mkdir -p "$out" || exit 2
export OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1 VLLM_ALLOW_INSECURE_SERIALIZATION=1
# Nothing is downloaded: a lookup that would try fails at once instead of waiting on a network.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python=${PYTHON:-python3}

if [ -n "$wheelhouse" ]; then
  # The dependencies beside the node's own packages, the project from this checkout: nothing is fetched.
  site=${TMPDIR:-/tmp}/ptgpo-gpu-check-site
  wheels=$(ls "$wheelhouse"/*.whl 2>/dev/null | grep -v '/ptgpo-[0-9]') || true
  if [ -n "$wheels" ]; then
    # shellcheck disable=SC2086
    $python -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" $wheels || {
      echo "gpu_check: installing the wheels of $wheelhouse failed (see above)" >&2; exit 2; }
  fi
  export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}"
fi
$python -c "import ptgpo_algos, ptgpo_envs" || {
  echo "gpu_check: the project does not import: pip install -e . (or --wheelhouse DIR on an air-gapped node)" >&2; exit 2; }

# Random weights go to a RAM disk when it has room for both models (writing 7B's 15 GB to disk is slow).
if [ -z "${GPU_CHECK_MODELS:-}" ] && [ "$dry_run" = 0 ] && [ -d /dev/shm ] \
   && [ "$(df -Pk /dev/shm | awk 'NR==2 {print $4}')" -gt $((24 * 1024 * 1024)) ]; then
  export GPU_CHECK_MODELS=/dev/shm/ptgpo-gpu-check-models
  trap 'rm -rf /dev/shm/ptgpo-gpu-check-models' EXIT
fi

phase() {  # name, time limit (s), command...
  local name=$1 limit=$2 start=$SECONDS; shift 2
  echo "== $name (limit ${limit}s)"
  timeout -k 5 "$limit" "$@" > "$out/$name.log" 2>&1
  local code=$?
  [ $code = 0 ] || { failed=$((failed + 1)); echo "   $name: exit $code$([ $code = 124 ] && echo ', out of time'); see $out/$name.log"; }
  echo "$name $code $((SECONDS - start))" >> "$out/phases.txt"
}
rm -f "$out/phases.txt"
failed=0
check=(scripts/gpu_check.py)

if [ "$dry_run" = 1 ]; then
  phase env 120 $python "${check[@]}" env "$out"
  for model in qwen2.5-1.5b qwen2.5-7b; do
    phase "build_$model" 600 $python "${check[@]}" build "$out" "$model" --layers 1 --vocab 8192 --device cpu
    phase "update_$model" 600 $python "${check[@]}" update "$out" "$model" --device cpu --samples 8 \
      --prompt-tokens 24 --response-tokens 16
    phase "iteration_$model" 900 $python "${check[@]}" iteration "$out" "$model" --device cpu --tasks 1 \
      --response-tokens 8
  done
  $python "${check[@]}" summary "$out"
  exit $((failed > 0))
fi

$python -c "import torch; assert torch.cuda.is_available()" || {
  echo "gpu_check needs a CUDA GPU (or --dry-run on a CPU)" >&2; exit 2; }
phase env 25 $python "${check[@]}" env "$out"
# Memory first (the update at full shapes, 7B's the tightest), then the iterations, then vLLM's phases.
phase build_qwen2.5-1.5b 40 $python "${check[@]}" build "$out" qwen2.5-1.5b
phase update_qwen2.5-1.5b 70 $python "${check[@]}" update "$out" qwen2.5-1.5b
phase build_qwen2.5-7b 50 $python "${check[@]}" build "$out" qwen2.5-7b
phase update_qwen2.5-7b 100 $python "${check[@]}" update "$out" qwen2.5-7b
phase iteration_qwen2.5-1.5b 95 $python "${check[@]}" iteration "$out" qwen2.5-1.5b
phase iteration_qwen2.5-7b 100 $python "${check[@]}" iteration "$out" qwen2.5-7b

if $python -c "import vllm" 2>/dev/null; then
  read -r prompt_len output_len requests < <($python "${check[@]}" shapes "$out" qwen2.5-1.5b)
  for model in qwen2.5-1.5b qwen2.5-7b; do
    path=$($python -c "import json,sys; print(json.load(open(sys.argv[1]))['path'])" "$out/build_$model.json") || continue
    phase "vllm_bench_$model" 150 vllm bench throughput --model "$path" --tokenizer "$path" \
      --dataset-name random --random-input-len "$prompt_len" --random-output-len "$output_len" \
      --num-prompts "$requests" --dtype bfloat16 --gpu-memory-utilization 0.35 \
      --output-json "$out/vllm_bench_$model.json"
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 > "$out/gpu_memory_$model.csv" &
    smi=$!
    phase "vllm_iteration_$model" 240 $python "${check[@]}" vllm_iteration "$out" "$model"
    kill "$smi" 2>/dev/null
  done
fi
rm -rf "$out/models"
$python "${check[@]}" summary "$out"
exit $((failed > 0))
