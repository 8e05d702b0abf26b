"""What `repro serve` serves: the server's knobs (ServerConfig) and the model, tokenizer and engine they make."""
from dataclasses import dataclass, replace
from pathlib import Path

from reference_impl.control.engine_config import GMANAGER_INTERVAL_S, EngineConfig, GManagerConfig
from reference_impl.control.engine_run import EngineRun
from reference_impl.errors import InputError


@dataclass(frozen=True, slots=True)
class ServerConfig:
    model: str = "tiny"  # 'tiny' (the tiny folder, with a tokenizer), a model folder, or 'device-time:<N>ms'
    served_model_name: str | None = None  # the id clients send as `model` (default: --model as given)
    host: str = "127.0.0.1"
    port: int = 8000
    backend: str = "local"  # or "ray": each instance a Ray actor (backends/ray/)
    ray_address: str | None = None  # with backend "ray": a cluster to join (None: start a private Ray here)
    ray_cpus: int = 2  # CPUs of a private Ray
    num_instances: int = 2
    blocks_per_instance: int = 64
    block_size: int = 16
    max_batch_size: int = 64
    pooling: bool = True
    chunked_prefill_tokens: int | None = None  # each step decodes and prefills prompt chunks in this budget
    system: str | None = None  # a serving design (systems/catalog.py) in place of `pooling`; None: by `pooling`
    max_queue: int = 256  # requests waiting for their first token before new ones get 503
    default_max_tokens: int = 16  # when a request gives none (the OpenAI completions default)
    seed: int = 0
    gmanager_interval_s: float = GMANAGER_INTERVAL_S  # a pooled engine's rounds (a design without rounds: none)

    def __post_init__(self):
        if self.max_queue < 1 or self.default_max_tokens < 1:
            raise InputError("--max-queue and --default-max-tokens must be >= 1")
        if self.backend not in ("local", "ray"):
            raise InputError(f"unknown backend {self.backend!r}: choose local or ray")

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model

    def ray_config(self):
        from reference_impl.backends.ray.cluster import RayConfig
        return RayConfig(address=self.ray_address, num_cpus=self.ray_cpus)

    def engine_config(self) -> EngineConfig:
        return self.engine_run().config

    def engine_run(self) -> EngineRun:
        """The engine this server runs: `system`'s run on `backend` (its config, placement, the instances requests
        go to, its move rule), or the pooled engine (`pooling` off: vLLM-M's) when no system is named."""
        if self.system is None:
            return EngineRun(EngineConfig(num_instances=self.num_instances, blocks_per_instance=self.blocks_per_instance,
                                          block_size=self.block_size, max_batch_size=self.max_batch_size,
                                          pooling=self.pooling, chunked_prefill_tokens=self.chunked_prefill_tokens,
                                          seed=self.seed,
                                          gmanager=GManagerConfig(interval_s=self.gmanager_interval_s)))
        from reference_impl.systems.catalog import design

        if self.chunked_prefill_tokens is not None:
            raise InputError("--chunked-prefill-tokens is the pooled engine's: not with --system")
        run = design(self.system).real_run(self.backend, self.num_instances, self.blocks_per_instance,
                                           self.block_size, max_batch_size=self.max_batch_size, seed=self.seed)
        if self.backend == "local" and (run.homes is not None or run.moves is not None):
            raise InputError(f"--system {self.system} is served with --backend ray: the local server runs a "
                             "design's placement, not its dispatch or moves")
        if not run.config.runs_gmanager_rounds:
            return run
        gmanager = replace(run.config.gmanager, interval_s=self.gmanager_interval_s)
        return replace(run, config=replace(run.config, gmanager=gmanager))


@dataclass(frozen=True)
class ServedModel:
    name: str
    model: object  # LlamaModel (or a device-time model)
    tokenizer: object | None  # TextTokenizer, or None: token-id prompts only
    root: str | None  # the folder it came from
    max_model_len: int  # prompt + generated tokens one request may reach in this cluster


def max_model_len(run: EngineRun) -> int:
    """The most tokens one request may hold (EngineRun.room_blocks, in tokens)."""
    return run.room_blocks() * run.config.block_size


def load_served(config: ServerConfig) -> ServedModel:
    """The model of `config.model` and, where its folder has one, its tokenizer."""
    from reference_impl.model.llama import load_model
    from reference_impl.model.resolve import model_folder, resolve_model
    from reference_impl.model.tokenizer import load_tokenizer

    folder = model_folder(config.model)
    if folder is None:
        model, tokenizer = resolve_model(config.model, seed=config.seed), None
    else:
        if not Path(folder).is_dir():
            raise InputError(f"--model {config.model!r}: no such folder; pass 'tiny' or a Hugging Face LLaMA folder")
        model, tokenizer = load_model(folder), load_tokenizer(folder)
    return ServedModel(config.model_name, model, tokenizer, None if folder is None else str(folder),
                       max_model_len(config.engine_run()))
