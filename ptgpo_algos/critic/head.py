"""The value head: a linear map from the policy's last hidden state to ``n_values`` values."""

from __future__ import annotations

import torch

__all__ = ["ValueHead", "hidden_size"]


class ValueHead(torch.nn.Module):
    """``V(s) = W h + b`` with ``h`` the trunk's last hidden state at the prompt's last token
    (``(batch, hidden)`` in, ``(batch, n_values)`` out). Starts at zero: every value is 0 before the
    first update, and building it draws nothing from torch's random generator (a run with a critic
    plays its first iteration as the same run without one would)."""

    def __init__(self, hidden: int, n_values: int = 1):
        super().__init__()
        if hidden < 1 or n_values < 1:
            raise ValueError(f"ValueHead: hidden ({hidden}) and n_values ({n_values}) must be >= 1")
        self.weight = torch.nn.Parameter(torch.zeros(n_values, hidden))
        self.bias = torch.nn.Parameter(torch.zeros(n_values))

    @property
    def n_values(self) -> int:
        """How many values the head outputs per state."""
        return int(self.bias.shape[0])

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        """``(batch, n_values)`` values of ``(batch, hidden)`` states (computed in float32)."""
        return torch.nn.functional.linear(states.float(), self.weight, self.bias)


def hidden_size(model) -> int:
    """The width of ``model``'s last hidden state (a multimodal config's text model's)."""
    config = model.config
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(config.hidden_size)
