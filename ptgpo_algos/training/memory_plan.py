"""The memory a training run will need at its peak, predicted from the model's config before it is loaded.

:func:`plan_memory` is pure arithmetic on a :class:`ModelShape` (the architecture's sizes, from its
``config.json``) and a :class:`RunShape` (precision, LoRA, gradient checkpointing, micro-batch,
sequence lengths, the rollout engine's share). The parts:

* weights: trainable ones in float32, frozen ones (a LoRA base) at the compute dtype
  (:mod:`ptgpo_algos.policy.precision`); gradients (float32) and the optimiser's state of the trainable
  ones, as ``optim.optimizer`` declares it (:class:`~ptgpo_algos.updates.optimizer_registry.OptimizerState`:
  AdamW's two float32 moments, 8 bytes a value; the built-in SGD's nothing, it has no momentum; AdamW's
  assumed, and labelled so, for a plugin's that declares none); the KL reference's copy (none with
  LoRA: the same weights, adapters off);
* activations of one micro-batch kept for the backward. Per token and layer, Qwen2-style decoder
  layers keep ``a*H + b*I + c*KV + d*r`` bytes (H hidden size, I the MLP's, KV the keys' width, r
  the LoRA rank), :data:`ACTIVATION_BYTES`, measured with saved-tensor hooks on layers of five
  shapes (transformers 5.24, torch 2.13; every fit within 40 bytes). Under gradient checkpointing a
  layer keeps its input only (the residual stream), and one layer's activations are recomputed at a
  time. Autocast keeps a bf16 copy of every weight it casts until the forward's context ends;
* the output layer: scores go through it :data:`LOGIT_TENSORS` (chunk x vocabulary) float32 tensors
  at a time (:mod:`ptgpo_algos.policy.token_logprobs`), plus a cast copy of its weight;
* rollouts on the trainer's own model (the transformers backend): the KV cache of a batch of
  episodes; with vLLM, the engine's share of the GPU (``gpu_memory_utilization``), which vLLM
  takes whole at start-up;
* a learned critic (``algo: ppo``, ``hiper``, :mod:`ptgpo_algos.critic`): its value head's weights,
  gradients and optimiser state (float32, ``(8 + S) (H + 1)`` bytes per output, S the optimiser's state
  bytes per value: ``16 (H + 1)`` with AdamW; HiPER's head has two or three outputs),
  and, when the value loss reaches the shared trunk, the activations of the value's forward pass over
  the micro-batch's prompts (at the prompt budget), alive beside the policy's until the backward;
  HiPER's low head reads each turn a second time at the token closing ``</subgoal>``, a pass over the
  prompt and the response up to there (at most the whole step's budget), alive too
  (:class:`~ptgpo_algos.critic.settings.ValuePasses`); a critic model of its own (``shared_trunk:
  false``) adds the policy's weights, gradients and optimiser state (and a LoRA base) once more;
* what the allocator measures nowhere: the CUDA context, and fragmentation (:data:`FRAGMENTATION`).

On a CPU the same parts are the process's resident memory, in float32, plus the Python runtime. The
trainer plans at start-up on GPUs and refuses a config that cannot fit (``run.memory_check``);
``ptgpo plan CONFIG`` prints the plan for any config and machine.

Sharded over ``world_size`` ranks (FSDP2, :mod:`ptgpo_algos.distributed.fsdp`), the plan is one
rank's: each holds ``1 / world_size`` of the weights, gradients and optimiser state (and of a LoRA
base, and of the KL reference), plus FSDP's gathered full copies (two layers at the compute dtype,
the root unit's embeddings and output layer, one layer's gradient before its reduce-scatter); FSDP
casts the gathered copies to the compute dtype, so autocast keeps no copies of its own. With the
transformers backend each rank also holds a full copy of the weights at the compute dtype, which
plays its rollouts (:mod:`ptgpo_algos.distributed.policy`). Activations are per rank (a rank's micro-batch), and a rank's rollouts are its share of the tasks.
:func:`smallest_world_size` finds the fewest ranks a run fits on (``ptgpo plan CONFIG --nproc N``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from ptgpo_algos.critic.settings import value_passes
from ptgpo_algos.policy.precision import DTYPE_BYTES, Precision, precision_for
from ptgpo_algos.updates.optimizer_registry import ADAMW_STATE, OptimizerState, optimizer_state

__all__ = ["ACTIVATION_BYTES", "DiskDoesNotFit", "DiskPlan", "GpuDoesNotFit", "MemoryItem", "MemoryPlan", "ModelShape",
           "RunShape", "disk_plan_for_config", "model_shape", "plan_disk", "plan_for_config", "plan_memory",
           "run_shape", "smallest_world_size", "total_device_memory"]

GIB = 2**30
#: Bytes a decoder layer keeps for the backward per token: coefficients of (H, I, KV, r) by how it
#: computes: float32 weights and compute; float32 weights under bf16 autocast; a bf16 LoRA base with
#: float32 adapters under autocast.
ACTIVATION_BYTES = {"float32": (32.0, 16.0, 8.0, 0.0), "autocast": (30.0, 8.0, 4.0, 0.0),
                    "lora": (24.0, 8.0, 4.0, 14.0)}
#: float32 (chunk x vocabulary) tensors alive at once in the output layer's backward (logits, softmax,
#: gradient, and the gradient's cast copy counted as one more).
LOGIT_TENSORS = 4
#: The allocator's slack over what it hands out, as a share of the trainer's peak.
FRAGMENTATION = 0.10
#: Memory outside torch's allocator: the CUDA context and libraries (GPU), or the Python runtime with
#: torch and transformers imported (CPU, measured 0.36 GiB).
RUNTIME_BYTES = {"cuda": 1 * GIB, "cpu": GIB // 2}


class GpuDoesNotFit(ValueError):
    """The plan's peak is above the device's memory (the message says what to change)."""


class DiskDoesNotFit(ValueError):
    """A run's checkpoints and final model need more disk than its folder has free."""


