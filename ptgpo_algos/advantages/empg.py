"""EMPG: any estimator's advantages re-scaled by each step's policy entropy, plus a bonus for steps
whose next step is taken with confidence (Entropy-Modulated Policy Gradients).

It is a modifier, not an estimator: the common config key ``empg`` turns it on for every estimator
(``algorithm.config: {empg: true}`` or ``{empg: {k: 1.0, k_f: 1.0, zeta: 0.1}}``), and the driver
(:func:`ptgpo_algos.advantages.estimate.estimate_advantages`) applies :func:`empg_modulate` to the
estimator's output. The entropy is the one the rollout already records in ``Decision.entropy``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ptgpo_algos.advantages.ops import successor
from ptgpo_algos.advantages.table import StepTable
from ptgpo_algos.validation import as_number

__all__ = ["EmpgSettings", "empg_modulate", "empg_setting"]

_EPSILON = 1e-8  # the paper's guard in the min-max normalisation and the mean of g


@dataclass(frozen=True)
class EmpgSettings:
    """``k``: steepness of the gradient scaling g; ``k_f``: of the future-clarity bonus f; ``zeta``:
    the bonus's weight; ``center``: subtract the batch mean of the modulated advantages."""

    k: float = 1.0
    k_f: float = 1.0
    zeta: float = 0.1
    center: bool = True


    @classmethod
    def from_config(cls, value: Mapping[str, Any] | None) -> EmpgSettings | None:
        """The settings an ``empg`` value checked by :func:`empg_setting` stands for (None: off)."""
        return None if value is None else cls(**value)


def empg_setting(value: Any) -> dict[str, Any] | None:
    """The conversion rule of the ``empg`` key: None/False (off), True (the paper's settings) or a
    mapping of some of k, k_f, zeta (finite numbers >= 0) and center (a bool), returned complete so
    a saved config is explicit. Raises ``ValueError`` for anything else."""
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    if not isinstance(value, Mapping) or set(value) - {"k", "k_f", "zeta", "center"}:
        raise ValueError
    settings = {**asdict(EmpgSettings()), **value}
    for key in ("k", "k_f", "zeta"):
        number = as_number(settings[key])
        if isinstance(number, (bool, np.bool_)) or not isinstance(number, numbers.Real):
            raise ValueError
        if not (math.isfinite(number) and number >= 0):
            raise ValueError
        settings[key] = float(number)
    if not isinstance(settings["center"], (bool, np.bool_)):
        raise ValueError
    settings["center"] = bool(settings["center"])
    return settings


def empg_modulate(table: StepTable, advantages: np.ndarray, settings: EmpgSettings) -> np.ndarray:
    """EMPG (Wang et al., ICLR 2026, arXiv 2509.09265), over the batch's steps.

    With ``H_t`` the step's entropy (``Decision.entropy``: the mean per-token entropy of a generated
    response, the entropy over the candidates in ``choose`` mode):

    - ``H~_t = (H_t - min H) / (max H - min H + 1e-8)``, min and max over the batch (Eq. 12);
    - self-calibrating scaling ``g_t = exp(-k H~_t) / (mean_batch exp(-k H~) + 1e-8)`` (Eq. 10): mean 1,
      above 1 for confident steps, below for uncertain ones;
    - future-clarity bonus ``f_t = exp(-k_f H~_t)`` (Eq. 11), credited to the step before;
    - ``A'_{i,t} = g_t A_{i,t} + zeta f_{t+1}``, with ``f_{t+1} = 0`` after a trajectory's last step;
    - with ``center`` (default), ``A'' = A' - mean_batch A'``.

    Steps shared by several trajectories (tree rollouts) count once per trajectory, as everywhere in
    the table. Raises ``ValueError`` if a step has no recorded entropy (a hand-built ``Step``
    without a ``Decision``).
    """
    if table.n_steps == 0:
        return advantages
    entropy = table.entropy
    if not np.isfinite(entropy).all():
        raise ValueError(
            "empg needs each step's policy entropy (Step.decision.entropy); "
            f"{int((~np.isfinite(entropy)).sum())} step(s) have none: record decisions or turn empg off"
        )
    spread = entropy.max() - entropy.min()
    normalised = (entropy - entropy.min()) / (spread + _EPSILON)
    confidence = np.exp(-settings.k * normalised)
    scale = confidence / (confidence.mean() + _EPSILON)
    clarity = np.exp(-settings.k_f * normalised)
    following = successor(table)
    bonus = np.where(following >= 0, clarity[np.maximum(following, 0)], 0.0)
    modulated = scale * advantages + settings.zeta * bonus
    return modulated - modulated.mean() if settings.center else modulated
