"""Bridges to other training frameworks: our estimators and environments where their trainers run.

The verl bridge is the package :mod:`.verl`:

* :mod:`.verl` -- every registered advantage estimator in verl's advantage-estimator registry, with
  the mapping between verl's batch and our steps (``pip install 'ptgpo[verl]'``);
* :mod:`.verl.steps` -- step-level credit on verl's multi-turn agent-loop rows (one row per episode):
  each decision's fields travel in the row's ``extra_fields`` and its advantage lands on its own tokens;
* :mod:`.verl.agent_loop` -- verl's agent loop ``ptgpo_env``: one episode of one of our environments
  per sample, each decision recorded for :mod:`.verl.steps` (imports verl);
* :mod:`.verl.tree` -- the ``ptgpo_tree`` agent loop: PTGPO's prefix tree grown from snapshots;
* :mod:`.verl.leaves` -- PTGPO's prefix trees in verl's default trainer: one sample per leaf of a
  tree shared through :mod:`.verl.hub`'s Ray actor, credited by the registered estimators; the
  dataset it reads from :mod:`.verl.dataset` (imports verl);
* :mod:`.verl.trainer` -- our trainer mode of verl's v1 trainer.

The older flat paths (``ptgpo_algos.integrations.verl_steps``...) are kept, each the moved module
itself with a ``DeprecationWarning`` (:func:`ptgpo_algos.old_paths.moved`), since verl configs name them.
"""