# ----------------------------------------------------------------------------------------- shapes
@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's sizes (Qwen2/Llama style: q/k/v with biases where ``qkv_bias``)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool = True
    qkv_bias: bool = True

    @property
    def kv_width(self) -> int:
        """The width of the key and value projections: ``kv_heads`` heads of ``hidden // heads``."""
        return self.kv_heads * (self.hidden // self.heads)

    def linear_shapes(self) -> list[tuple[int, int]]:
        """``(in, out)`` of one layer's linear maps: q, k, v, o, gate, up, down."""
        h, kv, i = self.hidden, self.kv_width, self.intermediate
        return [(h, h), (h, kv), (h, kv), (h, h), (h, i), (h, i), (i, h)]

    def layer_parameters(self) -> int:
        """The parameters of one decoder layer: its linear layers, the q/k/v biases and two norms."""
        biases = (self.hidden + 2 * self.kv_width) if self.qkv_bias else 0
        return sum(a * b for a, b in self.linear_shapes()) + biases + 2 * self.hidden

    def parameters(self) -> int:
        """The model's parameters: embeddings (and an untied output layer), the layers and the final norm."""
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return embeddings + self.layers * self.layer_parameters() + self.hidden

    def lora_parameters(self, rank: int) -> int:
        """Adapters of rank ``rank`` on every linear map of every layer (peft's ``all-linear``)."""
        return self.layers * sum(rank * (a + b) for a, b in self.linear_shapes())

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelShape:
        """From a Hugging Face ``config.json`` (as a dict)."""
        heads = int(config["num_attention_heads"])
        return cls(
            hidden=int(config["hidden_size"]), layers=int(config["num_hidden_layers"]), heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads), intermediate=int(config["intermediate_size"]),
            vocab=int(config["vocab_size"]), tied=bool(config.get("tie_word_embeddings", False)),
            qkv_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
        )


