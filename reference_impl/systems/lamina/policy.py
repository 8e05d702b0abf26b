"""Lamina's policy on the simulator: the default dispatch (most free memory device pool, capacity check) with no
gManager rounds (no pooling), and the run's counters of its pools and network (LaminaBackend's) at the end."""
from reference_impl.sim.policy import Policy


class LaminaPolicy(Policy):
    def finish(self) -> None:
        cluster, c = self.cluster, self.cluster.backend.counters
        result = cluster.result
        end_s = max(cluster.now_s(), max(result.step_end_s, default=0.0))  # steps are handled as they start
        span_s = (end_s - (cluster.start_s or 0.0)) * self.config.engine.num_instances
        tokens = sum(result.step_tokens)
        moved = max(1, c.kv_moves)
        result.design_counters.update({
            "network_bytes_per_token": c.network_bytes / tokens if tokens else 0.0,
            "compute_busy_frac": sum(c.compute_busy_s) / span_s if span_s > 0 else 0.0,
            "memory_pool_busy_frac": sum(c.memory_busy_s) / span_s if span_s > 0 else 0.0,
            "kv_move_s": c.kv_move_s,
            "kv_move_s_per_request": c.kv_move_s / moved,
            "kv_move_frac": c.kv_move_s / span_s if span_s > 0 else 0.0,  # of the compute devices' time
            "pipelined_step_frac": c.pipelined_steps / c.decode_steps if c.decode_steps else 0.0,
        })
