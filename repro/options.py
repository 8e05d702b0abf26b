"""Parsing of CLI values shared by several commands; mistakes become one-line Click errors."""
import click


def parse_int_list(text: str, option: str, minimum: int = 0) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}", param_hint=option) from None
    if not values or min(values) < minimum:
        raise click.BadParameter(f"expected integers >= {minimum}, got {text!r}", param_hint=option)
    return values
