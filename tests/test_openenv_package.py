"""An environment's OpenEnv package as text (:mod:`ptgpo_envs.integrations.openenv_package`), checked
without OpenEnv installed: the files parse as the formats OpenEnv's tooling reads, and they carry the
environment's id, kwargs and limits. OpenEnv's own validator runs on written packages in
``tests/test_openenv_integration.py`` (``bash scripts/test_env_integrations.sh``).
"""

from __future__ import annotations

import ast
import json
import tomllib

import pytest
import yaml

from ptgpo_harness.cli import main
from ptgpo_envs.integrations.openenv_package import package_files, package_name

ENV_ID = "ptgpo/Household-v0"
LIMITS = {"idle_timeout_s": 30.0, "max_body_bytes": 4096, "max_sessions": 3, "snapshot_capacity": 5}
#: Quotes, a colon, a backslash, a newline and non-ASCII: what breaks YAML or TOML written by hand.
AWKWARD = 'a "quoted": text\\ with\nlines, ünïcode and 🙂'


def _files(kwargs=None, description="Household tasks.") -> dict[str, str]:
    return package_files(ENV_ID, kwargs if kwargs is not None else {"difficulty": "easy"}, LIMITS, description,
                         8123, "0.1.0", "0.3.0")


@pytest.mark.parametrize("env_id, name", [
    ("ptgpo/Household-v0", "ptgpo_household_v0"),
    ("plugin/Web.Shop-v12", "plugin_web_shop_v12"),
    ("9lives/Cat-v0", "env_9lives_cat_v0"),
])
def test_package_name_is_a_python_identifier(env_id, name):
    assert package_name(env_id) == name and name.isidentifier()


def test_manifest_is_the_openenv_init_layout_with_the_registry_description():
    manifest = yaml.safe_load(_files(description=AWKWARD)["openenv.yaml"])
    assert manifest == {"spec_version": 1, "name": "ptgpo_household_v0", "type": "space", "runtime": "fastapi",
                        "app": "server.app:app", "port": 8123, "description": AWKWARD}


def test_pyproject_pins_ptgpo_and_openenv_and_names_the_server_main():
    project = tomllib.loads(_files()["pyproject.toml"])
    assert project["project"]["dependencies"] == ["ptgpo[openenv]==0.1.0", "openenv-core==0.3.0"]
    assert project["project"]["scripts"] == {"server": "ptgpo_household_v0.server.app:main"}
    assert project["tool"]["setuptools"]["package-dir"] == {"ptgpo_household_v0": ".",
                                                            "ptgpo_household_v0.server": "server"}


def _json_constant(tree: ast.Module, name: str):
    """The JSON text ``name = json.loads("...")`` assigns in ``tree``, decoded (read, never run)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and [target.id for target in node.targets] == [name]:
            return json.loads(node.value.args[0].value)
    raise AssertionError(f"no {name} in server/app.py")


def test_server_app_carries_the_kwargs_and_limits_and_a_guarded_main():
    kwargs = {"difficulty": "easy", "note": AWKWARD}
    tree = ast.parse(_files(kwargs)["server/app.py"])
    assert _json_constant(tree, "ENV_KWARGS") == kwargs and _json_constant(tree, "LIMITS") == LIMITS
    assert any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body)
    guard = [node for node in tree.body if isinstance(node, ast.If)]
    assert len(guard) == 1 and ast.unparse(guard[0].test) == "__name__ == '__main__'"
    assert "main(" in ast.unparse(guard[0])


def test_write_openenv_package_refuses_a_folder_with_files(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["serve", ENV_ID, "--write-openenv-package", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--write-openenv-package" in err and "empty folder" in err and "Traceback" not in err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt"]
