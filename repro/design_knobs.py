"""A design's own options from the command line (`repro simulate --knob NAME=VALUE`) and the configuration the
design chose, in words: its knobs are the frozen dataclass it reads from SimConfig.design_knobs."""
import dataclasses
import importlib
import types
import typing
from dataclasses import replace

from reference_impl.errors import InputError

# design -> the module and class of its knobs (the designs on the pooled engine's own policy have none)
KNOB_CLASSES = {
    "pd-disaggregation": ("reference_impl.systems.pd_disagg.knobs", "PDKnobs"),
    "lamina": ("reference_impl.systems.lamina.cluster", "LaminaKnobs"),
    "loongserve": ("reference_impl.systems.loongserve.knobs", "LoongServeKnobs"),
    "llumnix": ("reference_impl.systems.llumnix.knobs", "LlumnixKnobs"),
}
SCALARS = (bool, int, float, str, type(None))


def knob_class(design: str):
    if design not in KNOB_CLASSES:
        return None
    module, name = KNOB_CLASSES[design]
    return getattr(importlib.import_module(module), name)


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
    cls = knob_class(design)
    if cls is None:
        raise InputError(f"--knob: {design} has no knobs of its own (designs with knobs: {', '.join(KNOB_CLASSES)})")
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
    knobs = config.design_knobs
    cls = knob_class(config.design)
    if knobs is None and cls is not None:
        knobs = cls()
    if config.design == "pd-disaggregation":
        from reference_impl.systems.pd_disagg.configure import split_of
        s = split_of(config)
        out["split"] = (f"{s.num_prefill}x tp{s.prefill.tp}pp{s.prefill.pp} prefill + "
                        f"{s.num_decode}x tp{s.decode.tp}pp{s.decode.pp} decode")
        w = knobs.workload
        out["split_for"] = (f"mean prompt {w.mean_prompt_tokens:.0f}, output {w.mean_output_tokens:.0f} tokens, "
                            f"long context {w.long_context_tokens}")
    elif config.design == "lamina":
        out["memory_devices_per_instance"] = knobs.memory_devices
    elif config.design == "loongserve":
        out["ring_degree"] = knobs.max_degree or config.engine.num_instances
        out["ring_link"] = knobs.ring_link or config.link
    if knobs is not None:
        out["knobs"] = {f.name: getattr(knobs, f.name) for f in dataclasses.fields(knobs)
                        if isinstance(getattr(knobs, f.name), SCALARS)}
    return out


def with_workload_shape(design: str, knobs, requests):
    """pd-disaggregation's split is searched for the workload at hand unless the knobs name a shape (without one
    it reads a trace-free default shape of the model)."""
    if design != "pd-disaggregation":
        return knobs
    from reference_impl.systems.pd_disagg.knobs import PDKnobs, shape_of
    knobs = knobs or PDKnobs()
    return knobs if knobs.workload is not None else replace(knobs, workload=shape_of(requests))
