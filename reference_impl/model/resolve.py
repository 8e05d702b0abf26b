"""A model spec of the command line to a model: 'tiny', 'device-time:<N>ms' or a Hugging Face LLaMA folder."""
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