@dataclass(frozen=True)
class RunShape:
    """What the plan depends on besides the model."""

    device: str  # "cuda" or "cpu"
    precision: Precision
    micro_batch: int
    sequence: int  # prompt + response tokens of one step
    lora_rank: int | None = None
    gradient_checkpointing: bool = False
    logprob_chunk: int = 512
    kl_reference: bool = False
    activation_offload: bool = False
    engine_fraction: float = 0.0  # of the GPU, taken by vLLM
    rollout_batch: int = 0  # episodes decoding side by side on the trainer's model (transformers backend)
    total_bytes: int = 0  # the device's memory (GPU) or the machine's (CPU)
    world_size: int = 1  # ranks the model is sharded over (FSDP2), one GPU each; the plan is one rank's
    rollout_copy: bool = False  # each rank plays with a full copy at the compute dtype (the trainer across ranks)
    value_heads: int = 0  # outputs of a learned critic's value head on the trunk (0: critic-free)
    value_prompt: int = 0  # prompt tokens of the value pass whose activations the backward keeps (0: none, detached)
    value_response: int = 0  # response tokens a second value pass reads beyond the prompt (HiPER's low head; 0: none)
    critic_model: bool = False  # the critic has a trunk of its own: a second copy of the model, trained
    optimizer: OptimizerState = ADAMW_STATE  # what the optimiser keeps per trainable value between steps

    def __post_init__(self) -> None:
        if not isinstance(self.world_size, int) or isinstance(self.world_size, bool) or self.world_size < 1:
            raise ValueError(f"--nproc: expected a positive number of ranks, got {self.world_size!r}")


# ----------------------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class MemoryItem:
    """One item of a plan: its name, its bytes, a note, and whether the trainer's own allocations hold it."""
    name: str
    bytes: float
    note: str = ""
    trainer: bool = True  # counted in the trainer's own allocations (torch.cuda.max_memory_allocated)


@dataclass
class MemoryPlan:
    """The predicted peak, item by item; :attr:`fits` compares it with the device's memory."""

    model: ModelShape
    run: RunShape
    items: list[MemoryItem] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)

    @property
    def trainer_bytes(self) -> float:
        """The bytes of the items the trainer allocates itself (``torch.cuda.max_memory_allocated``)."""
        return sum(item.bytes for item in self.items if item.trainer)

    @property
    def peak_bytes(self) -> float:
        """The predicted peak: the sum of every item."""
        return sum(item.bytes for item in self.items)

    @property
    def fits(self) -> bool:
        """Whether the predicted peak is within the device's memory."""
        return self.peak_bytes <= self.run.total_bytes

    def table(self) -> str:
        """The plan as a Markdown table, item by item, with the trainer's share and the peak."""
        where = "GPU" if self.run.device == "cuda" else "CPU (resident memory)"
        ranks = f", one rank of {self.run.world_size} (FSDP)" if self.run.world_size > 1 else ""
        lines = [f"memory plan, {where}{ranks}: {self.model.parameters() / 1e9:.2f}B parameters, micro-batch "
                 f"{self.run.micro_batch} x {self.run.sequence} tokens",
                 f"| {'item':<36} | {'GiB':>8} | note |", f"|{'-' * 38}|{'-' * 10}|------|"]
        for item in self.items:
            lines.append(f"| {item.name:<36} | {item.bytes / GIB:8.2f} | {item.note} |")
        lines.append(f"| {'trainer (torch allocations)':<36} | {self.trainer_bytes / GIB:8.2f} | |")
        lines.append(f"| {'peak':<36} | {self.peak_bytes / GIB:8.2f} | of {self.run.total_bytes / GIB:.1f} |")
        return "\n".join(lines)

    def refusal(self) -> str:
        """Why the run does not fit, with the changes that would make it fit."""
        text = (f"the run needs about {self.peak_bytes / GIB:.1f} GiB at its peak, more than the "
                f"{self.run.total_bytes / GIB:.1f} GiB there are (`ptgpo plan CONFIG` shows each part)")
        if self.advice:
            text += "; change: " + "; or ".join(self.advice)
        return text + " (run.memory_check: false runs it anyway)"


def _bytes(dtype: str) -> int:
    return DTYPE_BYTES[dtype]


