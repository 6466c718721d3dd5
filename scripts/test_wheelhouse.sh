#!/usr/bin/env bash
# CI: the air-gapped install of a GPU node, rehearsed on this machine. A fresh venv holding only torch
# (the CPU build), transformers and peft gets a wheelhouse made by scripts/make_wheelhouse.sh for its
# Python and its packages, installs the project from it with --no-index, and runs the GPU check's dry
# run on that install. Then the GPU nodes' own wheelhouse (Python 3.12, scripts/gpu_node_packages.txt)
# is made and must stay within its 60 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${WHEELHOUSE_VENV:-.venv-wheelhouse}
case "$venv" in /*) ;; *) venv="$PWD/$venv" ;; esac  # the install check below runs from another folder
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q torch==2.13.0 transformers peft
"$venv/bin/pip" freeze > "$work/have.txt"
version=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
bash scripts/make_wheelhouse.sh "$work/wheels" --python-version "$version" --have "$work/have.txt" --limit-mib 200
"$venv/bin/pip" install -q --no-index --find-links "$work/wheels" ptgpo
(cd "$work" && "$venv/bin/python" -c "import ptgpo_algos as p; assert 'site-packages' in p.__file__, p.__file__")
PYTHON="$venv/bin/python" bash scripts/gpu_check.sh --dry-run "$work/dry-run"
bash scripts/make_wheelhouse.sh "$work/node"
echo "wheelhouse: the project installed from its wheelhouse with --no-index and ran the dry run; the nodes' wheelhouse fits"
