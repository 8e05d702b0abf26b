"""Parsing of CLI values shared by several commands; mistakes become one-line Click errors."""
import click

from reference_impl.control.engine_config import GMANAGER_INTERVAL_S


def parse_int_list(text: str, option: str, minimum: int = 0, maximum: int | None = None) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}", param_hint=option) from None
    if not values or min(values) < minimum:
        raise click.BadParameter(f"expected integers >= {minimum}, got {text!r}", param_hint=option)
    if maximum is not None and max(values) > maximum:
        raise click.BadParameter(f"expected integers <= {maximum}, got {max(values)}", param_hint=option)
    return values


# numpy's SeedSequence takes no negative seed and torch.manual_seed none beyond 64 bits
seed_option = click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2**32 - 1),
                           help="Seed of every random choice (0 to 2^32-1).")
gmanager_interval_option = click.option(
    "--gmanager-interval-s", default=GMANAGER_INTERVAL_S, show_default=True, type=click.FloatRange(0, min_open=True),
    help="Seconds between the gManager's rounds (heartbeats, recalls, Algorithm 1, DGFM) of a pooled engine.")
