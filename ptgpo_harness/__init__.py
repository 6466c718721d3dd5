"""The harness: the ``ptgpo`` command line (:mod:`.cli`, one module per subcommand in :mod:`.commands`)
and the benchmark it runs (:mod:`.bench`).

The top layer: it imports the environments, the algorithms, the baselines and the leaderboard, and
nothing of theirs imports it back.
"""
