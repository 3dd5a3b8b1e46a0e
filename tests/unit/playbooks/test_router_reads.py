"""The router role's reads (roles/router/tasks/haproxy.yml and vrrp.yml): a converged router skips haproxy_apply.yml
and vrrp_apply.yml on them alone, so every path those files write must be read with the very text (the same variable)
and mode the write uses, and the packages, units and the record of what HAProxy loaded must be part of the decision.
What the skip does on real routers: tests/fleet/test_router.py (a second run and --check include neither)."""

import os

import yaml

ROLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                    "roles", "router")


def load(*parts):
    with open(os.path.join(ROLE, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def writes(tasks):
    """(path expression, content expression or None, mode) of every copy and file task, in order."""
    found = []
    for task in tasks:
        for module in ("ansible.builtin.copy", "ansible.builtin.file", "ansible.builtin.template"):
            if module in task:
                args = task[module]
                assert module != "ansible.builtin.template", "%s: a template is not compared by the read" % task["name"]
                found.append((args.get("dest", args.get("path")), args.get("content"), args.get("mode"), task))
    return found


def test_haproxy_apply_writes_only_what_the_read_compares():
    role_vars = load("vars", "main.yml")
    files = {entry["path"]: entry for key in ("_router_haproxy_files", "_router_haproxy_tls_files",
                                              "_router_haproxy_no_tls_files") for entry in role_vars[key]}
    secret = role_vars["_router_haproxy_secret_files"]
    for dest, content, mode, task in writes(load("tasks", "haproxy_apply.yml")):
        if dest == "{{ _router_tls_pem }}":
            # the PEM holds the key: compared on the node through secret_files, both ways (absent without TLS)
            assert files[dest]["kind"] == "absent" and "_router_tls_pem_text | hash('sha256')" in secret
            assert "'mode': '%s'" % mode in secret or task["ansible.builtin.file"]["state"] == "absent"
            continue
        assert dest in files, (task["name"], dest)
        assert files[dest]["mode"] == mode and files[dest].get("uid") == 0, (task["name"], mode)
        if task["name"] == "Record what HAProxy loaded":
            # compared as the role writes it once HAProxy loaded these very texts
            assert "{router_config_file: _router_haproxy_cfg, _router_tls_pem:" in files[dest]["sha256"]
        elif content:
            assert "%s | hash('sha256')" % content.strip("{} ") in files[dest]["sha256"], (task["name"], content)
    current = role_vars["_router_haproxy_current"]
    for part in ("files", "packages", "units", "active", "need_daemon_reload"):
        assert "_router_node.%s" % part in current
    socket = files["{{ router_admin_socket }}"]
    assert (socket["kind"], socket["mode"]) == ("socket", "0{{ router_admin_socket_mode }}")


def test_vrrp_apply_writes_only_what_the_read_compares():
    role_vars = load("vars", "main.yml")
    read = next(t for t in load("tasks", "vrrp.yml") if "dspark.cluster.serve_node_info" in t)["dspark.cluster.serve_node_info"]
    files = {entry["path"]: entry for entry in role_vars["_router_vrrp_files"]}
    files.update({entry["path"]: entry for entry in read["secret_files"]})
    for dest, content, mode, task in writes(load("tasks", "vrrp_apply.yml")):
        assert dest in files, (task["name"], dest)
        assert files[dest]["mode"] == mode, (task["name"], mode)
        if content:
            assert content.strip("{} ") in files[dest]["sha256"], (task["name"], content)
    # keepalived's configuration holds the VRRP password: compared on the node (secret_files), never returned.
    assert read["secret_files"][0]["path"] == "{{ router_keepalived_config_file }}"
    assert read["packages"] == ["keepalived"] and read["reload_units"] == ["keepalived.service"]


def test_the_apply_files_are_included_only_when_the_read_says_so():
    haproxy = load("tasks", "haproxy.yml")
    include = next(t for t in haproxy if "ansible.builtin.include_tasks" in t)
    assert include["ansible.builtin.include_tasks"]["file"] == "haproxy_apply.yml"
    assert include["when"] == "not _router_haproxy_current | bool"
    names = [t["name"] for t in haproxy]
    # the servers are read and checked on every run, after the apply
    assert names.index(include["name"]) < names.index("Read the servers of the backend") < names.index(
        "Check that HAProxy knows every routed group")
    vrrp = load("tasks", "vrrp.yml")
    include = next(t for t in vrrp if "ansible.builtin.include_tasks" in t)
    assert include["ansible.builtin.include_tasks"]["file"] == "vrrp_apply.yml"
    assert include["when"] == "not _router_vrrp_current | bool"
    assert [t["name"] for t in vrrp].index(include["name"]) < [t["name"] for t in vrrp].index("Read keepalived's state")
