"""Config edge cases (~/.paddle/config and the environment), without a server."""

from __future__ import annotations

import os
import stat

import pytest

from paddlectl import config as cfgmod
from paddlectl.errors import ConfigError

from .conftest import run_cli, write_config

SEED = """datacenters:
- name: datacenter1
  username: alice
  password: secret
  endpoint: http://cloud.paddlepaddle.org
current-datacenter: datacenter1
"""


def test_seed_004_config_is_read_as_written(clean_env):
    path = write_config(clean_env / ".paddle" / "config", SEED)
    cfg = cfgmod.load()
    assert cfg.path == path and cfg.exists
    dc = cfgmod.select(cfg, env={})
    assert (dc.name, dc.username, dc.password, dc.endpoint) == ("datacenter1", "alice", "secret",
                                                                 "http://cloud.paddlepaddle.org")
    assert dc.api_url == "http://cloud.paddlepaddle.org/api/v2/"


def test_missing_config_says_how_to_make_one(clean_env):
    res = run_cli("get", "jobs")
    assert res.code == 1
    assert "does not exist" in res.err and "paddlectl login" in res.err and "current-datacenter" in res.err
    assert "Traceback" not in res.err


@pytest.mark.parametrize("text, message", [
    ("datacenters: [oops", "not valid YAML"),
    ("- just\n- a list\n", "must be a YAML mapping"),
    ("datacenters: 5\n", "must be a list"),
    ("datacenters:\n- name: a\n  username: u\n", "has no endpoint"),
    ("datacenters:\n- username: u\n  endpoint: http://x\n", "has no name"),
    ("datacenters:\n- {name: a, endpoint: http://x}\n- {name: a, endpoint: http://y}\n", "listed twice"),
    ("datacenters:\n- {name: a, endpoint: http://x}\ncurrent-datacenter: b\n", "current-datacenter 'b' is not"),
    ("datacenters:\n- {name: a, endpoint: http://x}\n- {name: b, endpoint: http://y}\n", "set current-datacenter"),
    ("datacenters: []\n", "lists no datacenters"),
    ("hello: world\n", "no 'datacenters' list"),
])
def test_broken_configs_give_a_clear_message(clean_env, text, message):
    write_config(clean_env / ".paddle" / "config", text)
    res = run_cli("get", "jobs")
    assert res.code == 1, res
    assert message in res.err, res.err
    assert "Traceback" not in res.err


def test_unknown_datacenter_lists_the_known_ones(clean_env):
    write_config(clean_env / ".paddle" / "config", SEED)
    res = run_cli("-datacenter", "nope", "get", "jobs")
    assert res.code == 1 and "no datacenter named 'nope'" in res.err and "datacenter1" in res.err


def test_datacenter_flag_env_and_current_choose_the_entry(clean_env):
    two = SEED.replace("current-datacenter: datacenter1\n", "") + (
        "- name: dc2\n  username: bob\n  password: pw\n  endpoint: dc2.example.com\n"
        "current-datacenter: datacenter1\n")
    path = write_config(clean_env / ".paddle" / "config", two)
    cfg = cfgmod.load(path)
    assert cfgmod.select(cfg, env={}).name == "datacenter1"
    assert cfgmod.select(cfg, "dc2", env={}).endpoint == "dc2.example.com"
    assert cfgmod.select(cfg, env={"PADDLECTL_DATACENTER": "dc2"}).username == "bob"
    # the flag beats the environment
    assert cfgmod.select(cfg, "datacenter1", env={"PADDLECTL_DATACENTER": "dc2"}).name == "datacenter1"
    # an endpoint without a scheme gets https://
    assert cfgmod.select(cfg, "dc2", env={}).api_url == "https://dc2.example.com/api/v2/"


def test_environment_overrides_and_file_free_use(tmp_path):
    cfg = cfgmod.load(tmp_path / "missing")
    dc = cfgmod.select(cfg, env={"PADDLECTL_ENDPOINT": "http://h:8000/", "PADDLECTL_TOKEN": "t0k"})
    assert (dc.endpoint, dc.token, dc.name) == ("http://h:8000/", "t0k", "default")
    assert dc.api_url == "http://h:8000/api/v2/"
    with pytest.raises(ConfigError, match="does not exist"):
        cfgmod.select(cfg, env={})


