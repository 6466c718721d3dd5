"""Training across processes: one process per GPU (or per CPU rank on gloo), the model sharded with
PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``).

One module per concept, each importing only from below it:

* :mod:`~ptgpo_algos.distributed.process_group` -- the process group's start and end, and who this
  process is (:class:`~ptgpo_algos.distributed.process_group.RankInfo`);
* :mod:`~ptgpo_algos.distributed.launch` -- running a function on N local processes, or as one of the
  processes ``torchrun`` started (also across nodes, through its rendezvous);
* :mod:`~ptgpo_algos.distributed.fsdp_config` -- :class:`~ptgpo_algos.distributed.fsdp_config.FsdpConfig`,
  the config's ``optim.fsdp`` (no torch, so the config imports none);
* :mod:`~ptgpo_algos.distributed.fsdp` -- the sharding of a Qwen2-architecture model, one unit per
  decoder layer;
* :mod:`~ptgpo_algos.distributed.work_split` -- pure: which rank plays which task, each rank's share
  of the exact global decision budget, evaluation episodes by rank;
* :mod:`~ptgpo_algos.distributed.collectives` -- metrics all-reduced, lists gathered in order;
* :mod:`~ptgpo_algos.distributed.sharded_checkpoint` -- checkpoints written shard by shard with
  ``torch.distributed.checkpoint``, read on any world size, nothing executable in a file;
* :mod:`~ptgpo_algos.distributed.gather` -- each layer's full weights gathered from the shards, for
  a rollout engine's weight sync;
* :mod:`~ptgpo_algos.distributed.policy` -- a policy sharded for the update (its scoring through the
  FSDP root) and each rank's full copy that plays;
* :mod:`~ptgpo_algos.distributed.engine` -- each rank's own vLLM engine instead (``rollouts.backend:
  vllm``): its placement on the rank's GPU or cores, the gathered weights streamed into it;
* :mod:`~ptgpo_algos.distributed.updater` -- the update across ranks (the Updater's seams replaced):
  each rank's samples' gradients summed by FSDP, equal to the single-process step over the whole batch;
* :mod:`~ptgpo_algos.distributed.placement` -- :class:`~ptgpo_algos.distributed.placement.Ranks`, the
  trainer's :class:`~ptgpo_algos.training.placement.Placement` on one rank: who plays which tasks, the sharded
  model, the gathered figures, the sharded checkpoint;
* :mod:`~ptgpo_algos.distributed.run` -- a run across ranks (``ptgpo train --nproc N``, or under
  ``torchrun``): the one :class:`~ptgpo_algos.training.trainer.Trainer` on each rank with its ``Ranks`` placement.
"""
