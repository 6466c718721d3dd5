"""``ptgpo show``: a run's recorded iterations as HTML pages (:mod:`ptgpo_algos.viewer`): the trees and
trajectories drawn, every estimator's credit computed on the recorded groups as on the groups the
trainer held, the zero-credit summary, and a page that stays inert whatever the recorded text says."""

from __future__ import annotations

import json
import re
from collections import Counter
from html.parser import HTMLParser

import pytest
from viewer_runs import recorded_config, train_recorded

from ptgpo_algos.advantages import ESTIMATORS, StepTable, estimate_advantages
from ptgpo_algos.training.callbacks import Callback
from ptgpo_harness.cli import main
from ptgpo_algos.config import TrainConfig
from ptgpo_algos.critic.settings import uses_critic
from ptgpo_algos.records import Context, Step, Trajectory
from ptgpo_algos.files import atomic_write_text, read_jsonl
from ptgpo_algos.rollouts.recordings import write_iteration
from ptgpo_algos.viewer.credit import decision_credit, estimator_credits
from ptgpo_algos.viewer.page import CSP


class _Page(HTMLParser):
    """Every start tag with its attributes, and the text of each ``pre`` and of each summary's spans."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.ends: Counter[str] = Counter()
        self.pre: list[str] = []
        self.spans: list[tuple[str, str]] = []
        self._open: list[tuple[str, str, list[str]]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag in ("pre", "span"):
            self._open.append((tag, attrs.get("class") or "", []))

    def handle_endtag(self, tag):
        self.ends[tag] += 1
        if tag in ("pre", "span") and self._open:
            kind, cls, parts = self._open.pop()
            (self.pre.append("".join(parts)) if kind == "pre" else self.spans.append((cls, "".join(parts))))

    def handle_data(self, data):
        for _, _, parts in self._open:
            parts.append(data)

    def starts(self, tag: str, cls: str | None = None) -> list[dict[str, str | None]]:
        return [attrs for name, attrs in self.tags if name == tag and (cls is None or attrs.get("class") == cls)]


def _number(value: float) -> str:
    return f"{value:+.3f}" if value else "0"


def _rows(run, iteration):
    return list(read_jsonl(run / "rollouts" / f"iteration-{iteration:06d}.jsonl"))


def _forks(rows):
    """Whether each row's decision is at a fork, from the rows alone: the same history (by content) with
    two or more distinct actions in its group."""
    actions: dict[tuple, set] = {}
    key = {id(row): (row["group"], json.dumps(row["history"]), row["observation"]) for row in rows}
    for row in rows:
        actions.setdefault(key[id(row)], set()).add(row["action"])
    return [len(actions[key[id(row)]]) >= 2 for row in rows]


@pytest.fixture(scope="module")
def tree_run(tmp_path_factory):
    return train_recorded(tmp_path_factory.mktemp("tree") / "run", "ptgpo", "tree")


@pytest.fixture(scope="module")
def failing_linear_run(tmp_path_factory):
    # The goal is four steps away and episodes end after two: every group fails alike, so GiGPO credits
    # nothing and PTGPO takes coverage credit.
    return train_recorded(tmp_path_factory.mktemp("linear") / "run", "gigpo", "linear",
                          env_kwargs={"desc": ["SFF", "FFF", "FFG"]}, max_steps=2)


def test_a_ptgpo_tree_run_is_drawn_as_its_prefix_trees_with_the_recorded_credit(tree_run, tmp_path):
    assert main(["show", str(tree_run), "--out", str(tmp_path / "pages")]) == 0
    assert sorted(p.name for p in (tmp_path / "pages").iterdir()) == [
        "index.html", "iteration-000001.html", "iteration-000002.html"]
    rows = _rows(tree_run, 2)
    page = _Page((tmp_path / "pages" / "iteration-000002.html").read_text())
    assert len(page.starts("ul", "tree")) == len({row["group"] for row in rows})
    assert not page.starts("div", "trajectories")
    # One <details> per decision (and one per group's table); every decision's advantage as recorded.
    assert len(page.starts("details")) == len(rows) + len(page.starts("section", "group"))
    shown = sorted(text for cls, text in page.spans if re.fullmatch(r"a e0 (pos|neg|zero)", cls))
    assert shown == sorted(f"A {_number(row['advantage'])}" for row in rows)
    forks = _forks(rows)
    badges = Counter(cls for cls, _ in page.spans if cls.startswith("badge"))
    assert badges["badge fork"] == sum(forks) > 0
    assert badges["badge backoff a e0"] == len(rows) - sum(forks) > 0  # PTGPO backs off where no fork
    assert badges["badge invalid"] == sum(not row["valid"] for row in rows)
    assert badges["badge lost"] >= sum(len(row["trajectories"]) > 1 for row in rows) > 0  # shared decisions: ×n
    # Each decision's observation and response are on the page, behind its <details>.
    assert Counter(page.pre) >= Counter(row["observation"] for row in rows)
    labels = [text for name, attrs in page.tags if name == "label" for text in [attrs.get("for")]]
    assert labels == [f"e{i}" for i in range(len(ESTIMATORS))]


def test_a_gigpo_linear_run_is_drawn_as_trajectories_with_its_zero_credit_groups(failing_linear_run):
    assert main(["show", str(failing_linear_run), "--iteration", "1"]) == 0
    pages = failing_linear_run / "show"
    assert sorted(p.name for p in pages.iterdir()) == ["index.html", "iteration-000001.html"]
    text = (pages / "iteration-000001.html").read_text()
    page = _Page(text)
    rows = _rows(failing_linear_run, 1)
    groups = sorted({row["group"] for row in rows})
    assert not page.starts("ul", "tree") and len(page.starts("div", "trajectories")) == len(groups)
    assert all(row["advantage"] == 0 for row in rows)
    listed = re.search(r"the run's estimator:</p><ul>(.*?)</ul>", text).group(1)
    assert listed == "".join(f'<li><a href="#group-{g}">group {g}</a>: every trajectory&#x27;s return was equal, '
                             "and no coverage credit applied</li>" for g in groups)
    # PTGPO, computed on the same groups, takes coverage credit in each of them.
    ptgpo = [cls for cls, _ in page.spans if cls.startswith("badge coverage")]
    index = ["gigpo", *(name for name in ESTIMATORS.names() if name != "gigpo")].index("ptgpo")  # the run's first
    assert ptgpo == [f"badge coverage a e{index}"] * len(groups)
    assert any(text != "A 0" for cls, text in page.spans if cls.startswith(f"a e{index} "))


class _Keep(Callback):
    def __init__(self):
        self.seen = {}

    def on_rollouts(self, run, iteration, batch, advantages):
        self.seen[iteration] = batch


def test_every_estimator_on_the_recorded_groups_equals_it_on_the_groups_the_trainer_held(tmp_path):
    from ptgpo_algos.training.trainer import Trainer

    # EMPG reads the decisions' entropies and PlanPO the responses' lengths: the recording keeps both.
    config = recorded_config(tmp_path / "run", "ptgpo", "tree", algo_config={"empg": True})
    keep = _Keep()
    Trainer(config, progress=False, callbacks=[keep]).train()
    rows = _rows(tmp_path / "run", 2)
    assert all(row["response_tokens"] > 0 and row["entropy"] is not None for row in rows)
    held = StepTable.from_batch(keep.seen[2])
    checked = 0
    for credit in estimator_credits(config, 2, rows):
        if credit.error is not None:
            # Its own strategy's records, or a critic's values, which a ptgpo run does not have.
            assert ESTIMATORS.get(credit.name).strategy not in (None, "tree") or uses_critic(credit.name), credit
            continue
        keys = dict(config.algorithm.config) if credit.name == "ptgpo" else {"empg": config.algorithm.config["empg"]}
        if "progress" in ESTIMATORS.get(credit.name).defaults:
            keys["progress"] = 1.0
        expected = estimate_advantages(credit.name, held, **keys).advantages.tolist()
        got = [a for group in credit.advantages for trajectory in group for a in trajectory]
        assert got == pytest.approx(expected, abs=1e-9), credit.name
        checked += 1
    assert checked >= len(ESTIMATORS) - 4  # 3spo's and bpo's strategies, ppo's and hiper's critics
    assert [decision_credit(row, estimator_credits(config, 2, rows)[0]) for row in rows] == pytest.approx(
        [row["advantage"] for row in rows])


def test_show_refuses_what_it_cannot_draw_before_writing(tree_run, tmp_path, capsys):
    assert main(["show", str(tmp_path / "missing")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert main(["show", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert "no recorded rollouts" in error and "--record-rollouts N" in error
    assert main(["show", str(tree_run), "--iteration", "1", "7", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().endswith("--iteration 7: not recorded by " + str(tree_run)
                                                    + "; it recorded iterations 1, 2")
    assert not (tmp_path / "out").exists()


HOSTILE = ["<script>alert(1)</script>", "</details></li></ul><img src=x onerror=alert(1)>",
           "\" onmouseover=\"alert(1)", "' autofocus onfocus='alert(1)", "</pre></style><style>*{display:none}",
           "<a href=\"https://evil.example/\">x</a>", "&lt;escaped&gt; &amp; <!-- -->"]


def _hostile_run(run):
    """A run folder whose one recorded group holds hostile text in every recorded string."""
    config = recorded_config(run, "ptgpo", "tree")
    run.mkdir(parents=True)
    atomic_write_text(run / "config.json", json.dumps(config.to_dict()))
    shared = Step(HOSTILE[0], HOSTILE[1], 0.0, True,
                  context=Context(HOSTILE[2], HOSTILE[3], HOSTILE[:3], []), extras={HOSTILE[4]: HOSTILE[5]})
    later = [Step(HOSTILE[5], text, float(i), i != 1, context=Context(HOSTILE[2], text, [text], [(HOSTILE[3], HOSTILE[1])]))
             for i, text in enumerate(HOSTILE[4:])]
    group = [Trajectory([shared, step], {"won": bool(i % 2), HOSTILE[6]: HOSTILE[0]}) for i, step in enumerate(later)]
    write_iteration(run / "rollouts", 1, HOSTILE[6], [group, group[:1]], [[[0.5, 1.0]] * 3, [[0.0, 0.0]]])
    return config


def test_hostile_recorded_text_is_escaped_and_the_page_loads_nothing(tmp_path):
    run = tmp_path / "run<img src=x onerror=alert('x')>"
    _hostile_run(run)
    assert main(["show", str(run), "--out", str(tmp_path / "pages")]) == 0
    text = (tmp_path / "pages" / "iteration-000001.html").read_text()
    page = _Page(text)
    assert [name for name, _ in page.tags if name in ("script", "img", "iframe", "object", "embed", "link")] == []
    attributes = {key for _, attrs in page.tags for key in attrs}
    assert not [key for key in attributes if key.startswith("on")] and "src" not in attributes
    assert all(re.fullmatch(r"#group-\d+", attrs["href"]) for attrs in page.starts("a"))
    assert [attrs["content"] for attrs in page.starts("meta") if attrs.get("http-equiv")] == [CSP]
    assert "default-src 'none'" in CSP
    # Every tag opened is closed: no recorded text ended an element early.
    for tag in ("details", "summary", "pre", "ul", "li", "section", "table", "style"):
        assert page.ends[tag] == len(page.starts(tag)), tag
    assert len(page.starts("style")) == 1
    # The recorded text reads back exactly, as text.
    for value in (HOSTILE[3], HOSTILE[4], HOSTILE[5]):
        assert value in page.pre
    for raw in HOSTILE[:6]:
        assert raw not in text
    index = (tmp_path / "pages" / "index.html").read_text()
    assert "<img" not in index and "run&lt;img src=x onerror=alert(&#x27;x&#x27;)&gt;" in index


BENCH = """name: viewer-cell
budget: 120
seeds: [0]
policy: {model: tiny, device: cpu, tiny: {hidden_size: 32, pretrain_steps: 0}, mode: choose, group_size: 4,
         tasks_per_iteration: 2, eval_every: 2}
