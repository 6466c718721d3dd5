"""The rollout stage: how an iteration's groups are played, and how held-out episodes are.

* :mod:`.registry` -- the rollout strategies by name (``rollouts.strategy``), each with its settings
  section; :mod:`.collection` -- the shared collection and the ``linear`` and ``tree`` strategies
  (:mod:`.branching` -- the tree's choices of branch point, apart from it);
  :mod:`.patr`, :mod:`.spo3`, :mod:`.bpo` -- a strategy each, its settings (``settings``) beside its
  collection (``collection``), so that checking a config imports no collection;
* :mod:`.episodes` -- the episode engine both rollouts and evaluation play on;
* :mod:`.evaluation` -- any agent on held-out seeds; :mod:`.agent` -- a policy as such an agent;
* :mod:`.recordings` -- an iteration's groups written as rows (``run.record_rollouts``);
* :mod:`.settings` -- the stage's config sections: ``rollouts``, ``evaluation`` and ``env_workers``.

Nothing is imported here: a module of the stage loads only what it names.
"""
