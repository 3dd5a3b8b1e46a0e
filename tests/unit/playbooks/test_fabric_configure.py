"""The fabric role's configure step (ansible.builtin.template + handlers) under real Ansible, on the controller.

tasks/configure.yml, configure_node.yml and configure_now.yml of roles/fabric run with the role's defaults, vars and
templates on the local connection, each fake host's file paths moved under a temporary directory and the handlers
replaced by stand-ins on the same listen topics (fabric_configure/handlers.yml: the real ones reconfigure the links and
load the sysctls), after fake node reads (fabric_configure/main.yml). Asserted: check mode writes nothing; a first run writes
every file and runs each handler once, before the next task; a second run and a --check --diff run change nothing; a
live value that differs with unchanged files notifies the same handler, once even with a changed file too; a left-over
second link's file is removed; netplan's file is 0600 and validated; a container gets only the memlock limit. What
the real handlers do on a node is the VM lab's part (extensions/molecule/vmlab). Five ansible-playbook runs, ~30 s.
"""

import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fabric_configure")
ROLE = os.path.join(ROOT, "roles", "fabric")
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
HOSTS = {"fresh": {}, "netplan": {"char_backend": "netplan"}, "container": {"char_container": True}}
# The role's paths are role vars: only extra vars outrank them, templated per host.
PATHS = {"_fabric_networkd_dir": "{{ char_root }}/network", "_fabric_netplan_file": "{{ char_root }}/netplan/90-dspark-fabric.yaml",
         "_fabric_sysctl_file": "{{ char_root }}/sysctl/90-dspark-fabric.conf", "_fabric_rings_rule": "{{ char_root }}/udev/81.rules",
         "_fabric_limits_file": "{{ char_root }}/limits/90-dspark-fabric.conf",
         # Leaves a mark beside the host's tree when it validated a non-empty file.
         "_fabric_netplan_validate": "/bin/sh -c 'test -s \"%s\" && touch {{ char_root }}-validated'"}
LINKS, SYSCTLS = "CHAR handler links enp1s0f1np1", "CHAR handler sysctls"


def setup(tmp):
    role = os.path.join(tmp, "roles", "char_fabric")
    os.makedirs(os.path.join(role, "tasks"))
    os.makedirs(os.path.join(role, "handlers"))
    for part in ("defaults", "vars", "templates"):
        os.symlink(os.path.join(ROLE, part), os.path.join(role, part))
    for name in ("configure.yml", "configure_node.yml", "configure_now.yml"):
        shutil.copy(os.path.join(ROLE, "tasks", name), os.path.join(role, "tasks", name))
    shutil.copy(os.path.join(HERE, "main.yml"), os.path.join(role, "tasks", "main.yml"))
    shutil.copy(os.path.join(HERE, "handlers.yml"), os.path.join(role, "handlers", "main.yml"))
    with open(os.path.join(tmp, "play.yml"), "w", encoding="utf-8") as handle:
        handle.write("- hosts: all\n  connection: local\n  gather_facts: false\n  roles: [char_fabric]\n")
    hosts = {}
    for name, values in HOSTS.items():
        root = os.path.join(tmp, name)
        for sub in ("network", "netplan", "sysctl", "udev", "limits"):
            os.makedirs(os.path.join(root, sub))
        hosts[name] = dict(values, char_root=root, ansible_python_interpreter=sys.executable)
    with open(os.path.join(tmp, "hosts.json"), "w", encoding="utf-8") as handle:
        json.dump({"all": {"hosts": hosts}}, handle)


