#!/usr/bin/env bash
# Build one venv per pinned verl release (CPU torch) and run the tests of our estimators, agent loops and
# the default-trainer route inside verl's own code, against each. The releases are the newest on the package
# index and the one before it; docs/integrations/verl.md lists them. verl pins transformers < 5.11, older
# than the main venv's, so it never goes into the project's main venv. The second venv reuses the first's
# downloads from pip's cache.
set -euo pipefail
cd "$(dirname "$0")/.."
versions=${VERL_VERSIONS:-"0.9.1 0.9.0"}
stage=${PTGPO_CI_STAGE:-all}  # install, test or all: CI installs while the main suite runs
export OMP_WAIT_POLICY=PASSIVE
for version in $versions; do
    venv=${VERL_VENV_PREFIX:-.venv-verl}-$version
    echo "== verl $version in $venv"
    python3 -m venv "$venv"
    if [ "$stage" != test ]; then
        # The CPU build of torch first: verl's requirements would otherwise pull a CUDA build.
        "$venv/bin/pip" install -q torch==2.13.0
        "$venv/bin/pip" install -q -e ".[verl]" "verl==$version" "pytest>=8"
    fi
    [ "$stage" = install ] && continue
    # Fail here, not as skipped tests, if verl or its default trainer does not import.
    "$venv/bin/python" -c "import verl, verl.trainer.ppo.ray_trainer; assert verl.__version__ == '$version', verl.__version__"
    "$venv/bin/python" -m pytest tests/test_verl_integration.py tests/test_verl_steps.py tests/test_verl_tree.py \
        tests/test_verl_default_trainer.py "$@"
done
