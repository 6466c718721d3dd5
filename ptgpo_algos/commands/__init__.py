"""Subcommands of the ``ptgpo`` console script, one module each.

A command module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``, and
keeps its top-level imports light: heavy libraries (torch, the ALFWorld engine) are imported in ``run``.
"""
