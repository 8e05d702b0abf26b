"""A design's own options from the command line (`repro simulate --knob NAME=VALUE`) and the configuration the
design chose, in words: its knobs are the frozen dataclass it reads from SimConfig.design_knobs (Design.knobs), and
what it chose beyond instances and GPUs is its own (Design.chosen)."""
import dataclasses
import types
import typing

from reference_impl.errors import InputError
from reference_impl.systems.catalog import DESIGN_NAMES, design as get_design

SCALARS = (bool, int, float, str, type(None))


def settable(cls) -> dict[str, tuple]:
    """The knobs of `cls` a command line can set (name -> the scalar types it takes)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
            else (hint,)
        if all(k in SCALARS for k in kinds):
            out[f.name] = kinds
    return out


def _parse(text: str, kinds: tuple):
    if text.lower() == "none" and type(None) in kinds:
        return None
    if bool in kinds:
        if text.lower() in ("true", "1", "yes", "on"):
            return True
        if text.lower() in ("false", "0", "no", "off"):
            return False
    if int in kinds:
        try:
            return int(text)
        except ValueError:
            pass
    if float in kinds:
        try:
            return float(text)
        except ValueError:
            pass
    if str in kinds:
        return text
    names = " or ".join("none" if k is type(None) else k.__name__ for k in kinds)
    raise InputError(f"got {text!r}, expected {names}")


def parse_knobs(design: str, pairs: tuple[str, ...]):
    """The knobs dataclass of `design` with the NAME=VALUE `pairs` set (None when no pair is given); InputError in
    one line for a design without knobs, an unknown name (naming the known ones) or a bad value."""
    if not pairs:
        return None
    cls = get_design(design).knobs
    if cls is None:
        with_knobs = [name for name in DESIGN_NAMES if get_design(name).knobs is not None]
        raise InputError(f"--knob: {design} has no knobs of its own (designs with knobs: {', '.join(with_knobs)})")
    known = settable(cls)
    values = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip().replace("-", "_")
        if not sep:
            raise InputError(f"--knob {pair!r}: give NAME=VALUE")
        if name not in known:
            raise InputError(f"--knob {name}: not a knob of {design}; its knobs: {', '.join(known)}")
        try:
            values[name] = _parse(text.strip(), known[name])
        except InputError as exc:
            raise InputError(f"--knob {name}: {exc}") from None
    return cls(**values)


def knob_line(knobs) -> str:
    """The scalar knobs of a config, NAME=VALUE."""
    if knobs is None:
        return "defaults"
    return " ".join(f"{f.name}={getattr(knobs, f.name)}" for f in dataclasses.fields(knobs)
                    if isinstance(getattr(knobs, f.name), SCALARS))


def describe(config) -> dict:
    """What the design chose for `config` (a SimConfig it made): instances, GPUs and its own choices, as a JSON-able
    dict; 'knobs' holds the resolved knobs (defaults filled in)."""
    out = {"design": config.design, "num_gpus": config.num_gpus, "num_instances": config.engine.num_instances,
           "tp": config.tp, "pp": config.pp, "link": config.link, "pooling": config.engine.pooling}
    made_by = get_design(config.design)
    knobs = config.design_knobs
    if knobs is None and made_by.knobs is not None:
        knobs = made_by.knobs()
    if made_by.chosen is not None:
        out.update(made_by.chosen(config, knobs))
    if knobs is not None:
        out["knobs"] = {f.name: getattr(knobs, f.name) for f in dataclasses.fields(knobs)
                        if isinstance(getattr(knobs, f.name), SCALARS)}
    return out
