"""docker-compose.yml and the Dockerfile (issue 26): the file parses from an empty environment,
the agent waits in its own profile with a GPU reservation, the image runs as a non-root user on
runtime packages only, and the web healthcheck, run as written against gunicorn with the
compose file's environment and the production settings, succeeds.

No Docker daemon or registry is needed: `docker-compose config` validates without one (skipped
where docker-compose is not installed), and the live test runs gunicorn here.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.live import LiveStack
from tests.fixtures.services import wait_for_port

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
PROFILES = ("agent", "agent-cpu", "tls", "tools")
VARIABLE = re.compile(r"\$(?:\$|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\})")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's variable substitution: $$, ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?err}."""
    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match["name"], match["op"], match["arg"] or ""
        value = env.get(name)
        if op in (":?", "?") and (value is None or (op == ":?" and not value)):
            raise KeyError(f"{name} is required: {arg}")
        if op == ":-" and not value:
            return arg
        if op == "-" and value is None:
            return arg
        return value or ""
    return VARIABLE.sub(substitute, text)


def _interpolated(value: Any, env: dict[str, str]) -> Any:
    # Like compose: the YAML is parsed first, then each string is substituted (so "true" stays a string).
    if isinstance(value, str):
        return interpolate(value, env)
    if isinstance(value, dict):
        return {k: _interpolated(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolated(v, env) for v in value]
    return value


def compose(env: dict[str, str] | None = None) -> dict[str, Any]:
    return dict(_interpolated(yaml.safe_load(COMPOSE.read_text()), env or {}))


def _env(service: dict[str, Any]) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) for item in raw)
    return {str(k): "" if v is None else str(v) for k, v in raw.items()}


# --- the file ---------------------------------------------------------------------------------


def test_no_variable_is_required_to_parse_the_file() -> None:
    """`${X:?}` fails every compose command, `config` included, before X exists (a join token
    needs a pool that bootstrap makes, so nothing could ever start)."""
    assert not re.search(r"\$\{[^}]*:?\?", COMPOSE.read_text())
    assert compose()["services"]


def test_default_services_start_without_agents_proxy_or_one_offs() -> None:
    services = compose()["services"]
    default = {name for name, svc in services.items() if not svc.get("profiles")}
    assert default == {"postgres", "redis", "migrate", "web", "worker", "beat"}
    assert services["agent"]["profiles"] == ["agent"]
    assert services["agent-cpu"]["profiles"] == ["agent-cpu"]
    assert services["proxy"]["profiles"] == ["tls"]
    assert services["bootstrap"]["entrypoint"] == ["python", "manage.py", "bootstrap"]


def test_agents_get_no_server_credentials_and_the_gpu_agent_reserves_gpus() -> None:
    services = compose({"TRAINYARD_JOIN_TOKEN": "tyj_x"})
    for name in ("agent", "agent-cpu"):
        env = _env(services["services"][name])
        assert env["TRAINYARD_AGENT_JOIN_TOKEN"] == "tyj_x"
        assert not {"DATABASE_URL", "REDIS_URL", "TRAINYARD_SECRET_KEY", "TRAINYARD_SECRET_KEYS"} & set(env), name
        assert not services["services"][name].get("depends_on"), "an agent on another host must start alone"
    devices = services["services"]["agent"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert not services["services"]["agent-cpu"]["deploy"]


def test_tls_proxy_forwards_the_public_name_to_web() -> None:
    proxy = compose({"TRAINYARD_HOST": "portal.example.com"})["services"]["proxy"]
    assert proxy["command"][-4:] == ["--from", "portal.example.com", "--to", "web:8000"]
    web_env = _env(compose({"TRAINYARD_HOST": "portal.example.com"})["services"]["web"])
    assert "portal.example.com" in web_env["TRAINYARD_ALLOWED_HOSTS"].split(",")


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose is not installed (apt-get install docker-compose)")
@pytest.mark.parametrize("profiles", [(), PROFILES], ids=["default", "all-profiles"])
def test_docker_compose_config_validates_from_an_empty_environment(profiles: tuple[str, ...], tmp_path: Path) -> None:
    args = [a for p in profiles for a in ("--profile", p)]
    # cwd elsewhere, so an operator's .env next to the file is not read either.
    result = subprocess.run(["docker-compose", "-f", str(COMPOSE), "--project-directory", str(tmp_path), *args, "config", "-q"],
                            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)},
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr


# --- the image --------------------------------------------------------------------------------


