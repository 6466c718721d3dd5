"""HiPER (Peng et al., ICML 2026, arXiv 2602.16165): a plan/execute policy trained actor-critic with
hierarchical advantage estimation (``algo: hiper``). Its critic (:mod:`~ptgpo_algos.hiper.critic`), and
the pieces that need none: the response format and prompt
(:mod:`~ptgpo_algos.hiper.plan_format`), subgoal segments (:mod:`~ptgpo_algos.hiper.segments`), the
two-level credit (:mod:`~ptgpo_algos.hiper.credit`), its batch entry point
(:mod:`~ptgpo_algos.hiper.estimate`) and the settings (:mod:`~ptgpo_algos.hiper.settings`).
docs/algorithms/hiper.md describes the method and how it runs.
"""
