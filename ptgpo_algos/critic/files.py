"""The critic beside the trained policy in ``final_model/``: :data:`CRITIC_FILE`, safetensors (tensors
only, nothing a reader would execute), so that a run that starts from that folder (``policy.model:
<run>/final_model``) with a critic takes it back instead of a head at zero. Evaluation reads the policy
alone and ignores it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

__all__ = ["CRITIC_FILE", "load_saved_critic", "save_critic"]

#: The critic's weights in a saved model folder: ``head.*`` (the value head) and, for a critic model of
#: its own (``shared_trunk: false``), ``trunk.*`` (its trainable weights).
CRITIC_FILE = "critic.safetensors"


def save_critic(critic: Any, folder: Path) -> None:
    """Write ``critic``'s weights (:meth:`~ptgpo_algos.critic.component.Critic.state_dict`) to
    ``folder / CRITIC_FILE``."""
    state = critic.state_dict()
    tensors = {f"head.{name}": value for name, value in state["head"].items()}
    # Tied weights share storage, which safetensors refuses: each is written as a copy of its own.
    tensors.update({f"trunk.{name}": value.contiguous().clone() for name, value in (state["trunk"] or {}).items()})
    save_file(tensors, str(folder / CRITIC_FILE))


def load_saved_critic(critic: Any, folder: str | Path) -> bool:
    """Load ``folder / CRITIC_FILE`` into ``critic`` when ``folder`` holds one; whether it did. A file
    that does not fit (another width, a trunk of its own where this critic has none, or the reverse)
    raises ``ValueError`` naming it."""
    path = Path(folder) / CRITIC_FILE
    if not path.is_file():
        return False
    tensors = load_file(str(path))
    head = {name[len("head."):]: value for name, value in tensors.items() if name.startswith("head.")}
    trunk = {name[len("trunk."):]: value for name, value in tensors.items() if name.startswith("trunk.")} or None
    try:
        with torch.no_grad():
            critic.load_state_dict({"head": head, "trunk": trunk})
    except (KeyError, RuntimeError) as error:
        raise ValueError(f"{path}: the saved critic does not fit this run's ({str(error).splitlines()[0][:200]}); "
                         "set algorithm.critic as the run that saved it had it, or remove the file") from None
    return True
