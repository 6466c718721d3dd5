"""``ptgpo envs``: list the registered environments."""

from __future__ import annotations

import argparse

HELP = "list the registered environments with a one-line description each"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    import ptgpo_envs

    width = max(len(spec.id) for spec in ptgpo_envs.ENVIRONMENTS)
    for spec in ptgpo_envs.ENVIRONMENTS:
        print(f"{spec.id:<{width}}  {spec.description}")
    return 0
