"""What a designs run costs: CPU seconds per point and design (from the run's task graph: points run now and
stored ones at the CPU time they took when run), and the wall time its graph predicts on N cores (list
scheduling, repro/benchmarks/schedule.py), i.e. what a Ray fan-out (`--address`) of that many CPUs would take."""
import numpy as np

from repro.benchmarks.schedule import critical_path, schedule_s

CORES = (1, 2, 16, 64)


def run_cost(nodes, experiment: str) -> dict:
    """The cost record of designs.schema.json from the nodes of `experiment` in a sweep's graph
    (repro/serving/task_graph.py; on `repro figures`' shared sweep, other experiments' nodes are there too)."""
    nodes, after = own_nodes(nodes, experiment)
    simulated = [n for n in nodes if n.how in ("run", "stored")]
    per_design = {}
    for system in dict.fromkeys(n.system for n in simulated):
        cpu = [n.cpu_s for n in simulated if n.system == system]
        per_design[system] = {"points": len(cpu), "cpu_s": round(float(sum(cpu)), 3),
                              "cpu_s_per_point": round(float(np.mean(cpu)), 4),
                              "cpu_s_per_point_max": round(float(max(cpu)), 4)}
    per_group = {}
    for n in simulated:
        group = n.label.removesuffix(" probe").removesuffix(" plateau")
        per_group[group] = round(per_group.get(group, 0.0) + n.cpu_s, 3)
    costs = [n.cpu_s if n.how in ("run", "stored") else 0.0 for n in nodes]
    path_s, _ = critical_path(costs, after)
    return {"points": len(simulated), "points_run_now": sum(n.how == "run" for n in nodes),
            "cpu_s": round(float(sum(costs)), 3), "critical_path_s": round(path_s, 3), "per_design": per_design,
            "cpu_s_per_group": per_group,
            "predicted_wall_s": {str(c): round(schedule_s(costs, after, c), 3) for c in CORES}}


def own_nodes(nodes, experiment: str) -> tuple[list, list[list[int]]]:
    """`experiment`'s nodes and, per node, the positions in that list of the nodes it waited for (a wait on another
    experiment's node, a point it shared, is dropped: that point's cost is the other experiment's)."""
    own = [n for n in nodes if n.experiment == experiment]
    position = {n.id: i for i, n in enumerate(own)}
    return own, [[position[d] for d in n.after if d in position] for n in own]
