"""Advantage estimators: the group methods GRPO, RLOO, GiGPO, HGPO, PTGPO, G2PO, PlanPO, ProGPO, CovGPO,
GraphGPO, 3SPO and BPO, and PPO's GAE from a learned critic's values (:mod:`ptgpo_algos.critic`),
registered by name.

``compute_advantages(name, batch, **config)`` returns one advantage per step, aligned with ``batch``
(groups of :class:`~ptgpo_algos.records.Trajectory`). Each estimator is a pure function over the batch's
array form (:class:`StepTable`) whose docstring states its formula and paper.

Common config keys (all estimators): ``gamma`` [0.95] discount of step returns; ``invalid_penalty``
[0.1] subtracted from the reward of each invalid step; ``coverage_beta`` [0; 0.1 for ptgpo] coverage
credit in the groups ``coverage_when`` [all_failed] names: every environment return 0 (all_failed) or
all returns equal, all-succeeded groups too (all_equal). g2po, planpo, covgpo and graphgpo read the
outcomes themselves and take neither. Own keys: ``norm`` [mean_std_norm] (all but rloo), ``omega`` [1.0] (gigpo,
ptgpo, g2po, progpo), ``K`` [2] (hgpo, ptgpo, progpo), ``alpha`` [1.0] (hgpo, ptgpo),
``include_episode`` [False] (hgpo), ``lam`` [1.0] (ptgpo), ``success_reward`` [1.0] (g2po, planpo),
``alpha_init`` [0.1], ``alpha_final`` [0.05], ``progress`` [0] and ``turn_group`` [index] (planpo),
``transition_weight`` [1.0] and ``variance_prior`` [0.25] (progpo), ``coverage_weight`` [0.1] and
``variant`` [trajectory] (covgpo), ``distance_base`` [0.2] (graphgpo; also ``omega`` and
``success_reward``), ``gae_lambda`` [0.95] and ``whiten`` [True] (ppo, which takes no coverage keys). ``estimator_defaults(name)`` lists them.

:data:`ESTIMATORS` is an open registry: the built-in estimators are declared by import string in
:mod:`ptgpo_algos.advantages.registry`, so importing this package (checking a config, listing the
estimators) imports none of their modules; ``register_estimator`` adds one from another package (the
``ptgpo.estimators`` entry points), and the trainer's config accepts it by name.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

from ptgpo_algos.advantages.estimate import (
    AdvantageResult,
    GroupDiagnostics,
    compute_advantages,
    compute_advantages_with_diagnostics,
    estimate_advantages,
    estimate_batch,
    summarize_diagnostics,
)
from ptgpo_algos.advantages.registry import ESTIMATORS, Estimate, get_estimator, register_estimator
from ptgpo_algos.advantages.step_advantages import StepAdvantages
from ptgpo_algos.advantages.table import StepTable

__all__ = [
    "ESTIMATORS",
    "AdvantageResult",
    "Estimate",
    "GroupDiagnostics",
    "StepAdvantages",
    "StepTable",
    "compute_advantages",
    "compute_advantages_with_diagnostics",
    "estimate_advantages",
    "estimate_batch",
    "estimator_defaults",
    "register_estimator",
    "summarize_diagnostics",
]


def estimator_defaults(name: str) -> Mapping[str, Any]:
    """Every config key estimator ``name`` accepts, with its default (read-only)."""
    return MappingProxyType(dict(get_estimator(name).defaults))
