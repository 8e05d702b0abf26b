"""The model runner of an engine step, shared by the local backend and the Ray instance loops.

A step's token inputs (step_inputs.py) are staged on the device once, the model runs with the caller's `attend`
(the local KV layer, or DistAttention over the data plane), the LM head runs on each sequence's last token only,
and the Sampler picks the next tokens on the device: the sampled ids are the step's one host synchronisation.
On CUDA, decode steps whose KV lies in one storage replay a CUDA graph (graphs.py) unless `eager`.
"""
import torch

from reference_impl.model.sampling import Sampler
from reference_impl.model.step_inputs import TokenArrays, stage


class ModelRunner:
    def __init__(self, model, device, seed: int = 0, record_logits: bool = False, graphs=None):
        """`graphs`: a DecodeGraphs (graphs.py) for decode steps given their `graph_rows`; None runs eagerly."""
        self.model = model
        self.graphs = graphs
        self.device = torch.device(device)
        self.sampler = Sampler(self.device, seed)
        self.record_logits = record_logits

    def inputs(self, tokens: TokenArrays):
        """(input ids, positions) on the device."""
        return stage(tokens.token_ids, self.device), stage(tokens.positions, self.device)

    def last_hidden(self, hidden, tokens: TokenArrays):
        """Each sequence's last token's hidden state (the rows the LM head needs)."""
        if hidden.shape[0] == tokens.last.shape[0]:
            return hidden
        return hidden[stage(tokens.last, self.device)]

    def forward(self, tokens: TokenArrays, attend):
        """Hidden states of each sequence's last token after the final norm."""
        ids, positions = self.inputs(tokens)
        return self.last_hidden(self.model.forward(ids, positions, attend), tokens)

    def sample(self, seqs, hidden, tokens: TokenArrays | None = None) -> list[int]:
        """The next token of each sequence from its last hidden state; the step's one host synchronisation. With
        `tokens` of a chunked step, only the sequences whose prompt is whole sample one (the others get 0, which
        the scheduler does not read)."""
        if tokens is not None and tokens.sampled is not None:
            picked = [seqs[i] for i in tokens.sampled.tolist()]
            ids = self.sample(picked, hidden[stage(tokens.sampled, self.device)]) if picked else []
            out = [0] * len(seqs)
            for i, token_id in zip(tokens.sampled.tolist(), ids):
                out[i] = token_id
            return out
        logits = self.model.logits(hidden)
        token_ids = self.sampler.sample(logits, [s.sampling for s in seqs], [len(s.output_ids) for s in seqs])
        token_ids = token_ids.tolist()
        if self.record_logits:
            for seq, row in zip(seqs, logits.cpu()):
                seq.logits.append(row)
        return token_ids

    def run(self, seqs, tokens: TokenArrays, attend, graph_rows=None) -> list[int]:
        """The step's next tokens. `graph_rows` (block table, lengths, slots of a decode step whose KV is in the
        graphs' storage) lets a decode step replay a graph; `attend` runs it otherwise."""
        return self.sample(seqs, self.compute(tokens, attend, graph_rows), tokens)

    def compute(self, tokens: TokenArrays, attend, graph_rows=None):
        """The model's part of a step: the last tokens' hidden states, from a graph replay or eagerly."""
        if graph_rows is not None and self.graphs is not None:
            table, lens, slots = (stage(x, self.device) for x in graph_rows)
            hidden = self.graphs.run(*self.inputs(tokens), slots, table, lens)
            if hidden is not None:
                return hidden
        return self.forward(tokens, attend)
