"""Next tokens from a step's logits on the device the logits are on: greedy rows by argmax, the others by
temperature and top-p. A seeded request's noise at its n-th token comes from (seed, n) alone, so its tokens do not
depend on what it is batched with; unseeded rows draw from the sampler's own generator."""
import torch

from reference_impl.control.sampling import SamplingParams

_SEED_STRIDE = 1_000_003  # (seed, n) -> one generator seed


def top_p_mask(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """probs [B, V], top_p [B] -> probs with every token outside each row's nucleus set to 0 (the most likely kept)."""
    sorted_p, order = probs.sort(dim=-1, descending=True)
    before = sorted_p.cumsum(-1) - sorted_p  # mass of the tokens ranked above each one
    drop_sorted = before >= top_p[:, None]
    drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)
    return probs.masked_fill(drop, 0.0)


class Sampler:
    def __init__(self, device, seed: int = 0):
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

    def sample(self, logits: torch.Tensor, params: list[SamplingParams], num_generated: list[int]) -> torch.Tensor:
        """logits [B, V] -> token ids [B] (on the logits' device). `num_generated[i]`: tokens row i made before."""
        greedy = logits.argmax(-1)
        if all(p.is_greedy for p in params):
            return greedy
        rows = [i for i, p in enumerate(params) if not p.is_greedy]
        temps = torch.tensor([params[i].temperature for i in rows], device=logits.device)
        top_p = torch.tensor([params[i].top_p for i in rows], device=logits.device)
        probs = torch.softmax(logits[rows].float() / temps[:, None], dim=-1)
        if bool((top_p < 1).any()):
            probs = top_p_mask(probs, top_p)
        noise = torch.empty_like(probs)
        for j, i in enumerate(rows):
            seed = params[i].seed
            gen = self.generator if seed is None else torch.Generator(device=logits.device).manual_seed(
                (seed * _SEED_STRIDE + num_generated[i]) % 2**63)
            noise[j].exponential_(generator=gen)
        # the exponential race: argmax p / E with E ~ Exp(1) draws a token with probability p
        picked = (probs / noise).argmax(-1)
        out = greedy.clone()
        out[rows] = picked
        return out
