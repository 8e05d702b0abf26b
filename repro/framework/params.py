"""Experiment parameters (`repro run --param KEY=VALUE`): declared once per experiment, typed, checked at the edge.

    PARAMS = (Param("link", link, DEFAULT_LINK, LINK_HELP),
              Param("num_requests", int, None, "requests per point (default: 1000, 100 with --quick)"),
              Param("rates", float_list, None, "comma-separated request rates per second"))
    EXPERIMENT = Experiment(..., params=PARAMS)

`parse_params` turns the raw strings into typed values, fills the declared defaults (a default of None means
the experiment chooses, e.g. by --quick, and says so in the help) and rejects an unknown key or a bad value
with one line naming the valid ones. Experiments then read `params.extra[key]` (or `.get(key)` for None
defaults).
"""
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass

from reference_impl.errors import InputError
from reference_impl.calibration.links import check_link


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: Callable[[str], object]  # int, float, str, boolean, int_list, float_list, or any str -> value
    default: object = None  # None: chosen by the experiment (say how in `help`)
    help: str = ""
    choices: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()  # backends it applies to; () = all of the experiment's
    in_run_id: bool = True  # False: where the run keeps its work (e.g. a store), not what it computes

    @property
    def kind(self) -> str:
        return _KINDS.get(self.type, getattr(self.type, "__name__", "value").replace("_", " "))

    def describe(self) -> str:
        shown = str(self.default).lower() if isinstance(self.default, bool) else self.default
        default = "" if self.default is None else f" (default {shown})"
        choices = f" [{'|'.join(self.choices)}]" if self.choices else ""
        where = f" (backends: {', '.join(self.backends)})" if self.backends else ""
        return f"{self.name}={self.kind}{choices}{default}{where}: {self.help}"


def boolean(raw: str) -> bool:
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def int_list(raw: str) -> tuple[int, ...]:
    return _list(raw, int)


def float_list(raw: str) -> tuple[float, ...]:
    return _list(raw, float)


def _list(raw, cast) -> tuple:
    if isinstance(raw, (tuple, list)):
        return tuple(cast(x) for x in raw)
    items = tuple(cast(x) for x in str(raw).split(",") if x.strip())
    if not items:
        raise ValueError(raw)
    return items


def positive_int(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise ValueError(raw)
    return value


def fraction(raw: str) -> float:
    value = float(raw)
    if not 0 < value <= 1:
        raise ValueError(raw)
    return value


def positive_float(raw: str) -> float:
    value = float(raw)
    if not 0 < value < math.inf:
        raise ValueError(raw)
    return value


def positive_int_list(raw: str) -> tuple[int, ...]:
    return _list(raw, positive_int)


LINK_HELP = "between instances: intra-node, inter-node (measured send/recv) or a bandwidth in GB/s"


class ParamValueError(ValueError):
    """A type's own reason for rejecting a value, shown to the user."""


def link(raw: str) -> str:
    """A measured link name or a bandwidth in GB/s (kept as text: the cost model resolves it)."""
    try:
        return check_link(raw)
    except InputError as exc:
        raise ParamValueError(str(exc)) from None


_KINDS = {int: "integer", float: "number", str: "text", boolean: "true|false",
          int_list: "comma-separated integers", float_list: "comma-separated numbers",
          positive_int: "integer >= 1", positive_float: "number > 0", fraction: "number in (0, 1]",
          positive_int_list: "comma-separated integers >= 1",
          link: "intra-node|inter-node|GB/s > 0"}


def parse_params(experiment: str, declared: tuple[Param, ...], raw: dict, backend: str) -> dict:
    """Typed values of `raw` (key -> string) with the declared defaults filled in; InputError on a bad key/value."""
    by_name = {p.name: p for p in declared if not p.backends or backend in p.backends}
    values = {}
    for key, text in raw.items():
        spec = by_name.get(key)
        if spec is None:
            valid = ", ".join(sorted(by_name)) or "none"
            raise InputError(f"unknown --param {key!r} for experiment {experiment} on backend {backend}; "
                             f"valid keys: {valid} (see `repro run --list-params {experiment}`)")
        try:
            value = spec.type(text)
        except ParamValueError as exc:
            raise InputError(f"--param {key}={text!r}: {exc} (expected {spec.kind}): {spec.help}") from None
        except (TypeError, ValueError):
            raise InputError(f"--param {key}={text!r} is not valid (expected {spec.kind}): {spec.help}") from None
        if spec.choices and value not in spec.choices:
            raise InputError(f"--param {key}={text!r}: choose one of {', '.join(spec.choices)}")
        values[key] = value
    for spec in by_name.values():
        if spec.name not in values and spec.default is not None:
            values[spec.name] = spec.default
    return values


def overrides(declared: tuple[Param, ...], raw: dict, typed: dict) -> dict:
    """The given params whose value differs from the declared default: what makes a run other than the default."""
    defaults = {p.name: p.default for p in declared}
    apart = {p.name for p in declared if not p.in_run_id}
    return {key: typed[key] for key in raw if typed[key] != defaults.get(key) and key not in apart}


def fingerprint(values: dict) -> str:
    """A short stable hash of typed param values (run ids of non-default runs end with it)."""
    text = json.dumps(values, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def describe_params(experiment) -> str:
    """The `--param` keys of an experiment, one per line (for `repro run --list-params` and `--help`)."""
    declared = experiment.params
    if not declared:
        return f"{experiment.name}: takes no --param"
    return "\n".join([f"{experiment.name} --param KEY=VALUE:"] + [f"  {p.describe()}" for p in declared])