def _activations(model: ModelShape, run: RunShape) -> list[MemoryItem]:
    """One micro-batch's activations kept for the backward, and autocast's weight copies."""
    p = run.precision
    kind = "float32" if p.autocast is None else ("lora" if run.lora_rank else "autocast")
    a, b, c, d = ACTIVATION_BYTES[kind]
    per_token_layer = a * model.hidden + b * model.intermediate + c * model.kv_width + d * (run.lora_rank or 0)
    tokens = run.micro_batch * run.sequence
    residual = _bytes(p.frozen if run.lora_rank else p.trainable)
    layer = tokens * per_token_layer
    if run.activation_offload:
        kept, note = 2 * layer, "offloaded to CPU memory: a layer's at a time on the GPU"
    elif run.gradient_checkpointing:
        kept, note = tokens * model.layers * residual * model.hidden + layer, "checkpointed: layer inputs + one layer"
    else:
        kept, note = model.layers * layer + layer, "every layer's, + one layer's backward"
    items = [MemoryItem("activations (one micro-batch)", kept, note)]
    if p.autocast is not None and not run.lora_rank and run.world_size == 1:
        copies = _bytes(p.autocast) * model.layers * model.layer_parameters()
        items.append(MemoryItem("autocast's bf16 weight copies", copies, "held until the forward's context ends"))
    return items


def _output_layer(model: ModelShape, run: RunShape) -> MemoryItem:
    chunk = min(run.logprob_chunk, run.micro_batch * run.sequence)
    total = LOGIT_TENSORS * 4 * chunk * model.vocab
    weight = model.vocab * model.hidden
    if run.precision.autocast is not None:
        total += _bytes(run.precision.autocast) * weight  # the weight cast for the products
    if not run.lora_rank:
        total += 4 * weight  # the float32 gradient accumulated over chunks
    return MemoryItem("output layer (chunked scores)", total, f"{chunk} positions x {model.vocab} at a time")


def _weights(model: ModelShape, run: RunShape) -> list[MemoryItem]:
    p = run.precision
    total = model.parameters()
    trainable = model.lora_parameters(run.lora_rank) if run.lora_rank else total
    frozen = total if run.lora_rank else 0
    n = run.world_size
    shard = f"1/{n} on each of {n} ranks" if n > 1 else ""
    items = [MemoryItem("trainable weights (float32)", 4 * trainable / n,
                        f"{trainable / 1e6:,.1f}M" + (f", {shard}" if shard else ""))]
    if frozen:
        items.append(MemoryItem(f"frozen base ({p.frozen})", _bytes(p.frozen) * frozen / n,
                                "LoRA's base model" + (f", {shard}" if shard else "")))
    items += [MemoryItem("gradients (float32)", 4 * trainable / n, shard),
              MemoryItem(run.optimizer.label, run.optimizer.bytes_per_value * trainable / n, shard)]
    if run.kl_reference and not run.lora_rank:
        items.append(MemoryItem(f"KL reference copy ({p.frozen})", _bytes(p.frozen) * total / n, shard))
    if n > 1:
        items.append(_gathered(model, run))
    if run.rollout_copy:
        items.append(MemoryItem(f"rollout copy ({p.compute})", _bytes(p.compute) * total,
                                "full weights on each rank, for its rollouts and evaluation"))
    return items


def _gathered(model: ModelShape, run: RunShape) -> MemoryItem:
    """FSDP's full copies, alive beside the shards: two decoder layers' parameters at the compute
    dtype (the one computing, the next one prefetched), the root unit's (embeddings, an untied
    output layer: gathered for the whole forward and backward), and one layer's gradient before
    its float32 reduce-scatter."""
    compute = _bytes(run.precision.compute)
    layer = model.layer_parameters()
    root = model.vocab * model.hidden * (1 if model.tied else 2) + model.hidden
    total = 2 * compute * layer + compute * root + 4 * layer
    return MemoryItem("FSDP gathered copies", total, "2 layers + embeddings/output layer + 1 layer's gradient")