def run(tmp, limit, *args, **extra):
    """(changed per host, output) of one ansible-playbook run on the hosts of `limit`."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_ROLES_PATH=os.path.join(tmp, "roles"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_STDOUT_CALLBACK="default")
    values = dict(PATHS, **{"char_" + k: v for k, v in extra.items()})
    command = [ANSIBLE_PLAYBOOK, "-i", os.path.join(tmp, "hosts.json"), "-l", limit, "-e", json.dumps(values), *args,
               os.path.join(tmp, "play.yml")]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    recap = {host: (int(changed), unreachable, failed) for host, _ok, changed, unreachable, failed in RECAP.findall(output)}
    assert all(r[1:] == ("0", "0") for r in recap.values()) and set(recap) == set(limit.split(",")), output[-4000:]
    return {host: r[0] for host, r in recap.items()}, output


def files(tmp, host):
    root = os.path.join(tmp, host)
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _dirs, names in os.walk(root) for f in names)


def read(tmp, host, path):
    with open(os.path.join(tmp, host, path), encoding="utf-8") as handle:
        return handle.read()


def mode(tmp, host, path):
    return oct(os.stat(os.path.join(tmp, host, path)).st_mode & 0o777)


def write(tmp, host, path, text):
    with open(os.path.join(tmp, host, path), "w", encoding="utf-8") as handle:
        handle.write(text)


def test_configure_step(tmp_path):
    tmp = str(tmp_path)
    setup(tmp)
    changed, output = run(tmp, "fresh", "--check")
    assert files(tmp, "fresh") == [] and changed["fresh"] > 0
    assert output.count(LINKS) == 1 and output.count(SYSCTLS) == 1

    changed, output = run(tmp, "fresh,netplan,container")
    assert files(tmp, "fresh") == ["limits/90-dspark-fabric.conf", "network/20-dspark-fabric-primary.network",
                                   "sysctl/90-dspark-fabric.conf", "udev/81.rules"]
    assert read(tmp, "fresh", "sysctl/90-dspark-fabric.conf").splitlines()[1:] == [
        "net.core.netdev_max_backlog = 250000", "net.core.rmem_max = 268435456", "net.core.wmem_max = 268435456",
        "net.ipv4.tcp_rmem = 4096 131072 268435456", "net.ipv4.tcp_wmem = 4096 65536 268435456"]
    assert mode(tmp, "fresh", "network/20-dspark-fabric-primary.network") == "0o644"
    # One run of each handler per host (fresh and netplan), and before the task after configure.yml.
    assert output.count("TASK [char_fabric : After the configure step]") == 1
    before = output.split("TASK [char_fabric : After the configure step]")[0]
    assert before.count(LINKS) == output.count(LINKS) == 2 and before.count(SYSCTLS) == output.count(SYSCTLS) == 2
    assert "netplan/90-dspark-fabric.yaml" in files(tmp, "netplan") and mode(tmp, "netplan", "netplan/90-dspark-fabric.yaml") == "0o600"
    assert os.path.exists(os.path.join(tmp, "netplan-validated")) and not os.path.exists(os.path.join(tmp, "fresh-validated"))
    assert files(tmp, "container") == ["limits/90-dspark-fabric.conf"] and changed["container"] == 1

    changed, output = run(tmp, "fresh")
    assert changed == {"fresh": 0} and "CHAR handler" not in output
    changed, output = run(tmp, "fresh", "--check", "--diff")
    assert changed == {"fresh": 0} and "CHAR handler" not in output

    # The links: the network file changed by hand (MTU), a second link's file left over and the read saying the live
    # address differs, three reasons, one reconfigure. The sysctls: the file unchanged, a live value differs (the
    # read): the handler runs all the same.
    network = "network/20-dspark-fabric-primary.network"
    write(tmp, "fresh", network, read(tmp, "fresh", network).replace("MTUBytes=9000", "MTUBytes=1500"))
    write(tmp, "fresh", "network/20-dspark-fabric-secondary.network", "[Match]\n")
    changed, output = run(tmp, "fresh", "--diff", live_differs=True, sysctls_differ=True, secondary_left=True)
    assert output.count(LINKS) == 1 and output.count(SYSCTLS) == 1
    assert "-MTUBytes=1500" in output and "+MTUBytes=9000" in output and "MTUBytes=9000" in read(tmp, "fresh", network)
    assert "network/20-dspark-fabric-secondary.network" not in files(tmp, "fresh")
