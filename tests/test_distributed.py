"""Training across ranks (ptgpo_algos.distributed): the pure parts by hand, the collective parts on
2 gloo ranks on CPUs, each compared with a single process.

One launch of 2 ranks runs every multi-rank scenario (tests/distributed_scenarios.py); the tests
compare its results with single-process references computed here.

Tolerance of the 2-rank against the 1-process update (the trainer's Updater and ShardedUpdater, one
optimiser step on the tiny policy's own decisions): the same float32 arithmetic, but sums taken
in another order (each rank sums its half of the batch, then the halves are added; the output
layer's chunked backward adds positions in other groups), so gradients differ by a few units in
the last place of float32 (relative ~1e-7). A weight moves by ``lr`` times its gradient (SGD, lr 0.5;
clipped to a norm of 0.05, or not clipped), so weights agree within 1e-6 absolute, a thousandth of
the smallest move the test checks (a step moves the weights by more than 1e-3). AdamW's step
(resume) is ``lr`` times m / sqrt(v), free of the gradient's scale: an element whose gradient is
the near-cancellation of larger terms (relative error up to ~1e-4) still moves by up to ``lr``,
carrying that relative error; so AdamW's weights agree within 1e-3 of ``lr`` (1e-5 at lr 1e-2;
measured 1.8e-6), and bit for bit when the world size, hence the order of every sum, is the same.
"""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest
import torch

from ptgpo_algos.training.checkpoint import CheckpointError
from ptgpo_algos.distributed.collectives import Metric, combine_metrics
from ptgpo_algos.distributed.fsdp_config import FsdpConfig
from ptgpo_algos.distributed.launch import launch
from ptgpo_algos.distributed.policy import RootRouted
from ptgpo_algos.distributed.work_split import share_budget, split_evenly

import distributed_scenarios as scenarios

TOLERANCE = 1e-6
ADAM_TOLERANCE = 1e-5


def _largest_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


# ----------------------------------------------------------------------------------------- pure parts
def test_split_evenly_gives_consecutive_blocks():
    assert split_evenly(5, 2) == [range(0, 3), range(3, 5)]
    assert split_evenly(1, 3) == [range(0, 1), range(1, 1), range(1, 1)]
    assert split_evenly(0, 2) == [range(0, 0), range(0, 0)]
    with pytest.raises(ValueError, match="world_size"):
        split_evenly(3, 0)


def test_share_budget_by_hand():
    # Tasks [0, 1] and [2]: 20 and 20 planned decisions.
    assert share_budget([10, 10, 20], 2, None).caps == (None, None)
    assert share_budget([10, 10, 20], 2, 100).caps == (20, 20)  # more left than the tasks can spend
    # 7 of 40: 3.5 each; the left-over decision goes to the lower rank on a tie.
    assert share_budget([10, 10, 20], 2, 7).caps == (4, 3)
    # 10 of 15 as 10:5 -> 6.67 and 3.33: floors 6 and 3, the larger remainder takes the last one.
    plan = share_budget([9, 1, 5], 2, 10)
    assert plan.caps == (7, 3) and plan.for_rank(1) == (range(2, 3), 3)
    assert share_budget([4], 3, 2).caps == (2, 0, 0)  # ranks without tasks spend nothing


def test_share_budget_is_exact_and_never_over_a_rank_s_tasks():
    rng = np.random.default_rng(0)
    for _ in range(300):
        planned = [int(p) for p in rng.integers(0, 60, int(rng.integers(0, 9)))]
        world, remaining = int(rng.integers(1, 5)), int(rng.integers(0, 400))
        plan = share_budget(planned, world, remaining)
        per_rank = [sum(planned[i] for i in block) for block in plan.tasks]
        assert sum(plan.caps) == min(remaining, sum(planned))
        assert all(0 <= cap <= most for cap, most in zip(plan.caps, per_rank))
        assert plan == share_budget(planned, world, remaining)  # deterministic: every rank computes the same


