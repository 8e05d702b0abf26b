"""The serving-curve machinery of the serving experiments (e2e, e2e-datasets, sensitivity): the simulated points
and how they run (tasks), the curve method (curves), the plateau rule (plateau), figures and claims, and the same
curves served for real on Ray (on_ray)."""
