#!/usr/bin/env bash
# GPU check on one GPU with nothing to download: builds a ~100M-parameter model locally, then measures
# vLLM generation throughput (against `vllm bench throughput`, vLLM's own offline benchmark, on the same
# model and shapes), runs one full PTGPO iteration (tree rollout on vLLM, advantages, update, verified
# weight sync) and records the GPU memory high-water mark. Prints one summary table; < 8 minutes.
#
#   pip install torch -e ".[vllm]"      # on the GPU machine (CUDA torch, vLLM)
#   bash scripts/gpu_check.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu_check_out}}
mkdir -p "$out"
export OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1 VLLM_ALLOW_INSECURE_SERIALIZATION=1
python3 -c "import vllm, torch; assert torch.cuda.is_available()" || {
  echo "gpu_check needs a CUDA GPU and vLLM: pip install -e '.[vllm]'" >&2; exit 2; }

nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 > "$out/gpu_memory.csv" &
smi=$!
trap 'kill $smi 2>/dev/null' EXIT

phase() {  # name, time limit (s), command...
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s)"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1 || echo "   $name failed or timed out: see $out/$name.log"
}
phase build 60 python3 scripts/gpu_check.py build "$out"
model=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['path'])" "$out/build.json")
phase vllm_bench 110 vllm bench throughput --model "$model" --tokenizer "$model" --dataset-name random \
  --random-input-len 256 --random-output-len 128 --num-prompts 512 --dtype bfloat16 \
  --gpu-memory-utilization 0.3 --output-json "$out/vllm_bench.json"
phase throughput 100 python3 scripts/gpu_check.py throughput "$out"
phase iteration 150 python3 scripts/gpu_check.py iteration "$out"
python3 scripts/gpu_check.py summary "$out" | tee "$out/summary.md"
