"""Every knob is declared once: no field name in two of the config dataclasses (the simulator's config holds the
engine's, which holds the gManager's, and the engine implementation's costs), and the simulator's engine is SIM_ENGINE, not a second set of defaults."""
import typing
from dataclasses import dataclass, fields, is_dataclass

from reference_impl.calibration.engine_costs import EngineCosts
from reference_impl.control.engine_config import EngineConfig, GManagerConfig
from reference_impl.sim.config import SIM_ENGINE, SimConfig

ROOTS = (SimConfig, EngineConfig)


def config_classes(roots) -> list[type]:
    """`roots` and every dataclass their fields hold (a field typed `X` or `X | None`), transitively."""
    found, todo = [], list(roots)
    while todo:
        cls = todo.pop()
        if cls in found:
            continue
        found.append(cls)
        hints = typing.get_type_hints(cls)
        todo += [t for f in fields(cls) for t in (hints[f.name], *typing.get_args(hints[f.name])) if is_dataclass(t)]
    return found


def declared_twice(roots) -> dict[str, list[str]]:
    """Field name -> the config classes that declare it, for names declared by more than one."""
    owners: dict[str, list[str]] = {}
    for cls in config_classes(roots):
        for f in fields(cls):
            owners.setdefault(f.name, []).append(cls.__name__)
    return {name: classes for name, classes in owners.items() if len(classes) > 1}


def test_no_field_is_declared_in_two_configs():
    assert {SimConfig, EngineConfig, GManagerConfig, EngineCosts} <= set(config_classes(ROOTS))
    assert declared_twice(ROOTS) == {}


def test_a_field_declared_twice_is_found():
    @dataclass(frozen=True)
    class Inner:
        block_size: int = 16

    @dataclass(frozen=True)
    class Outer:
        block_size: int = 128
        inner: Inner | None = None

    assert declared_twice((Outer,)) == {"block_size": ["Outer", "Inner"]}


def test_the_simulators_engine_defaults_are_one_instance():
    assert SimConfig().engine is SIM_ENGINE
