"""Bridges to other training frameworks: our estimators and environments where their trainers run.

* :mod:`.verl` -- every registered advantage estimator in verl's advantage-estimator registry, with
  the mapping between verl's batch and our steps (``pip install 'ptgpo[verl]'``);
* :mod:`.verl_steps` -- step-level credit on verl's multi-turn agent-loop rows (one row per episode):
  each decision's fields travel in the row's ``extra_fields`` and its advantage lands on its own tokens;
* :mod:`.verl_agent_loop` -- verl's agent loop ``ptgpo_env``: one episode of one of our environments
  per sample, each decision recorded for :mod:`.verl_steps` (imports verl);
* :mod:`.verl_leaves` -- PTGPO's prefix trees in verl's default trainer: one sample per leaf of a
  tree shared through :mod:`.verl_hub`'s Ray actor, credited by the registered estimators; the
  dataset it reads from :mod:`.verl_dataset` (imports verl).
"""