def test_paddle_config_variable_names_another_file(tmp_path, monkeypatch):
    path = write_config(tmp_path / "elsewhere.yaml", SEED)
    monkeypatch.setenv("PADDLE_CONFIG", str(path))
    assert cfgmod.load().path == path
    assert run_cli("config", "-o", "json").code == 0


def test_seed_003_older_form_is_understood(clean_env):
    write_config(clean_env / ".paddle" / "config", "datacenter1:\n  username: user\n  endpoint: dc1.paddlepaddle.org\n")
    dc = cfgmod.select(cfgmod.load(), env={})
    assert (dc.name, dc.username, dc.endpoint) == ("datacenter1", "user", "dc1.paddlepaddle.org")


def test_readable_secrets_are_warned_about(clean_env):
    path = write_config(clean_env / ".paddle" / "config", SEED)
    os.chmod(path, 0o644)
    res = run_cli("config")
    assert "readable by others" in res.err and "chmod 600" in res.err


def test_config_view_hides_secrets_and_use_switches(clean_env):
    path = write_config(clean_env / ".paddle" / "config", SEED.replace("current-datacenter: datacenter1\n", "")
                        + "- name: dc2\n  username: bob\n  endpoint: http://b\ncurrent-datacenter: datacenter1\n")
    res = run_cli("config")
    assert res.code == 0 and ": secret" not in res.out and "auth: password" in res.out
    assert run_cli("config", "use", "dc2").code == 0
    assert cfgmod.load(path).current == "dc2"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert run_cli("config", "use", "nope").code == 1


def test_usage_errors_exit_2(clean_env):
    assert run_cli().code == 2
    assert run_cli("frobnicate").code == 2
    assert run_cli("submit").code == 2
    res = run_cli("get", "jobs", "-o", "xml")
    assert res.code == 2 and "is not an output format" in res.err
    assert run_cli("help").code == 0
    assert run_cli("help", "nope").code == 2


SEED_001 = """apiVersion: v1
dockerRegistry:
  domain: domain.com //default is docker.io
  username: reguser
  password: regsecret
paddleServer: http://paddle.example.com:8080
"""


def test_seed_001_config_is_read_as_the_seed_prints_it(clean_env):
    write_config(clean_env / ".paddle" / "config", SEED_001)
    cfg = cfgmod.load()
    dc = cfgmod.select(cfg, env={})
    assert (dc.name, dc.endpoint, dc.username, dc.password) == ("default", "http://paddle.example.com:8080", None,
                                                                 None)
    assert (cfg.docker_registry.domain, cfg.docker_registry.username, cfg.docker_registry.password) == (
        "domain.com", "reguser", "regsecret")
    write_config(clean_env / ".paddle" / "config", "apiVersion: v1\npaddleServer: http://x\nusername: alice\n"
                 "dockerRegistry:\n  username: u\n  password: p\n")
    cfg = cfgmod.load()
    assert cfg.docker_registry.domain == "docker.io" and cfgmod.select(cfg, env={}).username == "alice"


@pytest.mark.parametrize("text, message", [
    ("apiVersion: v1\npaddleServer: 5\n", "paddleServer must be the server's URL"),
    ("paddleServer: http://x\ndockerRegistry: docker.io\n", "dockerRegistry must be a mapping"),
])
def test_broken_seed_001_configs_say_which_key(clean_env, text, message):
    write_config(clean_env / ".paddle" / "config", text)
    res = run_cli("get", "jobs")
    assert res.code == 1 and message in res.err, res.err


def test_seed_003_map_form_reads_certificate_paths_relative_to_the_config(clean_env):
    write_config(clean_env / ".paddle" / "config", "datacenter1:\n  username: user\n  usercert: user.pem\n"
                 "  userkey: ~/keys/user-key.pem\n  endpoint: dc1.paddlepaddle.org\n")
    dc = cfgmod.select(cfgmod.load(), env={})
    assert dc.usercert == str((clean_env / ".paddle" / "user.pem").resolve())
    assert dc.userkey == str((clean_env / "keys" / "user-key.pem").resolve())
    assert dc.api_url == "https://dc1.paddlepaddle.org/api/v2/"
