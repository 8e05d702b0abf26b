"""Llumnix (OSDI'24, arXiv 2406.03243): vLLM-M's instances (KV whole on one instance), requests dispatched to
the freest instance and migrated live between instances by pre-copy (policy.py, migration.py). Run for real:
local.py on the local engine, on_engine.py on Ray."""
from reference_impl.systems.design import Design
from reference_impl.systems.llumnix.knobs import LlumnixKnobs
from reference_impl.systems.llumnix.on_engine import engine_run
from reference_impl.systems.llumnix.policy import LlumnixBackend, LlumnixPolicy
from reference_impl.systems.vllm_m import vllm_m

DESIGN = Design("llumnix", "vLLM-M's instances, freest-instance dispatch and live migration of running requests",
                configure=vllm_m, policy=LlumnixPolicy, backend=LlumnixBackend, on_engine=engine_run,
                knobs=LlumnixKnobs)
