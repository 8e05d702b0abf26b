"""Prefill/decode disaggregation (DistServe OSDI'24; Splitwise, Mooncake): the cluster's GPUs split into prefill
and decode instances, each with its own parallelism (configure.py), the split chosen per workload by the calibrated
cost model (split.py); a request is prefilled on one and decoded on the other after its KV moves over the link
(policy.py, events.py), each side priced on its own shape (backend.py). Run for real: local.py on the local engine,
hand_over.py on Ray."""
from reference_impl.systems.design import Design
from reference_impl.systems.pd_disagg.backend import PDBackend
from reference_impl.systems.pd_disagg.configure import chosen, pd_disaggregation
from reference_impl.systems.pd_disagg.hand_over import engine_run
from reference_impl.systems.pd_disagg.knobs import PDKnobs, fitted_to
from reference_impl.systems.pd_disagg.policy import PDPolicy

DESIGN = Design("pd-disaggregation", "prefill and decode instances of their own parallelism, KV moved after prefill",
                configure=pd_disaggregation, policy=PDPolicy, backend=PDBackend, on_engine=engine_run,
                knobs=PDKnobs, chosen=chosen, workload_knobs=fitted_to)
