#!/usr/bin/env bash
# Build a venv with OpenEnv and GEM (CPU torch) and run the tests of our environments inside them: served
# by `ptgpo serve` to OpenEnv's client on localhost, and made by gem.make. Their dependencies (gradio,
# fastmcp, reasoning-gym...) stay out of the project's main venv; the main suite skips these tests.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${ENV_INTEGRATIONS_VENV:-.venv-env-integrations}
stage=${PTGPO_CI_STAGE:-all}  # install, test or all: CI installs while the main suite runs
python3 -m venv "$venv"
. "$venv/bin/activate"
if [ "$stage" != test ]; then
    # The CPU build of torch first: the project's requirements would otherwise pull a CUDA build.
    pip install torch==2.13.0
    # The versions the tests were written against; both packages are young and change their APIs.
    pip install -e ".[openenv,gem]" "openenv-core==0.3.0" "gem-llm==0.1.0" "pytest>=8"
fi
[ "$stage" = install ] && exit 0
export OMP_WAIT_POLICY=PASSIVE
# Fail here, not as skipped tests, if either does not import (OpenEnv's validator CLI included: the tests run
# `python -m openenv.cli validate` on our servers and written packages, offline).
python -c "import openenv.core.env_server, openenv.cli.commands.validate, gem"
python -m pytest tests/test_openenv_integration.py tests/test_gem_integration.py "$@"