def test_share_budget_refuses_bad_input():
    with pytest.raises(ValueError, match="planned"):
        share_budget([3, -1], 2, 5)
    with pytest.raises(ValueError, match="remaining"):
        share_budget([3], 2, -5)


def test_combine_metrics_by_hand():
    ranks = [{"decisions": Metric(10, kind="sum"), "success": Metric(0.5, count=2), "longest": Metric(3, kind="max")},
             {"decisions": Metric(11, kind="sum"), "success": Metric(1.0, count=6), "longest": Metric(1, kind="max"),
              "idle": Metric(0.0, count=0)}]
    assert combine_metrics(ranks) == {"decisions": 21, "success": 0.875, "longest": 3, "idle": 0.0}
    with pytest.raises(ValueError, match="combined as max and sum"):
        combine_metrics([{"x": Metric(1, kind="sum")}, {"x": Metric(1, kind="max")}])
    with pytest.raises(ValueError, match="kind"):
        Metric(1.0, kind="median")


def test_fsdp_config_is_validated_with_the_key_named():
    assert FsdpConfig.from_dict(None) == FsdpConfig()
    assert FsdpConfig().dtypes("cuda") == (torch.bfloat16, torch.float32)
    assert FsdpConfig().dtypes("cpu") == (torch.float32, torch.float32)
    assert FsdpConfig.from_dict({"param_dtype": "float32"}).dtypes("cuda")[0] == torch.float32
    with pytest.raises(ValueError, match=r"optim.fsdp: unknown key\(s\) 'param_dtyp' \(did you mean 'param_dtype'\?\)"):
        FsdpConfig.from_dict({"param_dtyp": "bfloat16"})
    with pytest.raises(ValueError, match="optim.fsdp.param_dtype: 'int8' is not valid"):
        FsdpConfig(param_dtype="int8")
    with pytest.raises(ValueError, match="optim.fsdp.cpu_offload: expected true or false"):
        FsdpConfig(cpu_offload="yes")
    with pytest.raises(ValueError, match="optim.fsdp.cpu_offload: true needs GPUs"):
        FsdpConfig(cpu_offload=True).policies("cpu")


def test_each_rank_s_engine_sees_its_own_gpu_alone():
    from ptgpo_algos.distributed.engine import engine_visible_devices

    assert engine_visible_devices("cpu", "0,1") is None
    assert engine_visible_devices("cuda:3", None) == "3"
    # The trainer's own CUDA_VISIBLE_DEVICES renumbers the GPUs: cuda:1 is the second one it names.
    assert engine_visible_devices("cuda:1", "4, 6,7") == "6"
    assert engine_visible_devices("cuda", "5") == "5"
    with pytest.raises(ValueError, match=r"cuda:2: CUDA_VISIBLE_DEVICES='0,1' names only 2 GPUs"):
        engine_visible_devices("cuda:2", "0,1")


def test_each_rank_s_cpu_engine_gets_its_own_block_of_cores():
    from ptgpo_algos.distributed.engine import cpu_core_block

    assert [cpu_core_block(r, 2, [0, 1]) for r in range(2)] == ["0", "1"]
    assert [cpu_core_block(r, 2, range(8)) for r in range(2)] == ["0,1,2,3", "4,5,6,7"]
    assert [cpu_core_block(r, 3, range(8)) for r in range(3)] == ["0,1", "2,3", "4,5"]
    # The cores this process may run on (its affinity), not 0..n-1.
    assert [cpu_core_block(r, 2, [4, 5, 9, 11]) for r in range(2)] == ["4,5", "9,11"]
    assert [cpu_core_block(r, 4, [0, 1]) for r in range(4)] == ["0", "1", "0", "1"]  # more ranks than cores: shared
    with pytest.raises(ValueError, match="local rank 2 of 2"):
        cpu_core_block(2, 2, [0, 1, 2, 3])


def test_launch_refuses_a_bad_process_count():
    with pytest.raises(ValueError, match="--nproc: expected a positive number"):
        launch(print, 0)