environments:
  - {label: lake, id: ptgpo/FrozenLake-v0, kwargs: {desc: [SFF, FHF, FFG]}, max_steps: 6,
     train_seeds: {start: 0, count: 1000}, eval_seeds: {start: 100000, count: 4}}
methods:
  - {name: ptgpo, algo: ptgpo, rollout: tree, train: {run: {record_rollouts: 2}}}
"""


@pytest.mark.slow
def test_a_benchmark_cells_run_folder_is_drawn_the_same_way(tmp_path):
    (tmp_path / "bench.yaml").write_text(BENCH)
    assert main(["bench", str(tmp_path / "bench.yaml"), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    cell = tmp_path / "out" / "runs" / "lake__ptgpo__seed0"
    assert main(["show", str(cell)]) == 0
    recorded = sorted(int(p.stem.split("-")[1]) for p in (cell / "rollouts").iterdir())
    assert recorded and recorded[0] == 2
    assert sorted(p.name for p in (cell / "show").iterdir()) == ["index.html"] + [
        f"iteration-{i:06d}.html" for i in recorded]
    assert '<ul class="tree">' in (cell / "show" / f"iteration-{recorded[0]:06d}.html").read_text()


def test_a_placebo_runs_page_shows_its_recorded_advantages_and_says_why_they_differ(tmp_path):
    run = train_recorded(tmp_path / "run", "gigpo", "linear", placebo=True, iterations=1, eval_every=1,
                         checkpoint_every=1)
    assert main(["show", str(run)]) == 0
    text = (run / "show" / "iteration-000001.html").read_text()
    assert "differ from gigpo computed again on these groups: the run is a placebo" in text
    rows = _rows(run, 1)
    shown = sorted(t for cls, t in _Page(text).spans if re.fullmatch(r"a e0 (pos|neg|zero)", cls))
    assert shown == sorted(f"A {_number(row['advantage'])}" for row in rows)
