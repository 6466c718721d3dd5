#!/usr/bin/env bash
# The GPU path checked at the benchmark's scale on one GPU in about 4 minutes (limits: 6), with nothing to
# download: random-init Qwen2.5-1.5B (full fine-tuning) and Qwen2.5-7B (LoRA r 64), the architectures of
# configs/models/, built in each phase's process (nothing saved or reloaded) and trained as
# configs/bench/alfworld_*.yaml say. Riskiest and most valuable first, each phase in its own process
# under its own time limit, each writing OUT/<phase>.json as it goes, so a phase that fails or runs out
# of time loses only itself:
#   env                    versions, the GPU, nvidia-smi, free disk
#   update_qwen2.5-1.5b    the sync check's floor; the PPO update at 16 tasks x 8 samples of 1,500 + 512
#                          tokens, cold and again warm (steady-state max_memory_allocated/reserved against
#                          the planner, tokens/s, MFU over every pass); the micro-batch gradient
#   rollout_qwen2.5-1.5b   128 prompts of 1,500 tokens, 128 forced new tokens, per KV cache (dynamic, static,
#                          static compiled): prefill s, ms a decode step, generated tok/s, against the
#                          step's memory-bandwidth floor
#   update_qwen2.5-7b      the same update, LoRA, cold only
#   tiny                   one cell of the embedded benchmark on the GPU, then the same cell on the CPU
# With vLLM installed (never on the machines this project is lent) `vllm bench throughput` and an
# iteration on vLLM rollouts follow for 1.5B. OUT/summary.md is made from whatever exists, and
# OUT/gpu_check.tar.gz holds every figure and log (no weights, no checkpoints).
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
# The tiny tokenizer and the tiny cells' model are built under OUT (removed before the archive).
export PTGPO_CACHE=${PTGPO_CACHE:-$out/cache}

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

archive() {  # the figures and logs, small enough to come back whole
  rm -rf "$out/cache" "$out"/tiny_*/runs
  (cd "$out" && tar -czf gpu_check.tar.gz --exclude=gpu_check.tar.gz --exclude=models ./*)
}

if [ "$dry_run" = 1 ]; then
  toy=(--device cpu --layers 1 --vocab 8192 --prompt-tokens 24)
  phase env 120 $python "${check[@]}" env "$out"
  phase update_qwen2.5-1.5b 300 $python "${check[@]}" update "$out" qwen2.5-1.5b "${toy[@]}" --samples 8 \
    --response-tokens 16
  phase rollout_qwen2.5-1.5b 200 $python "${check[@]}" rollout "$out" qwen2.5-1.5b "${toy[@]}" --rows 2 --new-tokens 4
  phase update_qwen2.5-7b 300 $python "${check[@]}" update "$out" qwen2.5-7b "${toy[@]}" --samples 8 \
    --response-tokens 16 --cold-only
  phase tiny 300 $python "${check[@]}" tiny "$out" --device cpu --iterations 1
  $python "${check[@]}" summary "$out"
  archive
  exit $((failed > 0))
fi

$python -c "import torch; assert torch.cuda.is_available()" || {
  echo "gpu_check needs a CUDA GPU (or --dry-run on a CPU)" >&2; exit 2; }
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
phase env 25 $python "${check[@]}" env "$out"
phase update_qwen2.5-1.5b 90 $python "${check[@]}" update "$out" qwen2.5-1.5b
phase rollout_qwen2.5-1.5b 75 $python "${check[@]}" rollout "$out" qwen2.5-1.5b
phase update_qwen2.5-7b 130 $python "${check[@]}" update "$out" qwen2.5-7b --cold-only
phase tiny 40 $python "${check[@]}" tiny "$out" --device cuda

if $python -c "import vllm" 2>/dev/null; then
  # vLLM's phases read a saved model: 1.5B's random weights, on a RAM disk when it has room.
  export GPU_CHECK_MODELS=${GPU_CHECK_MODELS:-$out/models}
  model=qwen2.5-1.5b
  read -r prompt_len output_len requests < <($python "${check[@]}" shapes "$out" "$model")
  phase "build_$model" 40 $python "${check[@]}" build "$out" "$model"
  path=$($python -c "import json,sys; print(json.load(open(sys.argv[1]))['path'])" "$out/build_$model.json") && {
    phase "vllm_bench_$model" 150 vllm bench throughput --model "$path" --tokenizer "$path" \
      --dataset-name random --random-input-len "$prompt_len" --random-output-len "$output_len" \
      --num-prompts "$requests" --dtype bfloat16 --gpu-memory-utilization 0.35 \
      --output-json "$out/vllm_bench_$model.json"
    phase "vllm_iteration_$model" 240 $python "${check[@]}" vllm_iteration "$out" "$model"
  }
  rm -rf "$GPU_CHECK_MODELS"
fi
$python "${check[@]}" summary "$out"
archive
exit $((failed > 0))
