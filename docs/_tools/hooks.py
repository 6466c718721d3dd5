"""MkDocs hooks: the tables that the code already knows are generated from it at build time.

A page asks for one with a marker on a line of its own; the hook replaces it with Markdown:

``<!-- ptgpo:cli -->``
    ``ptgpo train``'s flags, from :func:`ptgpo_algos.config.cli_fields`, the same list the command's
    argument parser is built from.
``<!-- ptgpo:config SECTION -->``
    every field of one config section with its default, flat name, flag and help (the fields'
    metadata in :mod:`ptgpo_algos.config`).
``<!-- ptgpo:estimator NAME -->``
    an estimator's config keys, defaults and accepted values, from its registration.
``<!-- ptgpo:reported [METHOD|METHOD...] -->``
    the rows of ``leaderboard/reported.yaml`` for those methods (all of them without), with their sources.
``<!-- ptgpo:environments -->``
    the registered environments and their one-line descriptions.

Retyping any of these would let the docs drift from the code; generating them means a renamed flag or
a changed default shows up in the next build. An unknown marker fails the build.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]

MARKER = re.compile(r"^<!-- ptgpo:(\S+)(?: (.*?))? -->$", re.MULTILINE)


def _text(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) or value == "" else value
    return text.replace("|", "\\|").replace("\n", " ")


def _cell(value: Any) -> str:
    """Text for a table cell: a ``<placeholder>`` is escaped, or the page would take it for an HTML tag."""
    return _text(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _code(value: Any) -> str:
    return f"`{_text(value)}`"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def cli_table(_: str | None) -> str:
    """``ptgpo train``'s generated flags."""
    from ptgpo_algos.config import cli_fields

    rows = [[f"`--{f.flag}`", f"`{f.path}`", f.type.__name__, _code(f.default), _cell(f.help)]
            for f in cli_fields()]
    return _table(["flag", "config field", "type", "default", "help"], rows)


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    value = f.default_factory()
    if dataclasses.is_dataclass(value):  # a nested section (rollouts.patr): its fields
        return dataclasses.asdict(value)
    if isinstance(value, list) and len(value) > 4:  # the 64 evaluation seeds
        return f"{value[0]}..{value[-1]} ({len(value)} seeds)"
    return value


def config_table(section: str | None) -> str:
    """Every field of one section of the training config."""
    from ptgpo_algos.config import SECTIONS, flat_name

    if section not in SECTIONS:
        raise ValueError(f"ptgpo:config needs a section, one of {', '.join(SECTIONS)}; got {section!r}")
    rows = []
    for f in dataclasses.fields(SECTIONS[section]):
        if (section, f.name) == ("rollouts", "settings"):
            rows += _strategy_settings_rows()
            continue
        flat = flat_name(f)
        flag = f.metadata.get("flag")
        rows.append([f"`{section}.{f.name}`", _code(_default(f)), f"`{flat}`" if flat else "",
                     f"`--{flag}`" if flag else "", _cell(f.metadata.get("help", ""))])
    return _table(["field", "default", "flat name", "flag", "help"], rows)


def _strategy_settings_rows() -> list[list[str]]:
    """One row per rollout strategy's settings (``rollouts.patr``...): a config spells them by section."""
    from ptgpo_algos.rollouts.registry import settings_sections

    return [[f"`rollouts.{key}`", _code(strategy.default_settings()), f"`{key}`" if strategy.flat else "", "",
             _cell(f"{strategy.name}: {strategy.summary}; its settings ({strategy.settings.__module__}."
                   f"{strategy.settings.__name__}); its groups are sized by them, so group_size and "
                   "initial_rollouts do not apply")]
            for key, strategy in settings_sections().items()]


def estimator_table(name: str | None) -> str:
    """An estimator's config keys as its registration declares them."""
    from ptgpo_algos.advantages import ESTIMATORS

    spec = ESTIMATORS.get(name)
    rows = [[f"`{key}`", _code(default), _cell(spec.keys[key].meaning), _cell(spec.keys[key].expected)]
            for key, default in spec.defaults.items()]
    return _table(["key", "default", "meaning", "accepted"], rows)


def reported_table(methods: str | None) -> str:
    """The papers' figures for some methods (every method without ``methods``), as
    ``leaderboard/reported.yaml`` records them."""
    from leaderboard.protocols import reported_protocol
    from leaderboard.reported import DEFAULT_REPORTED, load_reported

    wanted = {m.strip().lower() for m in (methods or "").split("|") if m.strip()}
    reported = load_reported(DEFAULT_REPORTED)
    rows, used = [], []
    for row in reported.rows:
        if wanted and row.method.split(" (")[0].lower() not in wanted:
            continue
        for env, metrics in row.results.items():
            shown = ", ".join(f"{metric} {value.value:g}" + (f" ± {value.pm:g}" if value.pm is not None else "")
                              for metric, value in metrics.items())
            rows.append([_cell(row.method), _cell(row.model or ""), env, shown, f"[{row.source}]",
                         _cell(reported_protocol(row.protocol, row.conditions))])
        if row.source not in used:
            used.append(row.source)
    if not rows:
        return ("No paper reports this method on the benchmarks `leaderboard/reported.yaml` covers; the "
                "leaderboard shows only measured rows for it.")
    notes = [f"- **[{key}]** {reported.sources[key].citation} ({reported.sources[key].quality or 'quality not stated'}). "
             f"{reported.sources[key].setup or ''}".rstrip() for key in used]
    header = ["method", "model", "benchmark", "reported (%)", "source", "protocol"]
    return "\n\n".join([_table(header, rows), "\n".join(notes),
                        f"!!! warning \"Transcription\"\n    {reported.caveat}"])


def environments_table(_: str | None) -> str:
    """The environments registered by this package."""
    import ptgpo_envs

    rows = [[f"`{env_id}`", _cell(ptgpo_envs.get_spec(env_id).description)] for env_id in ptgpo_envs.env_ids()]
    return _table(["id", "what it is"], rows)


GENERATORS: dict[str, Callable[[str | None], str]] = {
    "cli": cli_table, "config": config_table, "estimator": estimator_table, "reported": reported_table,
    "environments": environments_table,
}


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Replace each ``<!-- ptgpo:... -->`` marker of a page with the table it names."""
    if str(ROOT) not in sys.path:  # the working tree's packages, not an installed copy, are what the docs describe
        sys.path.insert(0, str(ROOT))

    def generate(match: re.Match[str]) -> str:
        kind, argument = match.group(1), match.group(2)
        if kind not in GENERATORS:
            raise ValueError(f"{page.file.src_path}: unknown marker ptgpo:{kind}; known: {', '.join(GENERATORS)}")
        return GENERATORS[kind](argument)

    return MARKER.sub(generate, markdown)
