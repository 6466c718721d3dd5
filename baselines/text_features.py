"""Fixed-size numeric views of text states, for agents that are not language models (SB3's MLPs).

:class:`HashedBagOfWords` maps a text to a vector of word counts hashed into ``dims`` buckets
(the "hashing trick"). The hash is ``zlib.crc32`` of the UTF-8 word, not Python's ``hash()``, so a
word lands in the same bucket in every process and every run (``hash()`` is salted per process).

:class:`SlotFeaturizer` builds the whole observation of a text-environment state for a policy that
chooses among *admissible-action slots*: the task, the current observation, and one small vector per
slot describing the action in it, so the network can tell what each slot would do.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["HashedBagOfWords", "SlotFeaturizer", "words"]

_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    """Lower-cased alphanumeric words of ``text`` (punctuation and whitespace separate words)."""
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class HashedBagOfWords:
    """Word counts hashed into ``dims`` buckets and scaled to unit L2 norm (all zeros for no words).

    Unit norm keeps long observations from drowning short ones and bounds every entry in ``[0, 1]``.
    """

    dims: int = 256

    def __post_init__(self) -> None:
        if not isinstance(self.dims, int) or self.dims < 1:
            raise ValueError(f"dims must be a positive integer, got {self.dims!r}")

    def bucket(self, word: str) -> int:
        """The hash bucket of ``word`` (CRC32, stable across processes)."""
        return zlib.crc32(word.encode("utf-8")) % self.dims

    def __call__(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dims, dtype=np.float32)
        for word in words(text):
            vector[self.bucket(word)] += 1.0
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm > 0 else vector


@dataclass(frozen=True)
class SlotFeaturizer:
    """``[task | observation | slot_0 | ... | slot_{max_slots-1} | present]`` as one float32 vector.

    ``task`` and ``observation`` each take ``text_dims`` hashed entries; each slot takes
    ``slot_dims`` hashed entries of its action's words; ``present`` holds one 0/1 flag per slot saying
    whether an admissible action fills it. Actions beyond ``max_slots`` are not represented (the
    policy cannot pick them); :meth:`truncated` tells whether that happened.
    """

    max_slots: int = 32
    text_dims: int = 256
    slot_dims: int = 32

    def __post_init__(self) -> None:
        for name in ("max_slots", "text_dims", "slot_dims"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

    @property
    def size(self) -> int:
        """The length of a feature vector."""
        return 2 * self.text_dims + self.max_slots * (self.slot_dims + 1)

    def truncated(self, admissible: Sequence[str]) -> bool:
        """Whether some admissible actions do not fit in the slots."""
        return len(admissible) > self.max_slots

    def __call__(self, task: str, observation: str, admissible: Sequence[str]) -> np.ndarray:
        text = HashedBagOfWords(self.text_dims)
        slot = HashedBagOfWords(self.slot_dims)
        slots = np.zeros((self.max_slots, self.slot_dims), dtype=np.float32)
        present = np.zeros(self.max_slots, dtype=np.float32)
        for k, action in enumerate(admissible[: self.max_slots]):
            slots[k] = slot(action)
            present[k] = 1.0
        return np.concatenate([text(task), text(observation), slots.reshape(-1), present])
