"""``ptgpo envs``: list the registered environments."""

from __future__ import annotations

import argparse

HELP = "list the registered environments with a one-line description each"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ptgpo envs`` takes no arguments."""
    pass


def run(args: argparse.Namespace) -> int:
    """Print every registered environment id with its one-line description (plugins marked, and those
    that failed to load)."""
    import ptgpo_envs

    specs = [spec for _, spec in ptgpo_envs.ENVIRONMENTS.items()]
    width = max(len(spec.id) for spec in specs)
    for spec in specs:
        origin = ptgpo_envs.ENVIRONMENTS.origins.get(spec.id)
        print(f"{spec.id:<{width}}  {spec.description}" + (f" [plugin: {origin}]" if origin else ""))
    for why in ptgpo_envs.ENVIRONMENTS.broken.values():
        print(f"! {why}")
    return 0
