"""paddlectl login reuses its device's token; `paddlectl tokens` lists and revokes tokens."""

import json
import socket

import yaml

from accounts.models import ApiToken

from .conftest import run_cli, write_config


def test_logging_in_again_from_this_device_replaces_its_token(config, alice):
    assert run_cli("login").code == 0
    first = yaml.safe_load(config.read_text())["datacenters"][0]["token"]
    res = run_cli("login", "-password", "password")  # the first login replaced the password with the token
    assert res.code == 0, res.err
    data = yaml.safe_load(config.read_text())
    assert data["device"] == socket.gethostname() and data["datacenters"][0]["token"] != first
    assert list(ApiToken.objects.filter(user=alice).values_list("name", flat=True)) == [socket.gethostname()]
    assert f"device {socket.gethostname()}" in res.out


def test_the_configs_device_name_names_the_token(server, clean_env, alice):
    write_config(clean_env / ".paddle" / "config", f"""datacenters:
- name: local
  username: alice
  password: password
  endpoint: {server}
current-datacenter: local
device: build-box
""")
    assert run_cli("login").code == 0
    assert run_cli("login", "-device", "other-box", "-password", "password").code == 0
    assert sorted(ApiToken.objects.filter(user=alice).values_list("name", flat=True)) == ["build-box", "other-box"]
    assert yaml.safe_load((clean_env / ".paddle" / "config").read_text())["device"] == "other-box"


def test_tokens_lists_without_secrets_and_revokes_by_id(config, alice, monkeypatch):
    from accounts.services import create_token

    assert run_cli("login").code == 0
    ci, ci_secret = create_token(alice, name="ci")
    res = run_cli("tokens", "-o", "json")
    assert res.code == 0, res.err
    listed = {t["name"]: t for t in json.loads(res.out)}
    assert set(listed) == {socket.gethostname(), "ci"} and listed[socket.gethostname()]["current"] is True
    assert ci_secret not in res.out and yaml.safe_load(config.read_text())["datacenters"][0]["token"] not in res.out
    table = run_cli("tokens")
    assert table.lines[0].split() == ["ID", "NAME", "CREATED", "EXPIRES", "CURRENT"]
    assert run_cli("tokens", "revoke").code == 2
    res = run_cli("tokens", "revoke", str(ci.id))
    assert res.code == 0 and f"token {ci.id} revoked" in res.out
    monkeypatch.setenv("PADDLECTL_TOKEN", ci_secret)
    assert run_cli("get", "jobs").code == 1  # the revoked token no longer works
    assert run_cli("tokens", "revoke", "999999").code == 1


def test_logout_revokes_the_token_on_the_server(config, alice, monkeypatch):
    assert run_cli("login").code == 0
    token = yaml.safe_load(config.read_text())["datacenters"][0]["token"]
    res = run_cli("logout")
    assert res.code == 0 and "revoked" in res.out, res.err
    assert not ApiToken.objects.filter(user=alice).exists()
    monkeypatch.setenv("PADDLECTL_TOKEN", token)  # a copy of the old config no longer works
    assert run_cli("get", "jobs").code == 1
