"""The training stage: the loop that runs rollouts and updates, and what a run keeps on disk.

* :mod:`.trainer` -- :class:`~.trainer.Trainer`, one class for one process or N ranks;
* :mod:`.placement` -- where the run executes (this process; ranks are :mod:`ptgpo_algos.distributed`);
* :mod:`.collectors` -- each iteration's rollouts, here or in a second process meanwhile;
* :mod:`.callbacks` -- observers of the run (the logs among them);
* :mod:`.state` -- what a run carries across a resume, and what it returns;
* :mod:`.checkpoint`, :mod:`.run_folder` -- the checkpoint file and the run's output folder;
* :mod:`.preflight`, :mod:`.memory_plan` -- what a run needs of the machine, checked before it starts;
* :mod:`.run_evaluation` -- a run's held-out evaluation protocol;
* :mod:`.settings` -- the stage's config section: ``run``.

Nothing is imported here: a module of the stage loads only what it names.
"""
