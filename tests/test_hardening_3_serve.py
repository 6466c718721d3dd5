"""A served environment as a public surface, checked without OpenEnv installed: the server's limits and
checks (:mod:`ptgpo_envs.integrations.serving`), how ALFWorld takes a game from reset options, its engine
under threads, and ``ptgpo serve``'s flags. The served end to end (HTTP and WebSocket) is in
``tests/test_openenv_integration.py``. Each test states the guarantee it checks.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path

import gymnasium as gym
import pytest

import ptgpo_envs  # noqa: F401 (registers the environments)
from ptgpo_harness.cli import main
from ptgpo_envs.integrations.serving import BodySizeLimit, ServerConfig, check_reset_request

ALFWORLD_DATA = Path(__file__).resolve().parents[2] / "shared" / "alfworld"
ALFWORLD_KWARGS = {"split": "eval_out_of_distribution", "data_path": str(ALFWORLD_DATA)}
needs_alfworld = pytest.mark.skipif(not ALFWORLD_DATA.is_dir(), reason="needs ../shared/alfworld")


def _alfworld(**kwargs):
    pytest.importorskip("alfworld")
    return gym.make("ptgpo/ALFWorld-v0", **{**ALFWORLD_KWARGS, **kwargs}).unwrapped


# =========================================================================== the server's configuration
def test_only_text_environments_are_served():
    with pytest.raises(ValueError, match=r"CartPole-v1 is a CartPoleEnv, not a text environment"):
        ServerConfig("CartPole-v1")
    assert ServerConfig("ptgpo/Household-v0").env_class.__name__ == "HouseholdEnv"


@pytest.mark.parametrize("field, value", [("max_sessions", 0), ("max_body_bytes", -1), ("snapshot_capacity", True),
                                          ("idle_timeout_s", 0.5), ("idle_timeout_s", float("nan"))])
def test_server_limits_are_checked(field, value):
    with pytest.raises(ValueError, match=field):
        ServerConfig("ptgpo/Household-v0", **{field: value})


@pytest.mark.parametrize("seed, options, snapshots, message", [
    (-1, None, None, "seed"), ("0", None, None, "seed"), (None, [1], None, "options must be a JSON object"),
    (None, None, "yes", "snapshots"),
])
def test_malformed_reset_arguments_are_client_errors(seed, options, snapshots, message):
    with pytest.raises(ValueError, match=message):
        check_reset_request(ServerConfig("ptgpo/Household-v0"), seed, options, snapshots)


@needs_alfworld
def test_a_client_cannot_make_the_server_open_a_path(tmp_path):
    pytest.importorskip("alfworld")
    config = ServerConfig("ptgpo/ALFWorld-v0", ALFWORLD_KWARGS)
    secret = tmp_path / "secret.json"
    secret.write_text('{"pddl_problem": "TOP SECRET"}')
    with pytest.raises(ValueError, match=r"options \['game_path'\] name files on the server's machine"):
        check_reset_request(config, 0, {"game_path": str(secret)}, None)
    check_reset_request(config, 0, {"game": 3}, None)


# =========================================================================== ALFWorld's game choice
@needs_alfworld
def test_alfworld_games_by_id_and_a_path_is_not_an_id(tmp_path):
    env = _alfworld()
    try:
        _, info = env.reset(options={"game": 5})
        game_id = info["game_id"]
        assert game_id.count("/") == 1 and not Path(game_id).is_absolute()
        observation, again = env.reset(options={"game": game_id})
        assert again["gamefile"] == info["gamefile"] == env.games[5].path
        # A path (existing, or anywhere) is no id: refused without looking at the disk.
        secret = tmp_path / "secret.json"
        secret.write_text('{"pddl_problem": "TOP SECRET"}')
        for path in (str(secret), info["gamefile"], "../../../../etc/passwd"):
            with pytest.raises(ValueError, match="no game") as refused:
                env.reset(options={"game": path})
            assert "TOP SECRET" not in str(refused.value)
        with pytest.raises(ValueError, match="one of"):
            env.reset(options={"game": 1, "game_path": info["gamefile"]})
        # The local option still plays any game file of this machine.
        assert env.reset(options={"game_path": str(Path(info["gamefile"]).parent)})[0] == observation
    finally:
        env.close()


@needs_alfworld
def test_a_json_game_that_is_not_pddl_is_named_in_one_line_without_its_content(tmp_path):
    env = _alfworld()
    source = Path(env.games[0].path).parent
    game = tmp_path / source.parent.name / source.name
    shutil.copytree(source, game)
    content = json.loads((game / "game.tw-pddl").read_text())
    content["pddl_problem"] = "(define (problem TOP SECRET\n LINE TWO"
    (game / "game.tw-pddl").write_text(json.dumps(content))
    try:
        with pytest.raises(ValueError, match=r"not a loadable ALFWorld game \(\w+\): the file is") as refused:
            env.reset(options={"game_path": str(game)})
        assert "SECRET" not in str(refused.value) and "\n" not in str(refused.value)
    finally:
        env.close()


@needs_alfworld
def test_alfworld_engines_in_two_threads_do_not_corrupt_each_other():
    """TextWorld parses every game's text with one parser per process: a game loading in one thread while
    another steps used to fail (IndexError in the parser, reported as a damaged game file)."""
    stepping, loading = _alfworld(), _alfworld()
    stepping.reset(options={"game": 0})
    errors: list[BaseException] = []
    stop = threading.Event()

    def step_on() -> None:
        try:
            while not stop.is_set():
                stepping.step("look")
        except BaseException as error:  # noqa: BLE001 (checked in the test's thread)
            errors.append(error)

    thread = threading.Thread(target=step_on)
    thread.start()
    try:
        for game in (1, 2):
            loading.reset(options={"game": game})
    finally:
        stop.set()
        thread.join(timeout=120)
        stepping.close()
        loading.close()
    assert not errors, errors


# =========================================================================== request size
def _call(middleware: BodySizeLimit, chunks: list[bytes], content_length: int | None) -> tuple[list, list]:
    """Run one HTTP request through ``middleware``; (what it sent back, the bodies the app read)."""
    sent, seen = [], []

    async def app(scope, receive, send):
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    middleware.app = app
    messages = [{"type": "http.request", "body": chunk, "more_body": index < len(chunks) - 1}
                for index, chunk in enumerate(chunks)]
    headers = [] if content_length is None else [(b"content-length", str(content_length).encode())]

    async def receive():
        return messages.pop(0)

    async def send(message):
        sent.append(message)

    asyncio.run(middleware({"type": "http", "headers": headers}, receive, send))
    return sent, seen


def test_a_request_body_over_the_limit_gets_413_before_the_app_reads_it():
    limit = BodySizeLimit(None, max_bytes=1000)
    sent, seen = _call(limit, [b"x" * 10], content_length=50_000_000)  # declared too large: nothing read
    assert sent[0]["status"] == 413 and not seen
    assert "--max-request-bytes" in json.loads(sent[1]["body"])["detail"]
    sent, seen = _call(limit, [b"x" * 600, b"x" * 600, b"x" * 600], content_length=None)  # streamed, no length
    assert sent[0]["status"] == 413 and not seen
    sent, seen = _call(limit, [b"x" * 600, b"y" * 400], content_length=1000)  # at the limit: passed whole
    assert sent[0]["status"] == 200 and seen == [b"x" * 600 + b"y" * 400]


# =========================================================================== ptgpo serve's flags
@pytest.mark.parametrize("argv, message", [
    (["--kwargs", "[" * 100_000 + "]" * 100_000], "--kwargs is nested too deeply"),
    (["--idle-timeout", "0"], "--idle-timeout"),
    (["--idle-timeout", "nan"], "--idle-timeout"),
    (["--max-request-bytes", "10"], "--max-request-bytes"),
])
def test_serve_flags_fail_in_one_line_with_exit_2(argv, message, capsys):
    assert main(["serve", "ptgpo/Household-v0", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1