def _critic(model: ModelShape, run: RunShape) -> list[MemoryItem]:
    """A learned critic's value head (float32 weights and gradients, the optimiser's state) and, when its
    loss reaches the trunk, its forward's activations over the micro-batch's prompts."""
    if not run.value_heads:
        return []
    optimizer = run.optimizer.optimizer
    per_value = 8 + run.optimizer.bytes_per_value
    items = [MemoryItem(f"value head (+ gradients, {optimizer})", per_value * (model.hidden + 1) * run.value_heads,
                        f"{run.value_heads} x ({model.hidden} + 1) float32 parameters")]
    if run.critic_model:
        own = _weights(model, dataclasses.replace(run, kl_reference=False, rollout_copy=False))
        items.append(MemoryItem(f"critic model (+ gradients, {optimizer})", sum(item.bytes for item in own),
                                "a copy of the policy's model, trained"))
    if run.value_prompt:
        prompts = dataclasses.replace(run, sequence=run.value_prompt)
        items.append(MemoryItem("value pass activations", _activations(model, prompts)[0].bytes,
                                f"the prompts' forward, {run.value_prompt} tokens each"))
        if run.value_response:
            tokens = run.value_prompt + run.value_response
            into = dataclasses.replace(run, sequence=tokens)
            items.append(MemoryItem("low value pass activations", _activations(model, into)[0].bytes,
                                    f"the prompts and responses up to </subgoal>, at most {tokens} tokens each"))
    return items


def plan_memory(model: ModelShape, run: RunShape) -> MemoryPlan:
    """The predicted peak of a run (see the module docstring), with advice when it does not fit."""
    plan = _itemised(model, run)
    if not plan.fits:
        plan.advice = advice(model, run)
    return plan


def _itemised(model: ModelShape, run: RunShape) -> MemoryPlan:
    """The plan's items, without advice."""
    plan = MemoryPlan(model, run, _weights(model, run) + _activations(model, run) + [_output_layer(model, run)])
    plan.items += _critic(model, run)
    if run.rollout_batch:
        kv = run.rollout_batch * run.sequence * model.layers * 2 * model.kv_width * _bytes(run.precision.compute)
        plan.items.append(MemoryItem("rollout KV cache (transformers)", kv, f"{run.rollout_batch} episodes"))
    trainer = plan.trainer_bytes
    plan.items.append(MemoryItem("allocator slack", FRAGMENTATION * trainer, f"{FRAGMENTATION:.0%}", trainer=False))
    plan.items.append(MemoryItem("CUDA context" if run.device == "cuda" else "Python runtime",
                                 RUNTIME_BYTES[run.device], trainer=False))
    if run.engine_fraction:
        plan.items.append(MemoryItem("vLLM engine (its share)", run.engine_fraction * run.total_bytes,
                                     f"gpu_memory_utilization {run.engine_fraction:g}", trainer=False))
    return plan


def advice(model: ModelShape, run: RunShape) -> list[str]:
    """What to change so that the run fits, each tried alone, in order of how little it changes."""
    def fits(**changes: Any) -> bool:
        return _itemised(model, dataclasses.replace(run, **changes)).fits

    out = []
    if not run.gradient_checkpointing and fits(gradient_checkpointing=True):
        out.append("policy.gradient_checkpointing: true")
    smaller = [m for m in range(run.micro_batch - 1, 0, -1) if fits(micro_batch=m)]
    if smaller:
        out.append(f"optim.micro_batch_size: {smaller[0]}")
    elif not run.gradient_checkpointing and fits(gradient_checkpointing=True, micro_batch=1):
        out.append("policy.gradient_checkpointing: true with optim.micro_batch_size: 1")
    if not run.activation_offload and fits(activation_offload=True):
        out.append("optim.activation_offload: true")
    if not run.lora_rank and fits(lora_rank=64):
        out.append("policy.lora: {r: 64} (adapters on a frozen base; the KL reference then costs nothing)")
    if run.kl_reference and not run.lora_rank and fits(kl_reference=False):
        out.append("optim.kl_coef: 0 (no reference copy)")
    if run.engine_fraction:
        lower = [f / 100 for f in range(int(run.engine_fraction * 100) - 1, 9, -1) if fits(engine_fraction=f / 100)]
        if lower:
            out.append(f"rollouts.vllm.gpu_memory_utilization: {lower[0]:.2f}")
    if run.logprob_chunk > 64 and fits(logprob_chunk=64):
        out.append("policy.logprob_chunk: 64")
    return out or [combined_advice(model, run)]


