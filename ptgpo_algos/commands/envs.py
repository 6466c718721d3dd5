"""``ptgpo envs``: list the registered environments."""

from __future__ import annotations

import argparse

HELP = "list the registered environments with a one-line description each"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ptgpo envs`` takes no arguments."""
    pass


def run(args: argparse.Namespace) -> int:
    """Print every registered environment id with its one-line description."""
    import ptgpo_envs

    specs = [spec for _, spec in ptgpo_envs.ENVIRONMENTS.items()]
    width = max(len(spec.id) for spec in specs)
    for spec in specs:
        print(f"{spec.id:<{width}}  {spec.description}")
    return 0