def _launched_by_torchrun(monkeypatch, rank: int, local: int, world: int) -> None:
    for key, value in {"RANK": rank, "LOCAL_RANK": local, "WORLD_SIZE": world, "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": 29500}.items():
        monkeypatch.setenv(key, str(value))


def test_rank_info_reads_torchrun_s_variables(monkeypatch):
    from ptgpo_algos.distributed.launch import under_launcher
    from ptgpo_algos.distributed.process_group import RankInfo, backend_for, rank_info

    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    assert rank_info() == RankInfo(0, 1, 0, "cpu") and rank_info().is_main and not under_launcher()
    _launched_by_torchrun(monkeypatch, rank=5, local=1, world=8)  # node 2 of a 2-node x 4-GPU run
    assert rank_info("cuda") == RankInfo(5, 8, 1, "cuda:1") and under_launcher()
    assert (backend_for("cuda:1"), backend_for("cpu")) == ("nccl", "gloo")
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'"):
        rank_info("tpu")
    monkeypatch.setenv("RANK", "8")
    with pytest.raises(ValueError, match="RANK=8 is not below WORLD_SIZE=8"):
        rank_info()
    monkeypatch.setenv("RANK", "one")
    with pytest.raises(ValueError, match="RANK='one' is not an integer"):
        rank_info()


