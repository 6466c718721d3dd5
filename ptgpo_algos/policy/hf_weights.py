"""The transformers policy's weights: what trains, the full weights a rollout engine is sent (LoRA
adapters merged into copies), the KL reference, and saving with the acting settings a loaded policy
takes back. :class:`PolicyWeights` is that half of :class:`~ptgpo_algos.policy.hf.CausalLMPolicy`."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Iterator, TypeVar

import torch

__all__ = ["POLICY_SETTINGS_FILE", "SAVED_SETTINGS", "PolicyWeights", "saved_policy_settings"]

#: Written by :meth:`PolicyWeights.save_pretrained` beside the weights; read back by ``from_pretrained``.
POLICY_SETTINGS_FILE = "ptgpo_policy.json"
SAVED_SETTINGS = ("mode", "score", "temperature", "history_length", "max_prompt_tokens", "max_new_tokens",
                  "prompt_template", "require_think", "plan_format")


def saved_policy_settings(name_or_path: str | Path) -> dict[str, Any]:
    """The acting settings a saved policy folder records (empty for a plain model folder or a hub name).

    A policy acts on the prompt it was trained on: loading it with other settings (another history
    length, ``choose`` for a ``generate`` policy) silently changes what it does.
    """
    path = Path(name_or_path) / POLICY_SETTINGS_FILE
    if not path.is_file():
        return {}
    saved = json.loads(path.read_text())
    return {key: saved[key] for key in SAVED_SETTINGS if key in saved}


_Policy = TypeVar("_Policy", bound="PolicyWeights")


class PolicyWeights:
    """The policy's parameters, weight export and import, reference copy and saving."""

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """The trainable parameters (the LoRA adapters' with LoRA)."""
        return (p for p in self.model.parameters() if p.requires_grad)

    def named_trainable(self) -> dict[str, torch.nn.Parameter]:
        """The trainable parameters by name."""
        return {n: p for n, p in self.model.named_parameters() if p.requires_grad}

    def export_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The full model's weights under the base model's names, ``state_dict`` style.

        A LoRA policy's adapters are merged into *copies* of the base weights, one layer at a time
        (the sum in float32, stored at the base's dtype): the model itself is never touched, so its
        frozen base stays exactly as loaded (merging in place and back in bf16 would perturb it at
        every sync).
        """
        if not self.has_adapters:
            for name, tensor in self.model.state_dict().items():
                yield name, tensor.detach()
            return
        base = self.model.get_base_model()
        modules = dict(base.named_modules())
        with torch.no_grad():
            for name, tensor in base.state_dict().items():
                if "lora_" in name:
                    continue
                owner, _, leaf = name.rpartition(".")
                layer = modules.get(owner.removesuffix(".base_layer")) if owner.endswith(".base_layer") else None
                if leaf == "weight" and layer is not None and hasattr(layer, "get_delta_weight"):
                    delta = sum(layer.get_delta_weight(a).float() for a in layer.active_adapters if a in layer.lora_A)
                    tensor = (tensor.float() + delta).to(tensor.dtype)
                yield name.replace(".base_layer", ""), tensor.detach()

    def save_adapter(self, folder: str | Path) -> None:
        """A LoRA policy's adapters alone, in peft's format (what vLLM's LoRA support loads)."""
        if not self.has_adapters:
            raise ValueError("save_adapter: this policy trains no LoRA adapters")
        self.model.save_pretrained(str(folder))

    @property
    def lora_rank(self) -> int | None:
        """The adapters' rank (None without adapters)."""
        return int(self.model.peft_config["default"].r) if self.has_adapters else None

    def tied_weights(self) -> dict[str, str]:
        """``{alias: name}`` of the weights :meth:`export_weights` yields twice as one tensor (a
        tied-embedding model's ``lm_head.weight`` is its embedding), by the base model's names."""
        seen: dict[tuple[int, tuple[int, ...]], str] = {}
        aliases = {}
        for name, tensor in self._base().state_dict().items():
            if "lora_" in name:
                continue
            key = (tensor.data_ptr(), tuple(tensor.shape))
            if key in seen:
                aliases[name.replace(".base_layer", "")] = seen[key]
            else:
                seen[key] = name.replace(".base_layer", "")
        return aliases

    def load_weights(self, weights: Iterator[tuple[str, torch.Tensor]], aliases: dict[str, str] | None = None) -> None:
        """Take ``(name, tensor)`` pairs, ``state_dict`` style; ``aliases`` (``{alias: name}``) fill tied
        weights that were not sent."""
        state = dict(weights)
        for alias, source in (aliases or {}).items():
            state.setdefault(alias, state[source])
        self.model.load_state_dict(state, strict=True)

    def reference_policy(self: _Policy) -> _Policy:
        """The KL term's reference, frozen at the current weights. A LoRA policy's is the same model
        with its adapters switched off (peft's ``disable_adapter``: the base weights, no copy);
        otherwise a copy stored at the frozen dtype."""
        clone = copy.copy(self)
        if self.has_adapters:
            clone.adapters_disabled = True
            return clone
        clone.model = copy.deepcopy(self.model).to(self.frozen_dtype)
        for p in clone.model.parameters():
            p.requires_grad_(False)
        return clone

    def save_pretrained(self, folder: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """Save the model and tokenizer, with the acting settings in ``ptgpo_policy.json``.

        A LoRA policy saves its adapters alone (float32, peft's format, the base model's name in
        ``adapter_config.json``): merging them into a bf16 base would round small trained deltas away,
        and a merged 7B model weighs 15 GB. A fully trained model is saved at its compute dtype (bf16 on
        GPUs: half the float32 masters' size), as it is served. ``state_dict``: the weights to save in
        place of the model's own, by its names (a sharded model's, gathered from the shards; a LoRA
        policy's adapters)."""
        folder = Path(folder)
        if self.has_adapters:
            self.model.save_pretrained(folder, state_dict=state_dict)
        else:
            dtype = self.autocast_dtype
            state = state_dict
            if dtype is not None:
                source = self.model.state_dict() if state is None else state
                state = {k: v.detach().to(dtype) for k, v in source.items()}
            self.model.save_pretrained(folder, state_dict=state)
        self.tokenizer.save_pretrained(folder)
        from ptgpo_algos.policy.tiny import TINY_MARKER

        source = Path(getattr(self.model, "name_or_path", "") or "")
        if (source / TINY_MARKER).exists():
            (folder / TINY_MARKER).write_text((source / TINY_MARKER).read_text())
        template = None if self.prompts.template is None else self.prompts.template.to_mapping()
        values = (self.mode, self.score_mode, self.temperature, self.prompts.history_length,
                  self.prompts.max_tokens, self.max_new_tokens, template, self.require_think, self.plan_format)
        settings = dict(zip(SAVED_SETTINGS, values, strict=True))
        (folder / POLICY_SETTINGS_FILE).write_text(json.dumps(settings, indent=1))