#: The changes :func:`combined_advice` applies one after another, the cheapest in speed first.
COMBINED_STEPS = (("policy.gradient_checkpointing: true", "gradient_checkpointing", True),
                  ("policy.lora: {r: 64}", "lora_rank", 64),
                  ("optim.micro_batch_size: 1", "micro_batch", 1),
                  ("optim.activation_offload: true", "activation_offload", True))


def combined_advice(model: ModelShape, run: RunShape) -> str:
    """When no change alone is enough: :data:`COMBINED_STEPS` applied cumulatively until the run fits
    (then the largest micro-batch that still fits), or what is left when even all of them are not."""
    changes: dict[str, Any] = {}
    names: list[str] = []
    for name, key, value in COMBINED_STEPS:
        if getattr(run, key) == value or (key == "lora_rank" and run.lora_rank):
            continue  # already so (a LoRA run keeps its rank)
        changes[key] = value
        names.append(name)
        if _itemised(model, dataclasses.replace(run, **changes)).fits:
            if "micro_batch" in changes:
                largest = max(m for m in range(1, run.micro_batch + 1)
                              if _itemised(model, dataclasses.replace(run, **{**changes, "micro_batch": m})).fits)
                names[names.index("optim.micro_batch_size: 1")] = f"optim.micro_batch_size: {largest}"
            return " with ".join(names)
    return ("a GPU with more memory, or a smaller model (even gradient checkpointing, LoRA, micro-batches "
            "of 1 and activation offload together do not fit)")


# ----------------------------------------------------------------------------------------- disk
@dataclass(frozen=True)
class DiskPlan:
    """What a run writes that grows with the model: ``checkpoint.pt`` (the trainable weights, float32,
    and the optimiser's state as ``optim.optimizer`` declares it: AdamW's two float32 moments, none for
    the built-in SGD) and
    ``final_model/`` (a LoRA run's adapters in float32, else the model at its compute dtype)."""

    checkpoint_bytes: int
    final_model_bytes: int

    @property
    def peak_bytes(self) -> int:
        """The most the run holds at once: a checkpoint is written beside the last one before it
        replaces it, and the final model beside the last checkpoint."""
        return 2 * self.checkpoint_bytes + self.final_model_bytes

    def refusal(self, folder: str, free_bytes: int) -> str:
        """The message of a run refused for want of disk in ``folder``."""
        return (f"{folder}: the run needs about {self.peak_bytes / GIB:.1f} GiB of free disk (checkpoint.pt "
                f"{self.checkpoint_bytes / GIB:.1f} GiB, written beside the last one, and final_model/ "
                f"{self.final_model_bytes / GIB:.1f} GiB); {free_bytes / GIB:.1f} GiB are free. Free some, set "
                "run.out_dir on a larger disk, or run.memory_check: false to go on anyway")


def plan_disk(model: ModelShape, run: RunShape) -> DiskPlan:
    """The :class:`DiskPlan` of ``model`` trained as ``run`` says."""
    trainable = model.lora_parameters(run.lora_rank) if run.lora_rank else model.parameters()
    trained = trainable * (2 if run.critic_model else 1) + (model.hidden + 1) * run.value_heads
    checkpoint = trained * (_bytes(run.precision.trainable) + run.optimizer.bytes_per_value)
    if run.lora_rank:
        final = trainable * _bytes(run.precision.trainable)
    else:
        final = model.parameters() * _bytes(run.precision.autocast or run.precision.trainable)
    return DiskPlan(checkpoint, final)


