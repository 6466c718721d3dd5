"""Test-session settings: single-threaded, passive OpenMP (measured 5-30x faster on small CPUs)."""

import os

# Must happen before torch is imported anywhere.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
