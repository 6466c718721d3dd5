"""An example PTGPO plugin: the median-baseline estimator and the Corridor environment (see pyproject.toml)."""
