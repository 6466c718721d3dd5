"""The command line as a first-time user meets it: ``--version``, ``ptgpo algos``, readable option names,
and progress bars that suit a terminal, a log file, or ``--no-progress``."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ptgpo_harness.cli import build_parser, main
from ptgpo_envs.progress import NO_PROGRESS_ENV, progress_bar

ROOT = Path(__file__).resolve().parents[1]


def test_version_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert re.fullmatch(r"ptgpo (\d+\.\d+\S*|unknown .*)\n", capsys.readouterr().out)


def test_algos_lists_every_name_a_config_takes_with_keys_and_defaults(capsys):
    from ptgpo_algos.advantages import ESTIMATORS

    assert main(["algos"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert set(ESTIMATORS.names()) <= set(lines)
    assert "omega=1.0" in lines["gigpo"] and "norm='mean_std_norm'" in lines["gigpo"]
    assert "weight=0.01" in lines["seed"] and "beta_opd=5.0" in lines["seed"]  # an objective's keys
    for name in ("linear", "tree", "patr", "ppo-clip", "progress", "transformers", "vllm"):
        assert name in lines
    assert "rollout strategies (rollouts.strategy (--rollout)):" in out
    assert "optimisers (optim.optimizer):\n  adamw\n  sgd\n" in out


def test_train_options_have_readable_placeholders():
    helptext = build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    assert "CFG:" not in helptext
    for option in ("--lr NUMBER", "--group-size N", "--env ENV", "--config YAML", "--out OUT"):
        assert option in helptext


def test_train_help_documents_each_strategy_s_settings_without_importing_its_collection():
    # The help named the strategies (--rollout) but none of the rollouts.<name>.<key> settings --set takes.
    code = ("import sys\n"
            "from ptgpo_harness.cli import build_parser\n"
            "parser = build_parser()\n"
            "print(parser._subparsers._group_actions[0].choices['train'].format_help())\n"
            "print(sorted(m for m in sys.modules\n"
            "             if m.startswith('ptgpo_algos.rollouts.') and m.endswith('.collection')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    helptext, imported = done.stdout.rstrip().rsplit("\n", 1)
    section = helptext[helptext.index("rollout strategies' settings (set with --set rollouts.NAME.KEY=VALUE):"):]
    assert "\n  patr: PATR's process-scored tree of up to max_leaves leaves\n" in section
    assert "\n    rollouts.patr.top_k (2): branches expanded at a checkpoint (0: prune only)\n" in section
    assert "\n    rollouts.spo3.g_max (8): " in section and "\n    rollouts.bpo.forks (4): " in section
    assert "  linear" not in section  # a strategy without settings of its own
    assert imported == "[]"  # no strategy's collection, the linear and tree one included


def test_a_bar_off_a_terminal_writes_whole_lines(monkeypatch):
    monkeypatch.delenv(NO_PROGRESS_ENV, raising=False)
    log = io.StringIO()  # not a terminal, as a log file or a pipe
    monkeypatch.setattr(sys, "stderr", log)
    for _ in progress_bar(range(3), desc="work", mininterval=0, miniters=1):
        pass
    text = log.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    assert lines and all(line.startswith("work:") for line in lines) and "3/3" in lines[-1]


def test_no_progress_silences_every_bar(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.setenv(NO_PROGRESS_ENV, "1")
    for _ in progress_bar(range(3), desc="work", mininterval=0):
        pass
    assert log.getvalue() == ""


def test_no_progress_is_an_option_of_every_command():
    commands = build_parser()._subparsers._group_actions[0].choices
    assert all("--no-progress" in parser._option_string_actions for parser in commands.values())


def test_long_pretraining_says_how_long_it_will_take(tmp_path, capsys):
    from ptgpo_algos.policy.tiny import TinyModelSpec, build_tiny_model

    spec = TinyModelSpec(seed=3, hidden_size=16, intermediate_size=32, pretrain_steps=50, pretrain_batch_size=4)
    build_tiny_model(spec, env_ids=["ptgpo/FrozenLake-v0"], cache_dir=tmp_path)
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("pretraining the tiny model (")]
    assert len(said) == 1 and re.search(r"\(50 steps; .*\): about \d+ min at this machine's pace", said[0])
    # A short one (the tests', a bare model) says nothing.
    build_tiny_model(TinyModelSpec(**{**spec, "pretrain_steps": 10}), env_ids=["ptgpo/FrozenLake-v0"],
                     cache_dir=tmp_path)
    assert "pretraining the tiny model (" not in capsys.readouterr().err


def test_a_run_logged_to_a_file_writes_lines_and_no_progress_writes_no_bar(tmp_path):
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "PTGPO_CACHE": str(tmp_path / "cache")}
    env.pop(NO_PROGRESS_ENV, None)
    tiny = ["--algo", "grpo", "--iterations", "1", "--group-size", "2", "--tasks", "2", "--eval-episodes", "2",
            "--set", "tiny.pretrain_steps=0", "--set", "tiny.hidden_size=16", "--set", "tiny.intermediate_size=32"]
    logs = {}
    for name, extra in (("bars", []), ("quiet", ["--no-progress"])):
        with open(tmp_path / f"{name}.log", "w") as log:  # a file, not a terminal
            subprocess.run([sys.executable, "-m", "ptgpo_harness.cli", "train", *tiny, *extra, "--out",
                            str(tmp_path / name)], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=log,
                           check=True, timeout=300)
        logs[name] = (tmp_path / f"{name}.log").read_text()
    assert "\r" not in logs["bars"] and "grpo ptgpo/Household-v0: 100%" in logs["bars"]
    assert "%|" not in logs["quiet"]  # neither ours nor Hugging Face's


@pytest.mark.parametrize("argv", [["models", "list", "--no-progress"], ["models", "--no-progress", "list"],
                                  ["alfworld", "eval", "--no-progress"]])
def test_no_progress_is_taken_after_a_subcommand_s_action_too(argv):
    args = build_parser().parse_known_args(argv)[0]
    assert args.no_progress is True
