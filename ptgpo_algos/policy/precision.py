"""Which precision each kind of tensor has: trainable weights, frozen weights, and the forward passes.

Trainable weights and their optimiser state are always float32. AdamW's step at the learning rates
of LLM RL (1e-6) is below half a bf16 ulp for most weights, so updates to bf16 weights round away
(measured: 100 AdamW steps at 1e-6 on a 1000 x 1000 matrix of scale 0.02 changed 1.9 % of its
entries in bf16, every entry in float32, which moved 100 times as far on average). The configured ``policy.dtype`` is the *compute* precision: on a GPU
the forward passes run under ``torch.autocast`` at that dtype (the matrix products in bf16 from the
float32 weights), and weights that never train (a LoRA model's base, the KL reference's copy) are
stored at it, which halves their memory.

On a CPU the forward passes run in float32 whatever the dtype says, and every weight is stored in
float32: CPUs without bf16 units run bf16 matrix products several times slower than float32 ones
(measured on this project's AVX2 machines: 1.5 against 12 GFLOP/s a core), and the CPU path serves
tests and rehearsals of the GPU path's shapes, not speed. ``policy.cpu_autocast`` asks for the GPU's
precision on a CPU that has bf16 units (AMX, avx512_bf16): there bf16 autocast makes the update's
forward and backward passes faster too (``scripts/bench_smollm2.py --cpu-autocast``). float16 compute needs loss scaling to
train, which the trainer does not do, so training configs take bfloat16 or float32.

Rollouts and evaluations may compute at another dtype (``policy.rollout_dtype``,
:func:`rollout_autocast`): on a CPU with bf16 units (AMX or avx512_bf16) bf16 autocast plays them
several times as fast (SmolLM2-135M, 32 episodes side by side on 2 Sapphire Rapids cores: 1.4-3.5x
in ``choose`` mode and 2-2.4x in ``generate`` mode, as other jobs loaded the machine more or less;
docs/training/pretrained.md), while the update keeps its own precision and recomputes pi_old there,
so the importance ratios stay at the update's precision.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DTYPE_BYTES", "Precision", "float32_rollouts", "precision_for", "rollout_autocast"]

#: Bytes per element of the dtypes a config names.
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Precision:
    """Dtype names: ``trainable`` weights (and their gradients and optimiser state), ``frozen`` weights,
    and ``autocast``, the dtype forward passes run at (None: at the weights' own, no autocast)."""

    trainable: str
    frozen: str
    autocast: str | None

    @property
    def compute(self) -> str:
        """The dtype matrix products run at."""
        return self.autocast or self.trainable


def precision_for(device: str, dtype: str, cpu_autocast: bool = False) -> Precision:
    """The precision of a policy on ``device`` (``cpu``, ``cuda``, ``cuda:N``) configured with ``dtype``
    (``auto``: bf16 on GPUs, float32 on CPUs); ``cpu_autocast`` gives a CPU a GPU's precision (bf16
    unless ``dtype`` says float32). See the module docstring."""
    if dtype not in ("auto", *DTYPE_BYTES):
        raise ValueError(f"dtype: expected auto, {', '.join(DTYPE_BYTES)}, got {dtype!r}")
    as_gpu = device.startswith("cuda") or cpu_autocast
    compute = ("bfloat16" if as_gpu else "float32") if dtype == "auto" else dtype
    if not as_gpu or compute == "float32":
        return Precision("float32", "float32", None)
    return Precision("float32", compute, compute)


def rollout_autocast(precision: Precision, rollout_dtype: str | None) -> str | None:
    """The autocast dtype rollouts and evaluations run at: ``rollout_dtype`` (None for float32, the
    trainable weights' own), or the update's when it is None."""
    if rollout_dtype is None:
        return precision.autocast
    if rollout_dtype not in DTYPE_BYTES:
        raise ValueError(f"rollout_dtype: expected {', '.join(DTYPE_BYTES)} or None, got {rollout_dtype!r}")
    return None if rollout_dtype == precision.trainable else rollout_dtype


def float32_rollouts(precision: Precision, rollout_dtype: str | None) -> bool:
    """Whether a policy's rollouts record the update's own float32 scores: neither its forward passes
    (``precision``) nor its rollouts' (``rollout_dtype``) run under autocast."""
    return precision.autocast is None and rollout_autocast(precision, rollout_dtype) is None