# ----------------------------------------------------------------------------------------- from a config
def model_shape(config) -> ModelShape:
    """The shape of a training config's model: the tiny model's from its spec (its vocabulary at most
    the spec's), any other from its ``config.json`` (a local folder, a pretrained model's converted
    folder, or the Hugging Face cache)."""
    spec = config.policy
    if spec.is_tiny:
        from ptgpo_algos.policy.tiny import TinyModelSpec

        tiny = TinyModelSpec(**spec.tiny)
        return ModelShape(hidden=tiny["hidden_size"], layers=tiny["num_hidden_layers"],
                          heads=tiny["num_attention_heads"], kv_heads=tiny["num_key_value_heads"],
                          intermediate=tiny["intermediate_size"], vocab=tiny["vocab_size"], tied=True)
    from transformers import AutoConfig

    from ptgpo_algos.policy.pretrained import resolve_model

    return ModelShape.from_config(AutoConfig.from_pretrained(resolve_model(spec.model)).to_dict())


def run_shape(config, device: str, total_bytes: int, world_size: int = 1) -> RunShape:
    """The :class:`RunShape` of a training config on ``device`` (``cuda...`` or ``cpu``) with
    ``total_bytes`` of memory, for one of ``world_size`` ranks (each plays its share of the tasks
    and of the evaluation episodes)."""
    spec, optim, rollouts = config.policy, config.optim, config.rollouts
    kind = "cuda" if device.startswith("cuda") else "cpu"
    checkpointing = spec.gradient_checkpointing
    if checkpointing is None:
        checkpointing = kind == "cuda" and not spec.is_tiny
    vllm_on_gpu = rollouts.backend == "vllm" and kind == "cuda"
    fraction = float(rollouts.vllm.get("gpu_memory_utilization", 0.3)) if vllm_on_gpu else 0.0
    rollout_batch = 0
    if rollouts.backend == "transformers" and spec.mode == "generate":
        tasks = -(-rollouts.tasks_per_iteration // world_size)
        rollout_batch = max(tasks * rollouts.group_size, -(-config.evaluation.batch_size // world_size))
    passes = value_passes(config.algorithm)
    return RunShape(
        device=kind, precision=precision_for(device, spec.dtype, spec.cpu_autocast), micro_batch=optim.micro_batch_size or optim.minibatch_size,
        sequence=spec.max_prompt_tokens + spec.max_new_tokens, lora_rank=int(spec.lora.get("r", 16)) if spec.lora else None,
        gradient_checkpointing=checkpointing, logprob_chunk=spec.logprob_chunk, kl_reference=optim.kl_coef > 0,
        activation_offload=optim.activation_offload, engine_fraction=fraction, rollout_batch=rollout_batch,
        total_bytes=total_bytes, world_size=world_size,
        rollout_copy=world_size > 1 and rollouts.backend == "transformers",
        value_heads=passes.heads if passes else 0,
        value_prompt=0 if config.algorithm.critic.detach_trunk else spec.max_prompt_tokens,
        value_response=spec.max_new_tokens if passes and passes.response_pass else 0,
        critic_model=passes is not None and not config.algorithm.critic.shared_trunk,
        optimizer=optimizer_state(optim.optimizer),
    )


def plan_for_config(config, device: str, total_bytes: int, world_size: int = 1) -> MemoryPlan:
    """:func:`plan_memory` for a training config, one rank's of ``world_size``."""
    return plan_memory(model_shape(config), run_shape(config, device, total_bytes, world_size))


def smallest_world_size(model: ModelShape, run: RunShape, most: int = 1024) -> int | None:
    """The fewest ranks (GPUs of ``run.total_bytes`` each) over which the run fits, at most ``most``;
    None when even ``most`` do not suffice (what does not shrink with ranks -- activations, the
    gathered layers, the engine's share -- is too large alone)."""
    if most < 1:
        raise ValueError(f"most must be >= 1, got {most}")
    for n in range(1, most + 1):
        if _itemised(model, dataclasses.replace(run, world_size=n)).fits:
            return n
    return None


def disk_plan_for_config(config, device: str) -> DiskPlan:
    """:func:`plan_disk` for a training config: nothing for ``final_model/`` when the run does not keep it."""
    plan = plan_disk(model_shape(config), run_shape(config, device, 0))
    return plan if config.run.keep_final_model else dataclasses.replace(plan, final_model_bytes=0)


def total_device_memory(device: str) -> int:
    """The memory of ``device``: the GPU's, or the machine's RAM for ``cpu``."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
