"""A design's say in where an engine's KV goes, given to the Engine as it builds its instances (nothing is changed on
an instance afterwards). Every field None: the engine's own rules (the gManager's creditor hint, the perf model's
retrieval, the rManager's admission, `blocks_per_instance` rBlocks an instance)."""
from collections.abc import Callable
from dataclasses import dataclass

from reference_impl.control.rmanager import RManager
from reference_impl.control.sequence import Sequence


@dataclass(frozen=True, slots=True)
class Placement:
    # (the instance's rManager, debtor inst, rBlocks) -> where a request's rBlocks go that its instance cannot take
    # (pooling on); bound to each instance's rManager as it is built, as `fits` is
    recommend: Callable[[RManager, int, int], list[int]] | None = None
    retrieval: Callable[[int], int] | None = None  # room -> borrowed rBlocks to bring home (pooling on)
    fits: Callable[[RManager, Sequence, int], bool] | None = None  # (instance's rManager, request, rBlocks) admission
    blocks: Callable[[int], int | None] | None = None  # instance id -> its rBlocks (and lending cap); None: the config's
    # (rManager, request, rBlocks) -> the prompt's rBlocks as runs (inst_id, rBlocks) in token order, one run per
    # member of its prefill group, which a real backend prefills sequence-parallel (each member computes its run's
    # tokens: backends/ray/sp_prefill.py); None, or a None answer: the rManager's own admission
    segments: Callable[[RManager, Sequence, int], list[tuple[int, int]] | None] | None = None
    # the engine's cost model (None where it has none) -> the placement whose rules price the machine with it
    # (LoongServe's prefill group, chosen by its analytic model); the engine calls it once as it is built
    priced: Callable[[object], "Placement"] | None = None

    def for_cost_model(self, perf_model) -> "Placement":
        """The rules an engine with cost model `perf_model` (None: none) builds its instances with."""
        return self if self.priced is None else self.priced(perf_model)
