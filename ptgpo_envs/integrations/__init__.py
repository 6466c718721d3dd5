"""Our environments inside other projects' environment interfaces.

* :mod:`.openenv` -- any registered environment as an OpenEnv server (typed action, observation and
  state; snapshots as opaque ids) and the matching OpenEnv client (``pip install openenv-core``);
* :mod:`.openenv_package` -- an environment's OpenEnv package (``openenv.yaml``, ``pyproject.toml``,
  ``server/app.py``) as text, for OpenEnv's ``validate``, ``build`` and ``push``;
* :mod:`.serving` -- what a served environment allows its clients (limits, reset checks, request size),
  without OpenEnv;
* :mod:`.gem` -- our environments in GEM's registry (``gem.make("ptgpo:Household-v0")``), with
  ``spawn(same_state=True)`` forking through ``snapshot``/``restore`` (``pip install gem-llm``).

Each module imports its framework only when used, so ``ptgpo_envs`` itself never needs them.
"""
