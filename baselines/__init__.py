"""Baselines for the benchmark: ``random``, ``expert`` (:mod:`baselines.simple`), ``sb3_ppo``
(:mod:`baselines.sb3_ppo`) and ``zero_shot`` (:mod:`baselines.zero_shot`), registered by name in
:data:`baselines.registry.BASELINES` with the contract each one honours."""
