"""plugin_utils/_bundle.py: the support bundle's secrets, redaction (counts per kind), final sweep, bounds, manifest."""

import json

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _bundle
from ansible_collections.dspark.cluster.plugins.plugin_utils._bundle import MARK, Bounds, Redactor, sweep
from ansible_collections.dspark.cluster.plugins.plugin_utils._role_rules import is_secret

KEY = "lab-fleet-key-5d2e9b"
HF = "hf_" + "A1b2C3d4E5f6G7h8I9j0K1l2"
PASSWORD = 'p@ss"word/\\x'


# --------------------------------------------------------------------------- which values are secrets


def test_secret_values_walks_names_nested_keys_and_lists():
    variables = {
        "serve_api_key": KEY,
        "serve_api_keys": ["key-one-aaaaaa", "key-two-bbbbbb"],
        "serve_extra_env": {"HF_TOKEN": HF, "DSPARK_SIM_TOKEN_SECONDS": "0.05", "PLAIN": "not-a-secret"},
        "monitoring_web_config": {"basic_auth_users": {"admin": "x"}, "tls": {"password": "tls-pass-123"}},
        "ansible_become_password": PASSWORD,
        "dspark_model": "deepseek-ai/DeepSeek-V4-Flash-0731",
        "short_token": "abc",                     # too short to be redacted wherever it appears
        "templated_token": "{{ lookup('env', 'X') }}",
        "vaulted": {"__ansible_vault": "$ANSIBLE_VAULT;1.1;AES256\n6162"},
    }
    found = _bundle.secret_values(variables, is_secret)
    assert found == {KEY, "key-one-aaaaaa", "key-two-bbbbbb", HF, "tls-pass-123", PASSWORD}
    # DSPARK_SIM_TOKEN_SECONDS is secret by name (token) but too short: "0.05" is no secret anyway.
    assert "0.05" not in found and "not-a-secret" not in found


def test_secret_names_names_what_the_node_side_must_template():
    variables = {"serve_api_key": KEY, "serve_extra_env": {"HF_TOKEN": "x"}, "plain": 1,
                 "vaulted": {"__ansible_vault": "$ANSIBLE_VAULT;1.1;AES256\n61"}, "list": [{"x_secret": "y"}],
                 "dspark_model": "m"}
    assert _bundle.secret_names(variables, is_secret) == ["list", "serve_api_key", "serve_extra_env", "vaulted"]


def test_is_secret_name_is_role_rules_rule():
    for name in ("serve_api_key", "hf_token", "ansible_become_password", "x_secret", "http_proxy", "API_KEYS"):
        assert _bundle.is_secret_name(name) and is_secret(name)
    for name in ("dspark_model", "serve_port"):
        assert not _bundle.is_secret_name(name) and not is_secret(name)


# --------------------------------------------------------------------------- redaction


def test_known_secrets_anywhere_with_counts():
    red = Redactor([KEY, HF])
    text = "start %s middle%send and %s" % (KEY, KEY, HF)
    out = red.redact(text)
    assert KEY not in out and HF not in out
    assert out == "start %s middle%send and %s" % (MARK, MARK, MARK)
    assert red.counts == {"known_secret": 3}


def test_known_secret_split_across_lines_and_json_escaped():
    red = Redactor([KEY, PASSWORD])
    split = "prefix lab-fleet-k\ney-5d2e9b suffix"
    assert red.redact(split) == "prefix %s suffix" % MARK
    crlf = "lab-fleet-key-\r\n5d2e9b"
    assert red.redact(crlf) == MARK
    escaped_break = json.dumps({"log": "lab-fleet-key\n-5d2e9b"})       # "lab-fleet-key\\n-5d2e9b" in the JSON text
    assert KEY[:8] not in red.redact(escaped_break)
    as_json = json.dumps({"password": PASSWORD, "other": "x %s" % PASSWORD})
    out = red.redact(as_json)
    assert json.loads(out) == {"password": MARK, "other": "x " + MARK}
    url = "https://user:%s@host/" % "p%40ss%22word%2F%5Cx"                 # URL-quoted
    assert "word" not in red.redact(url)


@pytest.mark.parametrize("text, kind, leaked", [
    ("Authorization: Bearer abcdefghijklmnop", "bearer_token", "abcdefghijklmnop"),
    ("vllm serve m --api-key k1-aaaa k2-bbbb --port 8", "api_key_flag", "k1-aaaa"),
    ("non-default args: {'api_key': ['k-one-aaaa'], 'port': 8000}", "api_key_field", "k-one-aaaa"),
    ("token %s here" % HF, "hf_token", HF),
    ("key sk-proj-abcdefghijklmnopqrstuv end", "sk_key", "sk-proj-abcdef"),
    ("pip from https://bob:s3cretpw@index.example/simple", "url_password", "s3cretpw"),
    ("VLLM_API_KEY=unknown-key-value", "api_key_field", "unknown-key-value"),
    ("      HF_TOKEN: some-token-value", "api_key_field", "some-token-value"),
    ("DB_PASSWORD=unknown-pw-value", "secret_assignment", "unknown-pw-value"),
    ("      CLIENT_SECRET: some-secret-value", "secret_assignment", "some-secret-value"),
    ('"MY_PASSWORD": "pw-value-1"', "secret_assignment", "pw-value-1"),
])
def test_key_shaped_strings(text, kind, leaked):
    red = Redactor()
    out = red.redact(text)
    assert leaked not in out and MARK in out
    assert red.counts.get(kind) == 1, red.counts


