"""Plugins from installed packages: a broken one breaks only itself and is named; entry-point environments
are visible to ``gymnasium.make`` after ``import ptgpo_envs``; a benchmark pins the plugin list its cells
load; and ``examples/plugin_package`` (an estimator and an environment) is used by ``ptgpo train`` and
``ptgpo bench`` once installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ptgpo_envs.plugins import PINNED_PLUGINS_ENV, PluginWarning, Registry, RegistryError, installed_plugins, \
    pinned_plugins

ROOT = Path(__file__).resolve().parents[1]


def _fake_distribution(site: Path, name: str, entry_points: str) -> None:
    """An installed distribution as pip leaves it: a ``.dist-info`` folder with its entry points."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)


def _python(code: str, site: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    env.pop(PINNED_PLUGINS_ENV, None)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_a_broken_plugin_is_named_and_breaks_only_its_own_name(tmp_path):
    site = tmp_path / "site"
    _fake_distribution(site, "broken-estimators", '[ptgpo.estimators]\nshiny = no_such_module.estimators:register\n')
    code = (
        "import warnings\n"
        "warnings.simplefilter('always')\n"
        "from ptgpo_algos.config import TrainConfig\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    config = TrainConfig.from_dict({'algo': 'grpo'})\n"
        "print('BUILT-IN', config.algorithm.name)\n"
        "print('WARNING', [str(w.message) for w in caught if 'plugin' in str(w.message)][0])\n"
        "try:\n"
        "    TrainConfig.from_dict({'algo': 'shiny'})\n"
        "except ValueError as error:\n"
        "    print('ERROR', error)\n"
    )
    done = _python(code, site, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["BUILT-IN"] == "grpo"
    for text in (lines["WARNING"], lines["ERROR"]):
        assert "shiny = no_such_module.estimators:register" in text and "broken-estimators" in text
        assert "'ptgpo.estimators'" in text and "ModuleNotFoundError" in text
    assert lines["ERROR"].startswith("algorithm.name (algo): unknown advantage estimator 'shiny'")


def test_a_broken_plugin_leaves_the_registry_working_in_process(tmp_path, monkeypatch):
    monkeypatch.setenv(PINNED_PLUGINS_ENV, json.dumps([{"group": "ptgpo.test_widgets", "name": "bad",
                                                       "value": "no_such_module_here:register", "dist": "bad-dist"}]))
    registry: Registry[int] = Registry("widget", "ptgpo.test_widgets")
    registry.register("good", 1)
    with pytest.warns(PluginWarning, match="the plugin bad = no_such_module_here:register of bad-dist"):
        assert registry.get("good") == 1
    with pytest.raises(RegistryError, match="unknown widget 'bad'.*bad-dist"):
        registry.get("bad")


def test_a_pinned_plugin_list_ignores_what_is_installed_meanwhile(tmp_path, monkeypatch):
    monkeypatch.delenv(PINNED_PLUGINS_ENV, raising=False)
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    with pinned_plugins() as pinned:
        _fake_distribution(site, "late-plugin", '[ptgpo.estimators]\nlate = late_plugin:register\n')
        assert "late-plugin" not in pinned and installed_plugins() == json.loads(pinned)
        from ptgpo_harness.bench.pool import child_env

        assert child_env()[PINNED_PLUGINS_ENV] == pinned  # what the cells' processes read
    assert PINNED_PLUGINS_ENV not in os.environ
    assert any(p["dist"] == "late-plugin" for p in installed_plugins())


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """``examples/plugin_package`` installed (pip, without dependencies) into a folder of its own."""
    work = tmp_path_factory.mktemp("plugin")
    source = shutil.copytree(ROOT / "examples" / "plugin_package", work / "source")
    site = work / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(site), str(source)], capture_output=True, text=True,
                          timeout=300)
    if done.returncode != 0:
        pytest.skip(f"cannot build the example plugin here (pip: {done.stderr.strip()[-300:]})")
    return site


