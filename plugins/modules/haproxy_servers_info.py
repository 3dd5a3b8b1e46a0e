#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: haproxy_servers_info
short_description: Read the servers of an HAProxy backend from the local runtime API, optionally waiting for one
version_added: 0.1.0
description:
  - Reads C(show stat) and C(show servers state) from HAProxy's admin socket on the target host and returns, per
    server of O(backend), its health (operational state), its administrative state (ready, drain or maint), whether
    it takes new requests (C(in_rotation)), its current sessions and its last health check.
  - With O(server) and O(wait_for), polls until that server has no sessions left (C(no_sessions)), passes its health
    check (C(healthy)) or is in rotation (C(in_rotation)), for at most O(timeout) seconds. A timeout is not a failure;
    RV(timed_out) says so and the caller decides.
  - Never changes anything (state changes go through community.general.haproxy). The C(dspark.cluster.router) role
    and C(playbooks/router_*.yml) use it.
author:
  - dspark.cluster contributors (@dspark)
options:
  socket:
    description:
      - Path of HAProxy's admin socket (C(stats socket ... level admin)) on the target host.
    type: path
    default: /run/haproxy/admin.sock
  backend:
    description:
      - Name of the backend whose servers are read.
    type: str
    required: true
  server:
    description:
      - Name of one server of O(backend), returned as RV(server) and the subject of O(wait_for).
    type: str
  wait_for:
    description:
      - What to wait for on O(server); C(none) reads once.
    type: str
    choices: [none, no_sessions, healthy, in_rotation]
    default: none
  timeout:
    description:
      - Seconds to wait at most for O(wait_for).
    type: float
    default: 0
  interval:
    description:
      - Seconds between two reads while waiting.
    type: float
    default: 1
extends_documentation_fragment:
  - dspark.cluster.read_only
attributes:
  platform:
    support: full
    platforms: posix
    description: A host running HAProxy with an admin socket.
notes:
  - The admin socket is local only (a unix socket); the module runs on the router host, usually with become.
"""

EXAMPLES = r"""
- name: Read the servers of the router's backend
  dspark.cluster.haproxy_servers_info:
    backend: dspark
  register: router_servers

- name: Wait up to 5 minutes until pair_a has no sessions left
  dspark.cluster.haproxy_servers_info:
    backend: dspark
    server: pair_a
    wait_for: no_sessions
    timeout: 300
  register: router_wait
"""

RETURN = r"""
found:
  description: Whether HAProxy has the backend O(backend).
  type: bool
  returned: always
servers:
  description: Every server of O(backend), by name.
  type: list
  elements: dict
  returned: always
  sample:
    - name: pair_a
      status: UP
      op_state: running
      healthy: true
      admin: ready
      admin_flags: []
      in_rotation: true
      sessions: 2
      sessions_max: 5
      sessions_total: 830
      seconds_since_change: 412
      downtime_seconds: 6
      check_failures: 3
      check_status: L7OK
      check_code: 200
      last_check: OK
      weight: 1
      address: 10.232.0.11
      port: 8888
server:
  description: The entry of O(server) in RV(servers), or null when O(server) is unset or not in the backend.
  type: dict
  returned: always
waited:
  description: Seconds spent waiting for O(wait_for) (0 without it).
  type: float
  returned: always
timed_out:
  description: Whether O(timeout) passed before O(server) met O(wait_for).
  type: bool
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dspark.cluster.plugins.module_utils.haproxy_stat import HAProxyError, read_servers, wait_for_server


def run(params, reader=read_servers):
    """The result dict for ``params``; raises HAProxyError when the socket does not answer."""
    result = dict(changed=False, found=True, servers=[], server=None, waited=0.0, timed_out=False)

    def read():
        servers = reader(params['socket'], params['backend'])
        if servers is None:
            raise LookupError(params['backend'])
        return servers

    try:
        if params['server'] and params['wait_for'] != 'none':
            servers, server, waited, timed_out = wait_for_server(read, params['server'], params['wait_for'],
                                                                 params['timeout'], params['interval'])
            result.update(servers=servers, server=server, waited=round(waited, 2), timed_out=timed_out)
        else:
            servers = read()
            result['servers'] = servers
            result['server'] = next((s for s in servers if s['name'] == params['server']), None)
    except LookupError:
        result['found'] = False
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            socket=dict(type='path', default='/run/haproxy/admin.sock'),
            backend=dict(type='str', required=True),
            server=dict(type='str'),
            wait_for=dict(type='str', default='none', choices=['none', 'no_sessions', 'healthy', 'in_rotation']),
            timeout=dict(type='float', default=0),
            interval=dict(type='float', default=1),
        ),
        required_if=[('wait_for', 'no_sessions', ['server']), ('wait_for', 'healthy', ['server']),
                     ('wait_for', 'in_rotation', ['server'])],
        supports_check_mode=True,
    )
    try:
        result = run(module.params)
    except HAProxyError as err:
        module.fail_json(msg='%s. Is HAProxy running, and is this the admin socket of its configuration?' % err)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