def test_shapes_leave_ordinary_text_alone():
    red = Redactor()
    text = ("DSPARK_SIM_TOKEN_SECONDS=0.05 max_tokens=100 NCCL_IB_DISABLE=0 \"api_key\": null "
            "--api-key-file /x tokenizer: auto")
    assert red.redact(text) == text
    assert red.counts == {}


def test_an_already_redacted_value_is_not_counted_twice():
    red = Redactor([KEY])
    out = red.redact("VLLM_API_KEY=%s\n'api_key': ['%s']" % (KEY, KEY))
    assert KEY not in out
    assert red.counts == {"known_secret": 2}


def test_redact_data_keys_and_values():
    red = Redactor([KEY])
    assert red.redact_data({KEY: [KEY, 1, None], "a": {"b": "x" + KEY}}) == {MARK: [MARK, 1, None],
                                                                             "a": {"b": "x" + MARK}}


# --------------------------------------------------------------------------- the final sweep


def test_sweep_names_the_file_never_the_secret():
    files = {"a.json": b"clean", "logs/rank1.log": ("x lab-fleet-k\ney-5d2e9b").encode(), "m.json": "ok " + MARK}
    hits = sweep(files, [KEY, "short"])
    assert hits == ["logs/rank1.log"]
    assert sweep({"a": json.dumps({"p": PASSWORD})}, [PASSWORD]) == ["a"]
    assert sweep({"a": "nothing"}, []) == []


def test_sweep_after_redaction_finds_nothing():
    red = Redactor([KEY, HF, PASSWORD])
    files = dict(("f%d" % i, red.redact(t)) for i, t in enumerate([
        "x%sx" % KEY, json.dumps([PASSWORD]), "lab-fleet-key-5d2\n9b".replace("2\n9", "2e\n9"), HF]))
    assert sweep(files, [KEY, HF, PASSWORD]) == []


# --------------------------------------------------------------------------- bounds and manifest


def test_bounds_per_file_cap_keeps_a_logs_end():
    bounds = Bounds(max_bytes=1 << 20, per_file_bytes=1000)
    log = ("".join("line %04d\n" % i for i in range(500))).encode()
    out = bounds.fit("logs/rank0-h.log", log, tail=True)
    assert len(out) <= 1000 and out.endswith(b"line 0499\n")
    assert out.startswith(b"\n[... truncated by dspark-fleet bundle:")
    small = bounds.fit("versions.json", b"{}")
    assert small == b"{}"
    view = bounds.view()
    assert view["truncated"] == [{"file": "logs/rank0-h.log", "bytes": len(log), "kept_bytes": view["truncated"][0]
                                  ["kept_bytes"], "kept": "end", "reason": "per-file cap 1000"}]
    assert view["used_bytes"] == len(out) + 2


def test_bounds_total_cap_keeps_the_start_then_nothing():
    bounds = Bounds(max_bytes=8192, per_file_bytes=8192, reserve=2048)
    first = bounds.fit("a.json", b"a" * 5000)
    assert first == b"a" * 5000
    second = bounds.fit("b.json", b"b" * 5000)
    assert second.startswith(b"b") and len(second) <= 8192 - 2048 - 5000
    third = bounds.fit("c.json", b"c" * 100)
    assert third == b""
    cut = dict((t["file"], t) for t in bounds.view()["truncated"])
    assert cut["b.json"]["kept"] == "start" and cut["b.json"]["reason"] == "total cap 8192"
    assert cut["c.json"]["kept"] == "none" and cut["c.json"]["kept_bytes"] == 0
    assert bounds.used <= 8192 - 2048


def test_bounds_never_split_a_utf8_character():
    bounds = Bounds(max_bytes=1 << 20, per_file_bytes=200)
    out = bounds.fit("x.log", ("é" * 500).encode(), tail=True)
    out.decode("utf-8")


def test_tail_lines():
    assert _bundle.tail_lines("a\nb\nc\n", 2) == "b\nc\n"
    assert _bundle.tail_lines("", 5) == ""


def test_manifest():
    sections = [_bundle.section("versions", "versions.json", bytes_=10, hosts=["h0"]),
                _bundle.section("router", "router.json", state=_bundle.ABSENT, error="no router"),
                _bundle.section("logs", "logs/", state=_bundle.ERROR, error="h1: no container")]
    doc = _bundle.manifest("g", "2026-12-05T00:00:00Z", [{"host": "h0", "rank": 0}], sections,
                           {"known_secret": 2, "bearer_token": 1}, {"max_bytes": 1}, {"name": "t"}, {"commit": "c"})
    assert doc["schema"] == "dspark-fleet-bundle/1" and doc["ok"] is False
    assert [s["ok"] for s in doc["sections"]] == [True, True, False]
    assert doc["sections"][1]["state"] == "absent"
    assert doc["redacted"] == {"counts": {"bearer_token": 1, "known_secret": 2}, "total": 3}