def test_entry_point_environments_are_visible_to_gymnasium_after_import(plugin_site, tmp_path):
    done = _python("import gymnasium, ptgpo_envs\n"
                   "env = gymnasium.make('plugin/Corridor-v0', length=3)\n"
                   "print(env.reset(seed=0)[0])\n", plugin_site, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "You are at cell 0 of a corridor of 3 cells."
    listed = _python("from ptgpo_harness.cli import main\nmain(['algos'])\nmain(['envs'])\n", plugin_site, tmp_path)
    lines = {line.split()[0]: line for line in listed.stdout.splitlines() if line.strip()}
    assert "[plugin: ptgpo-example-plugin]" in lines["plugin_median"] and "scale=1.0" in lines["plugin_median"]
    assert "[plugin: ptgpo-example-plugin]" in lines["plugin/Corridor-v0"]
    assert "plugin" not in lines["gigpo"] + lines["ptgpo/Household-v0"]


@pytest.mark.slow
def test_the_example_plugin_trains_and_benchmarks(plugin_site, tmp_path):
    cli = [sys.executable, "-m", "ptgpo_harness.cli"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_site), str(ROOT)])}
    env.pop(PINNED_PLUGINS_ENV, None)
    tiny = ["--set", "tiny.pretrain_steps=0", "--set", "group_size=2", "--set", "tasks_per_iteration=2",
            "--set", "eval_seeds=2", "--set", "tiny.hidden_size=16"]
    train = subprocess.run([*cli, "train", "--env", "plugin/Corridor-v0", "--algo", "plugin_median",
                            "--iterations", "1", "--out", str(tmp_path / "run"), "--no-progress", *tiny],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert train.returncode == 0, train.stderr[-2000:]
    assert json.loads((tmp_path / "run" / "config.json").read_text())["algorithm"]["name"] == "plugin_median"
    bench = {
        "name": "plugin", "budget": 8, "seeds": [0], "workers": 1,
        "policy": {"model": "tiny", "tiny": {"pretrain_steps": 0, "hidden_size": 16}, "group_size": 2,
                   "tasks_per_iteration": 2, "eval_every": 1},
        "environments": [{"label": "corridor", "id": "plugin/Corridor-v0", "kwargs": {"length": 3},
                          "train_seeds": {"start": 0, "count": 100}, "eval_seeds": {"start": 1000000, "count": 2}}],
        "methods": [{"name": "plugin_median", "algo": "plugin_median"}],
        "baselines": ["random"],
    }
    (tmp_path / "bench.yaml").write_text(yaml.safe_dump(bench))
    ran = subprocess.run([*cli, "bench", "bench.yaml", "--out", "out", "--no-progress"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    records = {json.loads(path.read_text())["method"]: json.loads(path.read_text())
               for path in (tmp_path / "out").glob("*.json")}
    assert records["plugin_median"]["status"] == "ok" and records["random"]["status"] == "ok"


SWEEP_PLUGIN = '''
import dataclasses

from ptgpo_algos.rollouts.collection import RolloutStats, collect_rollouts
from ptgpo_algos.rollouts.registry import ROLLOUT_STRATEGIES, RolloutStrategy
from ptgpo_algos.validation import setting

SEEN = []


@dataclasses.dataclass(frozen=True)
class SweepSettings:
    width: int = setting(3, "episodes in each task's group")
    label: str = "wide"

    def __post_init__(self):
        if not isinstance(self.width, int) or self.width < 1:
            raise ValueError(f"rollouts.sweep.width: expected an integer >= 1, got {self.width!r}")


@dataclasses.dataclass(kw_only=True)
class SweepStats(RolloutStats):
    groups: int = 0

    def as_dict(self):
        return {**super().as_dict(), "sweep_groups": self.groups}


def collect(policy, tasks, rollouts, **common):
    SEEN.append(rollouts.sweep)
    batch, stats = collect_rollouts(policy, tasks, group_size=rollouts.sweep.width, mode="linear", **common)
    return batch, SweepStats(**vars(stats), groups=len(batch))


def register():
    ROLLOUT_STRATEGIES.register("sweep", RolloutStrategy(
        "sweep", collect, summary="a sweep", settings=SweepSettings, slots=lambda sweep: {"sweep.width": sweep.width},
        most_decisions=lambda rollouts, horizon: rollouts.sweep.width * horizon))
'''


def _sweep_site(tmp_path: Path) -> Path:
    """The ``sweep-plugin`` distribution installed in ``tmp_path/site``: a rollout strategy ``sweep`` that
    plays linear groups of ``rollouts.sweep.width`` episodes and counts them (``rollout/sweep_groups``)."""
    site = tmp_path / "site"
    _fake_distribution(site, "sweep-plugin", "[ptgpo.rollout_strategies]\nsweep = sweep_plugin:register\n")
    (site / "sweep_plugin.py").write_text(SWEEP_PLUGIN)
    return site


def test_a_plugin_strategy_declares_its_settings_section(tmp_path):
    # A strategy from another package, with settings of its own: the config reads, checks and saves them
    # under rollouts.sweep, refuses a key they lack by name, hands them to the strategy, sizes a task's share of a
    # decision budget by the most it declares, ptgpo algos lists them and ptgpo train --help documents each one.
    site = _sweep_site(tmp_path)
    done = _python(
        "import json, sweep_plugin\n"
        "from ptgpo_algos.config import TrainConfig\n"
        "from ptgpo_algos.records import Task\n"
        "from ptgpo_algos.rollouts.registry import collect_with\n"
        "from ptgpo_algos.training.collectors import most_decisions\n"
        "from ptgpo_harness.cli import main\n"
        "config = TrainConfig.from_dict({'rollouts': {'strategy': 'sweep', 'sweep': {'width': 5}}})\n"
        "saved = config.to_dict()\n"
        "assert TrainConfig.from_dict(json.loads(json.dumps(saved))) == config\n"
        "errors = []\n"
        "for bad in ({'rollouts': {'sweep': {'widht': 5}}}, {'rollouts': {'sweep': {'width': 0}}}):\n"
        "    try:\n"
        "        TrainConfig.from_dict(bad)\n"
        "    except ValueError as error:\n"
        "        errors.append(str(error))\n"
        "print(json.dumps({'saved': saved['rollouts']['sweep'], 'errors': errors,\n"
        "                  'collected': [collect_with('sweep', None, [], config.rollouts)[1].groups],\n"
        "                  'seen': [s.width for s in sweep_plugin.SEEN],\n"
        "                  'most': most_decisions(config, Task('ptgpo/FrozenLake-v0', 0, {}, None), 7)}))\n"
        "main(['algos'])\n"
        "try:\n"
        "    main(['train', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n", site, tmp_path)
    assert done.returncode == 0, done.stderr
    result, rest = done.stdout.split("\n", 1)
    listing, helptext = rest.split("rollout strategies' settings", 1)
    assert json.loads(result) == {
        "saved": {"width": 5, "label": "wide"}, "collected": [0], "seen": [5], "most": 35,
        "errors": ["rollouts.sweep: unknown key(s) 'widht' (did you mean 'width'?); valid keys: width, label",
                   "rollouts.sweep.width: expected an integer >= 1, got 0"]}
    [line] = [line for line in listing.splitlines() if line.split()[:1] == ["sweep"]]
    assert "[plugin: sweep-plugin]" in line and "sweep.width=3, sweep.label='wide'" in line
    assert "  sweep [plugin: sweep-plugin]: a sweep\n" in helptext
    assert "    rollouts.sweep.width (3): episodes in each task's group\n" in helptext
    assert "    rollouts.sweep.label ('wide')\n" in helptext


def _linear(policy, tasks, rollouts, **common):
    from ptgpo_algos.rollouts.collection import collect_rollouts

    return collect_rollouts(policy, tasks, group_size=rollouts.group_size, mode="linear", **common)


def test_a_plugin_strategy_s_most_decisions_declared_or_not():
    # What sizes a task's share of a decision budget, and caps its group: the strategy's declaration; a
    # strategy that declares none plays group_size episodes, so group_size x the horizon; one that sizes
    # its groups itself (slots) has no such default and is refused when it is built; a declaration that
    # is not a count is named when it is read.
    from ptgpo_algos.config import TrainConfig
    from ptgpo_algos.records import Task
    from ptgpo_algos.rollouts.registry import ROLLOUT_STRATEGIES, RolloutStrategy
    from ptgpo_algos.training.collectors import most_decisions

    task = Task("ptgpo/FrozenLake-v0", 0, {}, None)
    ROLLOUT_STRATEGIES.register("plain", RolloutStrategy("plain", _linear))
    ROLLOUT_STRATEGIES.register("thrice", RolloutStrategy("thrice", _linear,
                                                          most_decisions=lambda rollouts, h: 3 * rollouts.group_size * h))
    ROLLOUT_STRATEGIES.register("halves", RolloutStrategy("halves", _linear, most_decisions=lambda rollouts, h: h / 2))
    try:
        def config(strategy):
            return TrainConfig.from_dict({"env_id": "ptgpo/FrozenLake-v0", "rollout": strategy, "group_size": 3})

        assert most_decisions(config("plain"), task, 7) == 21
        assert most_decisions(config("thrice"), task, 7) == 63
        with pytest.raises(ValueError) as error:
            most_decisions(config("halves"), task, 7)
        assert str(error.value) == ("rollout strategy 'halves': most_decisions gave 3.5 for a horizon of 7; it must "
                                    "return an integer >= 0")
    finally:
        for name in ("plain", "thrice", "halves"):
            ROLLOUT_STRATEGIES.unregister(name)
    with pytest.raises(ValueError) as error:
        RolloutStrategy("wide", _linear, slots=lambda wide: {"wide.width": 5})
    assert str(error.value) == ("rollout strategy 'wide': declare most_decisions(rollouts, horizon), the most "
                                "decisions one task's group can spend; a strategy that declares slots has no default")
    assert "wide" not in ROLLOUT_STRATEGIES


@pytest.mark.distributed
def test_a_plugin_strategy_trains_across_two_ranks_as_in_one_process(tmp_path):
    # ptgpo train --nproc 2 with the plugin's strategy: each rank finds the plugin through the installed
    # distribution's entry point, plays its tasks' groups of rollouts.sweep.width episodes, and the ranks'
    # counts (the plugin's own too) add up to the one-process run's.
    from test_distributed_training import _assert_close, _rows

    import distributed_scenarios as scenarios

    site = _sweep_site(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "OMP_NUM_THREADS": "1",
           "PTGPO_CACHE": str(tmp_path / "cache")}
    for key in (PINNED_PLUGINS_ENV, "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    for name, nproc in (("two", ["--nproc", "2"]), ("alone", [])):
        config = tmp_path / f"{name}.yaml"  # JSON is YAML
        config.write_text(json.dumps(scenarios.training_config(str(tmp_path / name), "grpo", rollout="sweep",
                                                               rollouts={"sweep": {"width": 3}}, iterations=2)))
        done = subprocess.run([sys.executable, "-m", "ptgpo_harness.cli", "train", "--config", str(config),
                               "--no-progress", *nproc], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    two, alone = _rows(tmp_path / "two"), _rows(tmp_path / "alone")
    _assert_close(two, alone)
    assert _rows(tmp_path / "two", "curve") == _rows(tmp_path / "alone", "curve")
    # 3 tasks of 3 episodes (not group_size's 4) an iteration, 2 tasks played on one rank and 1 on the other
    assert [(row["rollout/sweep_groups"], row["rollout/reset_episodes"]) for row in two] == [(3, 9), (3, 9)]
    saved = json.loads((tmp_path / "two" / "config.json").read_text())["rollouts"]
    assert saved["strategy"] == "sweep" and saved["sweep"] == {"width": 3, "label": "wide"}
    assert (tmp_path / "two" / "checkpoint" / "__1_0.distcp").is_file()  # sharded over 2 ranks
