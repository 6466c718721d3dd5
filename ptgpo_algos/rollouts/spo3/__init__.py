"""3SPO, the ``3spo`` rollout strategy: its search as pure parts (:mod:`.search`), its settings
(:mod:`.settings`) and its collection on the episode engine (:mod:`.collection`). The estimator that
credits what it records is :mod:`ptgpo_algos.advantages.spo3`."""
