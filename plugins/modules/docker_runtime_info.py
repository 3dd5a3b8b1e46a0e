#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: docker_runtime_info
short_description: Read what the docker_runtime role decides on about dockerd, in one call
version_added: 0.1.0
description:
  - Reads, in one call, the node state the C(dspark.cluster.docker_runtime) role decides on before it configures
    dockerd. It reads whether the docker CLI is installed and C(/etc/docker/daemon.json) (parsed; the runtimes
    registered in it are kept).
  - Reads when dockerd's configuration files last changed and C(systemctl show docker.service) (whether dockerd runs
    an older configuration than its files, see the C(dspark.cluster.dockerd_restart_reason) filter).
  - Reads the running containers and whether the engine has live-restore (a restart of dockerd would stop them), and
    whether compose v2 answers as a docker plugin.
  - Fails when daemon.json is not valid JSON, or (O(require_compose_v2)) when compose v2 does not answer.
  - Never changes anything.
author:
  - dspark.cluster contributors (@dspark)
options:
  daemon_json:
    description:
      - dockerd's configuration file.
    type: path
    default: /etc/docker/daemon.json
  files:
    description:
      - dockerd's configuration files whose modification time RV(config_stats) reports.
    type: list
    elements: path
    default: [/etc/docker/daemon.json]
  require_compose_v2:
    description:
      - Fail when the docker CLI is installed and C(docker compose version --short) does not answer with a 2.x version.
    type: bool
    default: true
  image:
    description:
      - An image reference (the serving image by digest) whose local ID to return in RV(image_id).
    type: str
extends_documentation_fragment:
  - dspark.cluster.read_only
attributes:
  platform:
    support: full
    platforms: posix
    description: Linux with systemd and the docker CLI at C(/usr/bin/docker).
"""

EXAMPLES = r"""
- name: Read dockerd's configuration and state
  dspark.cluster.docker_runtime_info:
    files:
      - /etc/docker/daemon.json
      - /etc/systemd/system/docker.service.d/http-proxy.conf
  register: _state

- name: Say which containers a restart of dockerd would stop
  ansible.builtin.debug:
    msg: "{{ _state.running | join(', ') }}"
  when: _state.running | length > 0
"""

RETURN = r"""
cli:
  description: Whether the docker CLI (C(/usr/bin/docker)) is installed. Without it nothing else is asked of dockerd.
  type: bool
  returned: always
daemon_json:
  description: O(daemon_json) parsed; empty when the file is absent.
  type: dict
  returned: always
  sample: {"log-driver": "json-file", "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}
daemon_json_file:
  description: The sha256 and octal mode of O(daemon_json) (the role rewrites it only when they differ from what it
    would write); null when absent.
  type: dict
  returned: always
  sample: {"sha256": "0ba4b0e9c0f1...", "mode": "0644"}
docker_group_users:
  description: The existing accounts listed as members of the C(docker) group (the role adds only the others).
  type: list
  elements: str
  returned: always
  sample: [spark]
config_stats:
  description: One entry per O(files), in the shape of an C(ansible.builtin.stat) loop's results.
  type: list
  elements: dict
  returned: always
  sample: [{"item": "/etc/docker/daemon.json", "stat": {"exists": true, "mtime": 1764567661.25}}]
unit:
  description: C(systemctl show docker.service --timestamp=us+utc) of ActiveState, ActiveEnterTimestamp,
    NeedDaemonReload and UnitFileState; empty without the CLI.
  type: str
  returned: always
  sample: "ActiveState=active\nActiveEnterTimestamp=Tue 2026-12-01 05:41:01.250000 UTC\nNeedDaemonReload=no\n"
running:
  description: Names of the running containers; empty when dockerd does not answer.
  type: list
  elements: str
  returned: always
live_restore:
  description: Whether the running engine has live-restore.
  type: bool
  returned: always
compose_version:
  description: What C(docker compose version --short) printed.
  type: str
  returned: always
  sample: 2.33.1
compose_problem:
  description: Why compose v2 does not answer as a docker plugin; empty when it does.
  type: str
  returned: always
image_id:
  description: The local ID of O(image) (C(docker image inspect)); empty when it is not present or not asked for.
  type: str
  returned: always
  sample: sha256:36cabc1eb086...
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dspark.cluster.plugins.module_utils.docker_runtime_info import StateError, read_state


def run(params, run_command):
    """The result dict for ``params`` (module arguments); StateError when the role must stop."""
    result = read_state(run_command, params['daemon_json'], params['files'], image=params.get('image'))
    if params['require_compose_v2'] and result['compose_problem']:
        raise StateError('compose v2 does not answer as a docker plugin: %s. Fix: install the compose v2 plugin '
                         '(docker-compose-plugin from Docker\'s repository, docker-compose-v2 on Ubuntu, docker-compose on '
                         'Debian), then re-run.' % result['compose_problem'])
    return dict(result, changed=False)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            daemon_json=dict(type='path', default='/etc/docker/daemon.json'),
            files=dict(type='list', elements='path', default=['/etc/docker/daemon.json']),
            require_compose_v2=dict(type='bool', default=True),
            image=dict(type='str'),
        ),
        supports_check_mode=True,
    )
    try:
        result = run(module.params, module.run_command)
    except StateError as error:
        module.fail_json(msg=str(error))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
