"""Test-session settings: single-threaded, passive OpenMP (measured 5-30x faster on small CPUs)."""

import os

# Must happen before torch is imported anywhere.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def ray_cluster():
    """A local two-CPU Ray cluster for the session (``ray.init(num_cpus=2)``), or a skip without Ray."""
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]' (in the test extra)")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()