def test_a_rank_s_process_ends_with_its_status_its_output_flushed_and_no_interpreter_exit():
    # The interpreter's exit is where a gloo worker thread, still freeing its last collective's tensors,
    # asks for the GIL and aborts the process (SIGABRT) after a complete run.
    import subprocess
    import sys

    script = ("import atexit, sys\n"
              "from ptgpo_algos.distributed.process_group import end_rank_process\n"
              "atexit.register(lambda: print('the interpreter exited'))\n"
              "sys.stdout.write('the summary')\n"  # no newline: still in the buffer
              "end_rank_process(3)\n"
              "print('not reached')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert (done.returncode, done.stdout) == (3, "the summary"), done.stderr


def test_ptgpo_train_ends_a_torchrun_rank_s_process_with_its_status(monkeypatch, capsys):
    from ptgpo_algos.distributed import process_group
    from ptgpo_harness.cli import main

    ended = []

    def end(status):
        ended.append(status)
        raise SystemExit(status)

    monkeypatch.setattr(process_group, "end_rank_process", end)
    assert main(["train", "--env", "ptgpo/FrozenLake-v0", "--iterations", "0", "--no-progress"]) == 2
    assert ended == []  # a process that started no group returns to its caller
    monkeypatch.setattr(process_group, "joined_a_group", lambda: True)
    with pytest.raises(SystemExit):
        main(["train", "--env", "ptgpo/FrozenLake-v0", "--iterations", "0", "--no-progress"])
    assert ended == [2] and "ptgpo train:" in capsys.readouterr().err


def test_launch_under_torchrun_keeps_torchrun_s_world(monkeypatch):
    _launched_by_torchrun(monkeypatch, rank=0, local=0, world=4)
    with pytest.raises(ValueError, match="one of 4 that torchrun started; leave --nproc out under torchrun, or give "
                                         "--nproc 4"):
        launch(print, 2)


# ----------------------------------------------------------------------------------------- 2 ranks
@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    """The untrained tiny model's folder, built once (the ranks load it)."""
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model

    return str(build_tiny_model(TinyModelSpec(seed=7, pretrain_steps=0), env_ids=["ptgpo/FrozenLake-v0"],
                                cache_dir=tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory, tiny_path):
    """Every scenario's results on 2 gloo ranks (one launch), and the resume checkpoint's folder."""
    folder = tmp_path_factory.mktemp("sharded") / "checkpoint"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOCAL_WORLD_SIZE", "1")  # as a vLLM engine built in this process leaves it
        ranks = launch(scenarios.all_on_rank, 2, str(folder), tiny_path)
    return {"ranks": ranks, "folder": folder}


@pytest.mark.distributed
def test_each_launched_rank_has_torchrun_s_variables_of_its_own_world(two_ranks):
    variables = [rank["variables"] for rank in two_ranks["ranks"]]
    assert [(v["RANK"], v["LOCAL_RANK"], v["WORLD_SIZE"], v["LOCAL_WORLD_SIZE"]) for v in variables] == [
        ("0", "0", "2", "2"), ("1", "1", "2", "2")]


@pytest.mark.distributed
@pytest.mark.parametrize("case, count, micro, clip", [("clipped", 7, 2, 0.05), ("unclipped", 7, None, 1e3),
                                                      ("lonely", 1, None, 0.05)])
def test_the_update_on_two_ranks_equals_the_single_process_update(two_ranks, tiny_path, case, count, micro, clip):
    sharded = [rank[case] for rank in two_ranks["ranks"]]
    policy = scenarios.tiny_policy(tiny_path)
    before = scenarios.policy_weights(policy)
    figures = scenarios.update(policy, scenarios.make_samples(policy, count), micro_batch_size=micro,
                               max_grad_norm=clip)
    single = scenarios.policy_weights(policy)
    assert _largest_difference(before, single) > 1e-3  # the step moved the weights
    gathered = sharded[0]["weights"]
    assert _largest_difference(gathered, {name: single[name] for name in gathered}) < TOLERANCE
    both = [s["figures"] for s in sharded]
    assert both[0]["grad_norm"] == both[1]["grad_norm"] == pytest.approx(figures["grad_norm"], rel=1e-5)
    assert both[0]["loss"] == both[1]["loss"] == pytest.approx(figures["loss"], rel=1e-5,
                                                                             abs=1e-7)
    assert both[0]["updates"] == figures["updates"] == 1
    # The tiny model ties its output layer to the embedding: gathered once, under the embedding's name.
    assert "lm_head.weight" not in gathered and "model.embed_tokens.weight" in gathered


@pytest.mark.distributed
def test_metrics_and_lists_are_combined_across_ranks(two_ranks):
    for rank in two_ranks["ranks"]:
        out = rank["collectives"]
        assert out["metrics"] == {"decisions": 21.0, "success": 0.875, "longest": 3.0, "only_one": 4.0}
        assert out["sum_max"] == ([3.0, 5.0], [1.0, 0.0])
        assert out["gathered"] == [f"episode {i}" for i in range(5)]


@pytest.mark.distributed
def test_a_two_rank_checkpoint_resumes_on_two_ranks_and_on_one(two_ranks, tiny_path):
    resume = two_ranks["ranks"][0]["resume"]
    assert resume["extra"] == {"iteration": 1, "rank_rng": [0], "world_size": 2}
    assert _largest_difference(resume["resumed"], resume["uninterrupted"]) == 0.0  # same world size: bit for bit
    policy = scenarios.tiny_policy(tiny_path)
    batch_b = scenarios.make_samples(policy, 6, seed=2)
    root = RootRouted(policy.model)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    fresh = scenarios.policy_weights(policy)
    from ptgpo_algos.distributed.sharded_checkpoint import load_sharded

    assert load_sharded(two_ranks["folder"], root, optimizer)["world_size"] == 2
    scenarios.update(policy, batch_b, optimizer=optimizer)
    one_rank = scenarios.policy_weights(policy)
    one_rank = {name: one_rank[name] for name in resume["uninterrupted"]}
    fresh = {name: fresh[name] for name in resume["uninterrupted"]}
    assert _largest_difference(one_rank, resume["uninterrupted"]) < ADAM_TOLERANCE
    assert _largest_difference(fresh, resume["uninterrupted"]) > 1e-2  # loading mattered


@pytest.mark.distributed
def test_gathered_weights_and_adapters_equal_the_unsharded_model(two_ranks):
    sync = two_ranks["ranks"][0]["sync"]
    model = scenarios.build_model("qwen2", lora=True)
    state = {name: tensor.detach().numpy() for name, tensor in model.state_dict().items()}
    adapters = {name: value for name, value in state.items() if "lora_" in name}
    assert adapters and _largest_difference(sync["adapters"], adapters) == 0.0
    assert _largest_difference(sync["streamed"], state) == 0.0
    assert max(sync["sizes"]) <= 20_000 and len(sync["sizes"]) > 1  # bounded messages
    assert two_ranks["ranks"][1]["sync"]["sizes"] == []  # only the main rank sends


# ----------------------------------------------------------------------------------------- crafted files
class _Payload:
    """Unpickling this runs ``touch PATH``."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


@pytest.fixture
def saved(tmp_path):
    """A single-process sharded checkpoint of the tiny model, and a model and optimiser to load it into."""
    return scenarios.save_tiny_checkpoint(tmp_path / "checkpoint")


def _write_manifest(folder, manifest: dict) -> None:
    """Write a crafted manifest with the checksums of the folder's files and its own, as a crafter would:
    the checksums prove a checkpoint whole, and what they cover is still validated as it is read."""
    import hashlib

    manifest["files"] = {name: {"sha256": hashlib.sha256((folder / name).read_bytes()).hexdigest(),
                                "bytes": (folder / name).stat().st_size} for name in manifest["files"]}
    body = {key: value for key, value in manifest.items() if key != "sha256"}
    manifest["sha256"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_a_checkpoint_round_trips_in_one_process(saved):
    from ptgpo_algos.distributed.sharded_checkpoint import load_sharded

    folder, scorer, optimizer = saved
    assert sorted(os.listdir(folder)) == ["__0_0.distcp", "manifest.json", "state.pt"]  # no pickled .metadata
    assert load_sharded(folder, scorer, optimizer) == {"iteration": 4, "world_size": 1}


def test_dcp_s_pickled_metadata_is_never_read(saved, tmp_path):
    from ptgpo_algos.distributed.sharded_checkpoint import load_sharded

    folder, scorer, optimizer = saved
    marker = tmp_path / "ran"
    (folder / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    (folder / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match=r"no manifest.json \(a .metadata file is there"):
        load_sharded(folder, scorer, optimizer)
    assert not marker.exists()


@pytest.mark.parametrize("change, message", [
    (lambda m: m["storage"][0].update(path="../../etc/passwd"), "not a shard file of this folder"),
    (lambda m: next(iter(m["tensors"].values())).update(dtype="object"), "has no dtype among"),
    (lambda m: next(iter(m["tensors"].values())).update(size=[-1]), "size is not a list of integers"),
    (lambda m: m.update(format="torch-dcp"), "format 'torch-dcp'"),
])
def test_a_crafted_manifest_is_refused(saved, change, message):
    from ptgpo_algos.distributed.sharded_checkpoint import load_sharded

    folder, scorer, optimizer = saved
    manifest = json.loads((folder / "manifest.json").read_text())
    change(manifest)
    _write_manifest(folder, manifest)
    with pytest.raises(CheckpointError, match=f"manifest.json: refused: .*{message}"):
        load_sharded(folder, scorer, optimizer)


@pytest.mark.parametrize("target", ["state.pt", "__0_0.distcp"])
def test_a_pickled_object_in_a_data_file_is_refused_without_running(saved, tmp_path, target):
    from ptgpo_algos.distributed.sharded_checkpoint import load_sharded

    folder, scorer, optimizer = saved
    marker = tmp_path / "ran"
    torch.save({"x": _Payload(marker)}, folder / target)
    manifest = json.loads((folder / "manifest.json").read_text())
    if target.endswith(".distcp"):  # every chunk points at the whole crafted file, so that it is unpickled
        for entry in manifest["storage"]:
            entry.update(start=0, length=(folder / target).stat().st_size)
    _write_manifest(folder, manifest)
    with pytest.raises(CheckpointError, match="refused|cannot be read") as refused:
        load_sharded(folder, scorer, optimizer)
    assert "refused" in str(refused.value) and "system" in str(refused.value) or target == "state.pt"
    assert not marker.exists()