def test_image_runs_as_a_non_root_user_on_runtime_requirements_only() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines() if line.strip() and not line.startswith("#")]
    users = [line.split()[1] for line in lines if line.upper().startswith("USER ")]
    assert users and users[-1] not in ("root", "0", "0:0"), users
    installs = " ".join(line for line in lines if "pip install" in line)
    assert "-r requirements.txt" in installs and "requirements-dev" not in installs
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".venv", ".env", "var", "tests", ".git"} <= ignored


# --- the healthcheck, live --------------------------------------------------------------------


def _healthcheck_argv(web: dict[str, Any], port: int) -> list[str]:
    test = web["healthcheck"]["test"]
    assert test[0] == "CMD" and test[1] == "python", test
    assert "127.0.0.1:8000" in " ".join(test)
    return [sys.executable, *[part.replace("127.0.0.1:8000", f"127.0.0.1:{port}") for part in test[2:]]]


@pytest.fixture
def production_web(tmp_path: Path, redis_url: str, request: pytest.FixtureRequest) -> Iterator[tuple[LiveStack, dict[str, Any]]]:
    """gunicorn started with the compose file's web command and environment (production
    settings), where only the addresses of the database, Redis and the state folder are this
    machine's (a migrated database: a fresh SQLite copy, or PostgreSQL under DATABASE_URL)."""
    from cryptography.fernet import Fernet

    operator = {"TRAINYARD_SECRET_KEY": secrets.token_urlsafe(64), "TRAINYARD_SECRET_KEYS": Fernet.generate_key().decode(),
                "TRAINYARD_HOST": "portal.example.com", **getattr(request, "param", {})}
    web = compose(operator)["services"]["web"]
    stack = LiveStack(tmp_path, redis_url)
    env = {k: v for k, v in stack.env.items() if not k.startswith("TRAINYARD_") and k != "DATABASE_URL"}
    env.update(_env(web))
    env.update({"TRAINYARD_VAR_DIR": stack.env["TRAINYARD_VAR_DIR"], "REDIS_URL": redis_url})
    if stack.db_url:
        env["DATABASE_URL"] = stack.db_url
    else:
        env.pop("DATABASE_URL")
    assert env["DJANGO_SETTINGS_MODULE"] == "portal.settings.production"
    command = [str(part) for part in web["command"]]
    assert command[0] == "gunicorn" and "0.0.0.0:8000" in command
    # Two workers, not four: the CI machine has two cores.
    argv = [sys.executable, "-m", *command]
    argv[argv.index("0.0.0.0:8000")] = f"127.0.0.1:{stack.port}"
    argv[argv.index("-w") + 1] = "2"
    stack.env = env
    try:
        stack.spawn("web", argv)
        wait_for_port(stack.port, 60)
        yield stack, web
    finally:
        stack.close()


def _get(url: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, headers=headers)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    try:
        with urllib.request.build_opener(NoRedirect()).open(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def _run_healthcheck(stack: LiveStack, web: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    argv = _healthcheck_argv(web, stack.port)
    deadline = time.monotonic() + 60
    while True:  # what compose does: retry until it passes or the retries run out
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30, env={"PATH": os.environ.get("PATH", "")})
        if result.returncode == 0 or time.monotonic() > deadline:
            return result
        time.sleep(1)


@pytest.mark.live
@pytest.mark.parametrize("production_web", [{}, {"TRAINYARD_SSL_REDIRECT": "true"}], ids=["defaults", "ssl-redirect"],
                         indirect=True)
def test_the_compose_healthcheck_passes_against_production_gunicorn(production_web: tuple[LiveStack, dict[str, Any]]) -> None:
    stack, web = production_web
    result = _run_healthcheck(stack, web)
    assert result.returncode == 0, result.stderr + "\n" + stack.log("web")[-3000:]
    # What the TLS proxy sends: the public name, and the scheme it was reached on.
    url = f"http://127.0.0.1:{stack.port}/healthz"
    assert _get(url, {"Host": "portal.example.com", "X-Forwarded-Proto": "https"}) == 200
    # A name the deployment does not serve is refused (ALLOWED_HOSTS is not a wildcard).
    assert _get(url, {"Host": "elsewhere.example.net", "X-Forwarded-Proto": "https"}) == 400
    # Why the check sends X-Forwarded-Proto: with the redirect on, plain HTTP is sent to HTTPS.
    redirect = _env(web)["TRAINYARD_SSL_REDIRECT"] == "true"
    assert _get(url, {"Host": "127.0.0.1"}) == (301 if redirect else 200)
