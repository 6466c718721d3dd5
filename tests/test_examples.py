"""The scripts in examples/ run as a reader runs them (a fresh process, from another folder) and print
what the docs say they print. The docs include these files verbatim, so a change that breaks an
example breaks here first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

# example -> (extra arguments, lines its output must contain)
EXPECTED = {
    "play_env.py": ([], ["task: find two cellphone and put them in sidetable.", "valid: False",
                         "expert: reward 1.0, won True, 10 steps", "after restore, the expert's first action is again"]),
    # Fewer iterations than the documented minute: the test checks that it trains and reports, not how far.
    "train_frozenlake.py": (["--iterations", "2", "--out", "run"],
                            ["iteration   0  decisions      0  held-out success", "2 iterations,"]),
    "custom_estimator.py": ([], ["advantages: [[[0.5, 0.5], [0.0], [0.0]]]", "scale=-1 is invalid",
                                 "trained 2 iterations with median_baseline"]),
    "custom_env.py": ([], ["task: reach cell 3", "> fly: Nothing happens.", "trained 2 iterations of PTGPO"]),
    "custom_loss.py": ([], ["loss on a negative advantage at ratio 0.5: 0.90", "trained 2 iterations with asymmetric-clip"]),
    "custom_rollout_backend.py": ([], ["copy-engine:", "weight syncs"]),
}


def test_every_example_is_tested():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One tiny-model cache for all examples: most build the same small model."""
    return tmp_path_factory.mktemp("ptgpo-cache")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name, tmp_path, cache):
    arguments, expected = EXPECTED[name]
    env = {**os.environ, "PTGPO_CACHE": str(cache), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, str(EXAMPLES / name), *arguments], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    for line in expected:
        assert line in done.stdout, f"{name} did not print {line!r}:\n{done.stdout}"
