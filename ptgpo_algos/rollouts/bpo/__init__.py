"""BPO, the ``bpo`` rollout strategy: its settings (:mod:`.settings`) and its collection (:mod:`.collection`).
The estimator that credits its forks is :mod:`ptgpo_algos.advantages.bpo`."""
