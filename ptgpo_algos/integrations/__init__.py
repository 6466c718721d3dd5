"""Bridges to other training frameworks: our estimators and environments where their trainers run.

* :mod:`.verl` -- every registered advantage estimator in verl's advantage-estimator registry, with
  the mapping between verl's batch and our steps (``pip install 'ptgpo[verl]'``).
"""
