"""The update stage: a batch with its advantages becomes a step of the policy's weights.

* :mod:`.samples` -- the batch as training samples, scored, cut into mini- and micro-batches, trained on;
* :mod:`.losses` -- the policy-gradient losses by name (``algorithm.loss``) and the update's whole loss;
* :mod:`.updater` -- an iteration's update, built once from the ``optim`` and ``algorithm`` sections;
* :mod:`.optimizer_registry` -- the optimisers by name (``optim.optimizer``), checked without torch;
* :mod:`.optimizer` -- the built-in optimisers and the learning-rate schedule, in one process or across ranks;
* :mod:`.settings` -- the stage's config sections: ``algorithm`` and ``optim``.

Nothing is imported here: a module of the stage loads only what it names.
"""
