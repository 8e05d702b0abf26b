"""A model spec of the command line to a model: 'tiny', 'device-time:<N>ms' or a Hugging Face LLaMA folder."""
from pathlib import Path

import torch

from reference_impl.model.device_time import DeviceTimeModel, parse_device_time
from reference_impl.model.llama import TINY, LlamaModel, load_model, random_model


def resolve_model(spec: str, dtype=torch.float32, seed: int = 0) -> LlamaModel:
    """'tiny' (built in, random from `seed`), 'device-time:<N>ms' (device_time.py) or a path to a Hugging Face
    LLaMA folder."""
    step_s = parse_device_time(spec)
    if step_s is not None:
        return DeviceTimeModel(step_s, seed=seed)
    if spec == "tiny":
        return random_model(TINY, seed, dtype)
    return load_model(spec, dtype)


def model_folder(spec: str) -> Path | None:
    """The folder behind a spec that has one (with a tokenizer where the folder has one): 'tiny' -> the tiny model
    folder built on first use (tiny_folder.py; its weights are `resolve_model('tiny')`'s), a path -> itself;
    other specs (random or device-time models) have none."""
    if spec == "tiny":
        from reference_impl.model.tiny_folder import tiny_folder
        return tiny_folder()
    if parse_device_time(spec) is not None:
        return None
    return Path(spec)
