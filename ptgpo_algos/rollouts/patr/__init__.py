"""PATR, the ``patr`` rollout strategy: its settings (:mod:`.settings`) and its collection (:mod:`.collection`)."""
