"""The Ray engine's own step times, for the pooled arm's cost model: the step overhead the simulator adds to the
layer terms is fitted to the steps of the engine that serves the arm (calibration/engine_steps.py, as for real
vLLM), not to the in-process engine's that `repro profile` steps. A Ray instance's step does more than the local
engine's (its mailbox served at every layer, the data plane's step plan, its results and heartbeat calls): alone on
this machine it computes 1.12-1.16x what the local engine's calibration predicts at batches 1-8.

Measured on one Ray instance (pooling off, so nothing is shared), closed loop: `batch` requests of `prompt_len`
tokens, once generating one token (the run is a prefill step of `batch` prompts) and once generating `1 + decode`
(the same prefill and `decode` decode steps); a decode step is the difference of the two runs' loop CPU time
(control and compute phases) over the difference of their steps. CPU time, as the op-level profile: what a step
costs its core, not the wait for one (the co-run term covers that)."""
import numpy as np

from reference_impl.backends.ray import RayEngine
from reference_impl.backends.ray.serving import loop_stats
from reference_impl.calibration.engine_steps import DecodeStep, PrefillStep
from reference_impl.control.engine import EngineConfig
from reference_impl.control.sequence import Sequence, num_blocks_for



class RaySteps:
    """A one-instance Ray engine kept between measurements (paused in between)."""

    def __init__(self, model, ray_config, *, max_batch: int, prompt_len: int, decode: int, block_size: int,
                 seed: int = 0):
        self.prompt_len, self.decode = prompt_len, decode
        blocks = max_batch * num_blocks_for(prompt_len + decode + 1, block_size) + 1
        config = EngineConfig(1, blocks, block_size=block_size, max_batch_size=max_batch, pooling=False, seed=seed)
        self.engine = RayEngine(config, model, ray_config)
        self.rng = np.random.default_rng(seed)
        self.vocab = model.config.vocab_size
        self.next_id = 0
        # KV tokens a request holds in its decode steps, on average: what the simulator counts (blocks x size)
        self.decode_kv_tokens = block_size * float(np.mean([num_blocks_for(prompt_len + i, block_size)
                                                            for i in range(1, decode + 1)]))
        self.totals = (0.0, 0)  # the loop's CPU seconds and steps as of the last run's end

    def _totals(self) -> tuple[float, int]:
        stats = loop_stats(self.engine)[0]
        return stats.control_cpu_s + stats.compute_cpu_s, stats.num_steps

    def _run(self, batch: int, new_tokens: int) -> tuple[float, int]:
        """(loop CPU seconds, steps) of `batch` requests generating `new_tokens` each (an idle loop adds to
        neither, so the last run's end is this one's start)."""
        for _ in range(batch):
            prompt = self.rng.integers(0, self.vocab, self.prompt_len).tolist()
            self.engine.add_request(Sequence(self.next_id, prompt, new_tokens), 0)
            self.next_id += 1
        self.engine.run()
        (cpu_s, steps), self.totals = self.totals, self._totals()
        return self.totals[0] - cpu_s, self.totals[1] - steps

    def measure(self, batches, repeats: int) -> tuple[list[DecodeStep], list[PrefillStep]]:
        """Per batch and repeat, one decode step (at the mean KV of its decode steps) and one prefill step."""
        self.engine.resume()
        decode, prefill = [], []
        try:
            self.totals = self._totals()
            self._run(max(batches), 2)  # warm-up
            for _ in range(repeats):
                for b in batches:
                    one_s, one_steps = self._run(b, 1)
                    many_s, many_steps = self._run(b, 1 + self.decode)
                    prefill.append(PrefillStep(b, self.prompt_len, one_s / max(1, one_steps)))
                    if many_steps > one_steps:
                        decode.append(DecodeStep(b, int(b * self.decode_kv_tokens),
                                                 (many_s - one_s) / (many_steps - one_steps)))
        finally:
            self.engine.pause()
        return decode, prefill

    def close(self) -> None:
        self.engine.shutdown()
