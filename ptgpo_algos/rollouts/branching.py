"""Where a prefix tree's new leaf branches from (``rollouts.branch``): the choices, apart from the
collection that branches (:mod:`ptgpo_algos.rollouts.collection`), so that checking a config imports none
of it."""

from __future__ import annotations

__all__ = ["BRANCH_STRATEGIES"]

#: ``uniform`` over the group's distinct decision points, ``entropy``: the highest policy entropy among
#: points not yet branched from, ``novel``: uniform over points whose state the group first saw there.
BRANCH_STRATEGIES = ("uniform", "entropy", "novel")
