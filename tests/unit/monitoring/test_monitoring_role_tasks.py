"""The monitoring role's task order and secret handling, read from its task files (what only the fleet lab can run).

- node.yml: node_exporter's listen address and its firewall (table and boot unit) come before the package that
  starts node_exporter, and before the role's own start; node_apply.yml is included only when the read finds
  something not as wanted, and the read covers every path node_apply.yml writes and every unit it starts.
- firewall.yml: one read, the rest included only when something is not as wanted.
- monitor.yml: the command lines (with --web.config.file) before the packages; the web config, once the package has
  made user prometheus; every task that holds a web secret is no_log and diff: false, its file 0640 or 0600; and
  the readiness check of Prometheus' own credentials runs after the handlers.
"""

import sys

import yaml

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from monitoring_fixtures import ROLE  # noqa: E402


def tasks(name):
    return yaml.safe_load((ROLE / "tasks" / name).read_text(encoding="utf-8"))


def index(items, words):
    found = [i for i, task in enumerate(items) if words in task["name"]]
    assert len(found) == 1, (words, [t["name"] for t in items])
    return found[0]


def test_node_exporter_starts_only_after_its_firewall():
    node = tasks("node.yml")
    assert [t["name"] for t in node] == ["Read node_exporter's host and load its firewall where it is not as wanted",
                                         "Install node_exporter and the collector where they are not as wanted"]
    assert node[0]["ansible.builtin.import_tasks"] == "firewall.yml"
    assert node[1]["ansible.builtin.include_tasks"]["file"] == "node_apply.yml"
    assert node[1]["when"] == "not _monitoring_node_current | bool"
    applied = tasks("node_apply.yml")
    listen = index(applied, "listen address")
    install = index(applied, "Install node_exporter")
    assert listen < install < index(applied, "Start the collector's timer and node_exporter")
    # The ruleset's directory is made by the firewall's own apply, which runs first.
    firewall_applied = tasks("firewall_apply.yml")
    assert index(firewall_applied, "Create the configuration directory") < index(firewall_applied, "Write the ruleset")


def test_the_firewall_is_one_read_then_an_include_when_not_current():
    firewall = tasks("firewall.yml")
    assert [next(k for k in t if k.startswith("ansible.builtin.") or k.startswith("dspark.")) for t in firewall] == [
        "dspark.cluster.serve_node_info", "ansible.builtin.include_tasks"]
    read = firewall[0]["dspark.cluster.serve_node_info"]
    assert "_monitoring_fw_state_path" in read["firewall_state"]
    assert firewall[1]["when"] == "monitoring_node_exporter_firewall | bool and not _monitoring_fw_current | bool"
    applied = tasks("firewall_apply.yml")
    assert index(applied, "Replace table") < index(applied, "Read the table as applied") < index(applied, "Record what")
    assert index(applied, "Record what") < index(applied, "Install the firewall's boot unit") < index(applied, "Enable the boot")


def test_the_read_covers_every_write_and_start_of_node_apply():
    """A converged host skips node_apply.yml on the read alone: every path it writes and every unit it starts must be
    read, with the very text (the same variable or lookup) the write puts there, or a change to it would never be
    put back."""
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
    read = {entry["path"]: entry for entry in role_vars["_monitoring_node_files"]}
    units = ["/etc/systemd/system/%s" % unit for unit in role_vars["_monitoring_collector_units"]]
    applied = tasks("node_apply.yml")
    written = []
    for task in applied:
        module = next((m for m in ("ansible.builtin.file", "ansible.builtin.copy") if m in task), None)
        if not module:
            continue
        args = task[module]
        if task.get("loop"):
            assert task["loop"] == "{{ _monitoring_collector_units }}" and "item ~ '.j2'" in args["content"]
            paths = units
        else:
            paths = [args.get("dest", args.get("path"))]
            if "content" in args:  # the read hashes the very variable the write puts there
                assert args["content"].strip("{} ") in read[paths[0]]["sha256"], paths[0]
        for path in paths:
            assert (read[path]["mode"], read[path]["uid"], read[path]["gid"]) == (args["mode"], 0, 0), path
            assert (args["owner"], args["group"]) == ("root", "root"), path
        written += paths
    assert sorted(written) == sorted(read), "node_apply.yml writes %s, the read compares %s" % (written, list(read))
    started = next(t for t in applied if "ansible.builtin.systemd_service" in t)
    assert started["loop"] == "{{ _monitoring_node_services }}"
    firewall_read = tasks("firewall.yml")[0]["dspark.cluster.serve_node_info"]
    assert "_monitoring_node_services" in firewall_read["units"] and firewall_read["active_units"] == "{{ _monitoring_node_services }}"
    assert firewall_read["packages"] == "{{ monitoring_node_packages }}"
    assert next(t for t in applied if "dspark.cluster.packages" in t)["dspark.cluster.packages"]["name"] == "{{ monitoring_node_packages }}"


def test_the_servers_get_their_web_config_before_they_can_listen_without_it():
    monitor = tasks("monitor.yml")
    install = index(monitor, "Install Prometheus and Alertmanager")
    for words, server in (("Set Prometheus'", "prometheus"), ("Set Alertmanager's", "alertmanager")):
        task = monitor[index(monitor, words)]
        assert index(monitor, words) < install
        assert "_monitoring_plan.server_args.%s" % server in task["ansible.builtin.copy"]["content"]
    write = index(monitor, "Write the web config")
    # After the install: the file's group is prometheus, which the package creates. A fresh install's servers fail
    # to start until it is there (tested by hand with Debian's prometheus 2.42 and alertmanager 0.25: both exit 1).
    assert install < write < index(monitor, "Start Prometheus and Alertmanager")
    assert index(monitor, "Start Prometheus") < index(monitor, "Apply the new command lines") < index(monitor, "Check that Prometheus' own")


def test_every_task_that_holds_a_web_secret_hides_it():
    monitor = tasks("monitor.yml")
    for words, mode, owner, group in (("Write the web config", "0640", "root", "prometheus"),
                                      ("Write Prometheus' own web password", "0600", "prometheus", "prometheus")):
        task = monitor[index(monitor, words)]
        assert task["no_log"] is True and task["diff"] is False, words
        copy = task["ansible.builtin.copy"]
        assert (copy["mode"], copy["owner"], copy["group"]) == (mode, owner, group)
    for task in monitor:
        text = yaml.safe_dump(task)
        if ("monitoring_web_config" in text or "monitoring_web_password" in text) and "ansible.builtin.uri" not in task:
            assert task.get("no_log") is True and task.get("diff") is False, task["name"]
    # The uri module hides url_password itself (no_log in its argument spec); the check shows only the URL.
    check = monitor[index(monitor, "Check that Prometheus' own")]["ansible.builtin.uri"]
    assert check["url"] == "{{ item }}" and "monitoring_web_password" in check["url_password"]


def test_the_secrets_are_no_log_in_the_argument_spec():
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))["argument_specs"]["main"]
    options = spec["options"]
    assert options["monitoring_web_config"]["no_log"] is True and options["monitoring_web_password"]["no_log"] is True
    assert not options["monitoring_web_username"].get("no_log")
