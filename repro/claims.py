"""The papers' headline claims (copied into repro/data/claims.json) for `repro report`."""
import json
from functools import cache
from importlib import resources


@cache
def headline_claims() -> list[dict]:
    """[{"id", "figure", "claim"}, ...] in the papers' order."""
    return json.loads(resources.files("repro.data").joinpath("claims.json").read_text())["headline"]
