"""A config section's fields: their help text, command-line flag and flat name, and how a message names one.

Every section of the run config (:class:`~ptgpo_algos.config.TrainConfig`) is a frozen dataclass whose
fields are made by :func:`option`; the section lives beside the stage it configures and checks
its own fields when built. Older config files and run folders spell fields by flat names
(``learning_rate``), which a field's metadata records (:func:`flat_name`); a message names a field by its
path and that flat name (:func:`field_labels`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, Callable, Mapping

__all__ = ["field_labels", "flat_name", "option"]


def option(default: Any = None, help: str = "", *, flat: str | bool = True, flag: str | None = None,
                  factory: Any = None) -> Any:
    """A section field with its help text, its command-line flag and the name flat config files spell
    it by (``True``: its own name; a string: an older name; ``False``: none, the field came later)."""
    metadata = {"help": help, "flat": flat, "flag": flag}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def flat_name(option: dataclasses.Field) -> str | None:
    """The name a flat config file spells a section field by, from its metadata (None: it has none)."""
    flat = option.metadata.get("flat", True)
    return option.name if flat is True else flat or None



def field_labels(sections: Mapping[str, type]) -> Callable[[str], str]:
    """How messages name a field of these sections (name -> class) by its path ``section.field``: the
    path, and the flat name files spell it by, e.g. ``optim.lr (learning_rate)``."""

    def label(path: str) -> str:
        section, _, name = path.partition(".")
        flat = flat_name({f.name: f for f in dataclasses.fields(sections[section])}[name])
        return f"{path} ({flat})" if flat else path

    return label
