"""Lamina (lamina.txt): attention offloading. Compute devices (the base cluster's GPUs) hold the weights and run
every layer but attention; memory devices (lamina Table 1's RTX 3090) hold the KV and run decode attention; each
layer sends q, k, v over the network and gets the attention output back; rotational pipelining of micro-batches
overlaps the three (step_cost.py); prefill runs on the compute devices and its KV moves to the memory devices."""
from reference_impl.systems.design import Design
from reference_impl.systems.lamina.backend import LaminaBackend
from reference_impl.systems.lamina.cluster import LaminaKnobs, chosen, configure, memory_devices
from reference_impl.systems.lamina.local import engine_run
from reference_impl.systems.lamina.policy import LaminaPolicy

DESIGN = Design("lamina", "attention offloaded to memory devices holding the KV, micro-batches pipelined",
                configure=configure, policy=LaminaPolicy, backend=LaminaBackend, on_engine=engine_run,
                memory_devices=memory_devices, knobs=LaminaKnobs, chosen=chosen)
