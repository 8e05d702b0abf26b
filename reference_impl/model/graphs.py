"""Decode steps replayed from CUDA graphs captured at start-up, one per batch-size bucket.

A decode step whose sequences' KV lies in one storage (the device tier of the instances on this device) runs the
whole decoder, K/V stores and MicroAttention included, from static buffers: input ids, positions, the slot of each
new token, block tables [max batch, max blocks] and context lengths. A batch of b replays the smallest bucket
>= b; the padding rows store nowhere (slot -1) and attend over nothing (length 0). The LM head and the sampling run
outside the graph on the real rows. A step with no bucket (a batch over the cap, a context over `max_blocks`, KV
in several storages) runs eagerly and is counted in `num_eager`. Without CUDA (`capture=False`) the same static-
buffer step runs eagerly: the CPU tests check the padding and the buffers that the graphs replay.
"""
import torch

from reference_impl.kernels import micro_attention, store_kv


def graph_batch_sizes(max_batch: int) -> list[int]:
    """Buckets 1, 2, 4, 8, then steps of 16 up to the batch cap (the cap itself always one)."""
    sizes = {b for b in (1, 2, 4, 8) if b <= max_batch} | set(range(16, max_batch + 1, 16)) | {max_batch}
    return sorted(sizes)


class DecodeGraphs:
    def __init__(self, model, k_cache, v_cache, max_batch: int, max_blocks: int, device, capture: bool = True):
        """k_cache/v_cache [num_layers, num_blocks, block_size, Hkv, D]: the storage the graphs read and write."""
        self.model, self.k_cache, self.v_cache = model, k_cache, v_cache
        self.device = torch.device(device)
        self.sizes = graph_batch_sizes(max_batch)
        self.max_blocks = max_blocks
        self.num_eager = 0  # decode steps whose shape had no graph
        self.num_replays = 0
        n = max_batch
        self.ids = torch.zeros(n, dtype=torch.int64, device=self.device)
        self.positions = torch.zeros(n, dtype=torch.int64, device=self.device)
        self.slots = torch.full((n,), -1, dtype=torch.int64, device=self.device)
        self.table = torch.zeros(n, max_blocks, dtype=torch.int32, device=self.device)
        self.lens = torch.zeros(n, dtype=torch.int32, device=self.device)
        self.graphs, self.hidden = {}, {}
        if capture:
            self._capture()

    @torch.inference_mode()
    def _body(self, size: int):
        k_cache, v_cache, slots, table, lens = self.k_cache, self.v_cache, self.slots[:size], self.table[:size], \
            self.lens[:size]

        def attend(layer, q, k, v):
            store_kv(k, v, k_cache[layer], v_cache[layer], slots)
            return micro_attention(q, k_cache[layer], v_cache[layer], table, lens, check_ranges=False)[0]

        return self.model.forward(self.ids[:size], self.positions[:size], attend)

    def _capture(self) -> None:
        pool = None
        for size in reversed(self.sizes):  # the largest first: the smaller ones reuse its memory pool
            self._body(size)  # warm-up: Triton compiles its kernels outside the capture
            torch.cuda.synchronize(self.device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.hidden[size] = self._body(size)
            pool = graph.pool()
            self.graphs[size] = graph
        torch.cuda.synchronize(self.device)

    def run(self, ids, positions, slots, table, lens):
        """Hidden states [S, hidden] of a decode step of S sequences (device tensors: ids, positions, slots [S],
        table [S, width], lens [S]), or None (counted) when no graph fits its shape."""
        num_seqs, width = table.shape
        size = next((b for b in self.sizes if b >= num_seqs), None)
        if size is None or width > self.max_blocks:
            self.num_eager += 1
            return None
        self.ids[:num_seqs].copy_(ids, non_blocking=True)
        self.positions[:num_seqs].copy_(positions, non_blocking=True)
        self.slots[:num_seqs].copy_(slots, non_blocking=True)
        self.slots[num_seqs:size].fill_(-1)
        self.lens[:num_seqs].copy_(lens, non_blocking=True)
        self.lens[num_seqs:size].zero_()
        self.table[:num_seqs, :width].copy_(table, non_blocking=True)  # columns past a row's length are never read
        self.num_replays += 1
        if size in self.graphs:
            self.graphs[size].replay()
            return self.hidden[size][:num_seqs]
        return self._body(size)[:num_seqs]
