"""Every serving design the harness compares, by name: the one dict that feeds the CLI's choices. Each name maps
to the module that defines its `DESIGN` (design.py), imported when first asked for, so that listing the names
(`repro simulate --help`) imports no cost model. The caller asks `design` once and hands the Design to the backend
that runs it (the simulator and the real backends import no design: tests/sim/test_import_graph.py)."""
import importlib

from reference_impl.errors import InputError

DESIGNS = {
    "infinite-llm": "reference_impl.systems.infinite_llm",
    "vllm-m": "reference_impl.systems.vllm_m",
    "vllm-s": "reference_impl.systems.vllm_s",
    "pd-disaggregation": "reference_impl.systems.pd_disagg",
    "lamina": "reference_impl.systems.lamina",
    "loongserve": "reference_impl.systems.loongserve",
    "llumnix": "reference_impl.systems.llumnix",
}
DESIGN_NAMES = tuple(DESIGNS)


def design(name: str):
    """The Design called `name` (InputError naming the choices for an unknown one)."""
    if name not in DESIGNS:
        raise InputError(f"unknown system {name!r}: choose one of {', '.join(DESIGNS)}")
    return importlib.import_module(DESIGNS[name]).DESIGN
