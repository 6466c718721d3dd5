#!/usr/bin/env bash
# Build a venv with verl (CPU torch) and run the tests of our estimators inside verl's own code.
# verl pins transformers < 5.11, older than the main venv's, so it never goes into the project's main venv.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${VERL_VENV:-.venv-verl}
python3 -m venv "$venv"
. "$venv/bin/activate"
# The CPU build of torch first: verl's requirements would otherwise pull a CUDA build.
pip install torch==2.13.0
pip install -e ".[verl]" "pytest>=8"
export OMP_WAIT_POLICY=PASSIVE
# Fail here, not as skipped tests, if verl does not import.
python -c "import verl.trainer.ppo.ray_trainer, verl.trainer.ppo.v1.agent_loop_tq"
python -m pytest tests/test_verl_integration.py tests/test_verl_steps.py tests/test_verl_tree.py "$@"
