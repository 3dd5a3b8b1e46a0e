"""The monitoring role's task order and secret handling, read from its task files (what only the fleet lab can run).

- node.yml: node_exporter's listen address and its firewall (table and boot unit) come before the package that
  starts node_exporter, and before the role's own start.
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
    listen = index(node, "listen address")
    firewall = index(node, "Limit node_exporter to the monitor hosts")
    install = index(node, "Install node_exporter")
    start = index(node, "Start the collector's timer and node_exporter")
    assert listen < firewall < install < start
    assert node[firewall]["ansible.builtin.import_tasks"] == "firewall.yml"
    assert node[firewall]["when"] == "monitoring_node_exporter_firewall | bool"


def test_the_firewall_is_one_read_then_an_include_when_not_current():
    firewall = tasks("firewall.yml")
    assert [next(k for k in t if k.startswith("ansible.builtin.") or k.startswith("dspark.")) for t in firewall] == [
        "dspark.cluster.serve_node_info", "ansible.builtin.include_tasks"]
    read = firewall[0]["dspark.cluster.serve_node_info"]
    assert read["firewall_state"] == "{{ _monitoring_fw_state_path }}"
    assert firewall[1]["when"] == "not _monitoring_fw_current | bool"
    applied = tasks("firewall_apply.yml")
    assert index(applied, "Replace table") < index(applied, "Read the table as applied") < index(applied, "Record what")
    assert index(applied, "Record what") < index(applied, "Install the firewall's boot unit") < index(applied, "Enable the boot")


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
