#!/usr/bin/env bash
# The wheels that install this project on an air-gapped GPU node: the project's own wheel and every
# dependency the node lacks (not torch, transformers or peft: the node's own are used), for Python 3.12
# manylinux x86_64, at most 60 MiB. Options: scripts/wheelhouse.py --help.
#
#   bash scripts/make_wheelhouse.sh DIR [--python-version 3.12] [--have NODE_PIP_FREEZE]
#   # on the node: pip install --no-index --find-links DIR ptgpo
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
  echo "usage: bash scripts/make_wheelhouse.sh DIR [--python-version 3.12] [--have FILE] [--limit-mib 60]" >&2; exit 2
fi
exec "${PYTHON:-python3}" scripts/wheelhouse.py "$@"
