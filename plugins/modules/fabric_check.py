#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_check
short_description: Check a node's ConnectX/RoCE fabric and report the result as data
version_added: 0.1.0
description:
  - Reads the links of the node (C(ip -j addr)), the RDMA ports that O(hca) selects (sysfs), the
    ring buffer sizes of the fabric interfaces (C(SIOCETHTOOL)) and the SSH connection Ansible is
    using, then pings every peer with the Don't Fragment bit set at the full MTU.
  - Each finding names the inventory variable it concerns and the fix. The module never fails
    because of a finding; it returns RV(ok) and RV(problems) so that a play can write a report
    first and then decide.
  - Without O(peers), O(interfaces) entries without C(mtu)/C(address) and with C(require_up=false),
    it only reads, which makes it usable as a validation step before a change. It refuses, as
    problems, a fabric interface that carries the SSH connection and a fabric network that holds
    the management address or overlaps another interface's network.
author:
  - dspark.cluster contributors (@dspark)
options:
  interfaces:
    description:
      - The fabric interfaces to judge.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Interface name, for example C(enp1s0f1np1).
        type: str
        required: true
      variable:
        description: Inventory variable that set O(interfaces[].name), used in the messages.
        type: str
        default: dspark_fabric_interface
      mtu:
        description: Expected MTU; omit to leave the MTU unjudged.
        type: int
      address:
        description: Expected IPv4 address with prefix length, C(a.b.c.d/len); omit to leave it unjudged.
        type: str
      require_up:
        description: Whether the link must be up with carrier.
        type: bool
        default: true
  networks:
    description:
      - Fabric networks that must not take the management connection or overlap another interface's network.
      - Each item has C(cidr) and C(variable) (the inventory variable, used in the messages).
    type: list
    elements: dict
    default: []
  hca:
    description:
      - C(NCCL_IB_HCA) selector of the RDMA ports to judge. Omit to skip the RDMA checks.
    type: str
  hca_variable:
    description: Inventory variable that set O(hca), used in the messages.
    type: str
    default: dspark_fabric_hca
  peers:
    description:
      - Addresses to ping with C(ping -M do -s MTU-28) from the given interface.
      - Each item has C(name), C(address), C(interface) and C(mtu).
    type: list
    elements: dict
    default: []
  ping_count:
    description: Echo requests per peer; a peer passes when at least one full-size reply comes back.
    type: int
    default: 3
  ping_wait:
    description: Seconds C(ping) waits for the last reply (C(-W)).
    type: int
    default: 2
  read_rings:
    description: Read the RX/TX ring sizes and their maxima of the O(interfaces).
    type: bool
    default: false
  sysfs_root:
    description: Directory laid out like C(/sys/class/infiniband). Change it only for tests.
    type: path
    default: /sys/class/infiniband
  sysctls:
    description: Sysctl names whose current values to return in RV(sysctls).
    type: list
    elements: str
    default: []
  packages:
    description: Debian packages whose absence to report in RV(missing_packages).
    type: list
    elements: str
    default: []
  units:
    description: systemd units whose load, active and unit file states to return in RV(units).
    type: list
    elements: str
    default: []
  paths:
    description:
      - Files whose existence, SHA-1 checksum and mode to return in RV(paths), so that a play can
        write only the files whose content differs.
    type: list
    elements: path
    default: []
extends_documentation_fragment:
  - dspark.cluster.read_only
attributes:
  platform:
    support: full
    platforms: posix
    description: Needs Linux with iproute2 (C(ip -j)), iputils C(ping) for O(peers) and RDMA sysfs for O(hca).
notes:
  - The SSH connection is read from C(SSH_CONNECTION) of this process or, under become, of its
    parent processes; RV(management) is null for local or non-SSH connections.
seealso:
  - module: dspark.cluster.roce_gid_index
  - module: dspark.cluster.rdma_bandwidth
"""

EXAMPLES = r"""
- name: Validate before any change (reads only)
  dspark.cluster.fabric_check:
    interfaces:
      - name: "{{ dspark_fabric_interface }}"
        require_up: false
    networks:
      - cidr: "{{ dspark_fabric_cidr }}"
        variable: dspark_fabric_cidr
    read_rings: true
  register: pre

- name: Links, MTU, RDMA ports and DF pings after the change
  dspark.cluster.fabric_check:
    interfaces:
      - name: enp1s0f1np1
        mtu: 9000
        address: 192.168.100.1/24
    hca: rocep1s0f1
    peers:
      - name: spark-worker
        address: 192.168.100.2
        interface: enp1s0f1np1
        mtu: 9000
  register: fabric
"""

RETURN = r"""
ok:
  description: True when no problem was found.
  returned: always
  type: bool
  sample: true
problems:
  description: Every finding as a sentence that names the variable and the fix.
  returned: always
  type: list
  elements: str
  sample: ["dspark_fabric_interface=enp9s0 does not exist on this node (interfaces: eth0, enp1s0f1np1). Fix: ..."]
links:
  description: One result per O(interfaces) item (interface, variable, exists, operstate, carrier, mtu,
    mtu_expected, ipv4, address_expected, ok, problems).
  returned: always
  type: list
  elements: dict
  sample: [{"interface": "enp1s0f1np1", "exists": true, "operstate": "up", "mtu": 9000, "ok": true}]
interfaces:
  description: Every interface of the node with its MTU, state and addresses.
  returned: always
  type: dict
  sample: {"eth0": {"mtu": 1500, "operstate": "up", "up": true, "carrier": true, "ipv4": ["10.0.2.15/24"]}}
management:
  description: The SSH connection Ansible uses (client, server, ports) and the interface that reaches the controller.
  returned: always
  type: dict
  sample: {"client": "10.0.2.2", "client_port": "40522", "server": "10.0.2.15", "server_port": "22", "interface": "eth0"}
rdma:
  description: One result per RDMA port that O(hca) selects (device, port, state, phys_state, link_layer, netdev, ok).
  returned: always
  type: list
  elements: dict
  sample: [{"device": "rocep1s0f1", "port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "netdev": "enp1s0f1np1", "ok": true}]
pings:
  description: One result per O(peers) item (peer, address, interface, size, mtu, transmitted, received,
    loss_percent, rtt_avg_ms, too_long, ok).
  returned: always
  type: list
  elements: dict
  sample: [{"peer": "spark-worker", "address": "192.168.100.2", "size": 8972, "received": 3, "ok": true}]
rings:
  description: RX/TX ring sizes and maxima per interface, with O(read_rings); C(supported) is false
    when the driver does not report them.
  returned: always
  type: dict
  sample: {"enp1s0f1np1": {"supported": true, "rx_max": 8192, "tx_max": 8192, "rx": 1024, "tx": 1024}}
tools:
  description: Path of each tool the fabric role may call, or null.
  returned: always
  type: dict
  sample: {"networkctl": "/usr/bin/networkctl", "netplan": null, "nmcli": null, "ethtool": "/usr/sbin/ethtool"}
services:
  description: C(systemctl is-active) of systemd-networkd and NetworkManager.
  returned: always
  type: dict
  sample: {"systemd-networkd": "active", "NetworkManager": "inactive"}
sysctls:
  description: Current value of each O(sysctls) name, whitespace collapsed, or null when it does not exist.
  returned: always
  type: dict
  sample: {"net.core.rmem_max": "212992", "net.ipv4.tcp_rmem": "4096 131072 6291456"}
missing_packages:
  description: The O(packages) that are not installed.
  returned: always
  type: list
  elements: str
  sample: ["perftest"]
units:
  description: LoadState, ActiveState and UnitFileState of each O(units) item.
  returned: always
  type: dict
  sample: {"earlyoom.service": {"LoadState": "masked", "ActiveState": "inactive", "UnitFileState": "masked"}}
paths:
  description: For each O(paths) item, whether it exists and, for a regular file, its SHA-1 checksum
    (as M(ansible.builtin.copy) computes it) and its mode.
  returned: always
  type: dict
  sample: {"/etc/sysctl.d/90-dspark-fabric.conf": {"exists": true, "checksum": "5c5f...", "mode": "0644"}}
container:
  description: The container type when the node is a container (C(systemd-detect-virt --container)), else null.
  returned: always
  type: str
  sample: docker
"""

import array
import fcntl
import json
import os
import socket
import stat
import struct

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dspark.cluster.plugins.module_utils.fabric_check import (
    check_links,
    check_management,
    check_rdma,
    parse_ip_addr_json,
    parse_ping,
    parse_ssh_connection,
    ping_problem,
)
from ansible_collections.dspark.cluster.plugins.module_utils.roce_gid import parse_hca_selector, scan_sysfs

SIOCETHTOOL = 0x8946
ETHTOOL_GRINGPARAM = 0x10
TOOLS = ('networkctl', 'netplan', 'nmcli', 'ethtool', 'ping', 'ib_write_bw', 'udevadm')
SERVICES = ('systemd-networkd', 'NetworkManager')


def read_rings(name):
    """RX/TX ring sizes through SIOCETHTOOL/ETHTOOL_GRINGPARAM (what `ethtool -g` prints)."""
    buf = array.array('I', [ETHTOOL_GRINGPARAM] + [0] * 8)
    addr = buf.buffer_info()[0]
    ifreq = struct.pack('16sP', name.encode()[:15], addr)
    ifreq += b'\0' * (40 - len(ifreq))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)
    except OSError as e:
        return {'supported': False, 'error': os.strerror(e.errno) if e.errno else str(e)}
    finally:
        sock.close()
    values = buf.tolist()
    return {'supported': True, 'rx_max': values[1], 'tx_max': values[4], 'rx': values[5], 'tx': values[8]}


def find_ssh_connection():
    """SSH_CONNECTION of this process or of the nearest ancestor that has it (become drops it)."""
    value = os.environ.get('SSH_CONNECTION')
    if value:
        return value
    pid, seen = os.getppid(), set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            with open('/proc/%d/environ' % pid, 'rb') as f:
                env = f.read()
            for item in env.split(b'\0'):
                if item.startswith(b'SSH_CONNECTION='):
                    return item.split(b'=', 1)[1].decode('utf-8', 'replace')
            with open('/proc/%d/stat' % pid) as f:
                pid = int(f.read().rsplit(')', 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return None


def route_interface(module, ip_bin, address):
    rc, out, _err = module.run_command([ip_bin, '-j', 'route', 'get', address])
    if rc != 0:
        return None
    try:
        routes = json.loads(out)
    except ValueError:
        return None
    return routes[0].get('dev') if routes else None


def detect_container(module):
    """Container type (docker, podman, lxc, ...) or None on a host or a VM."""
    sdv = module.get_bin_path('systemd-detect-virt')
    if sdv:
        rc, out, _err = module.run_command([sdv, '--container'])
        value = out.strip()
        return value if rc == 0 and value and value != 'none' else None
    if os.path.exists('/.dockerenv'):
        return 'docker'
    try:
        with open('/run/systemd/container') as f:
            return f.read().strip() or None
    except OSError:
        return None


def read_phys_states(root, inventory):
    out = {}
    for device in inventory:
        for port in inventory[device].get('ports', {}):
            try:
                with open(os.path.join(root, device, 'ports', str(port), 'phys_state')) as f:
                    text = f.read().strip()
            except OSError:
                continue
            out[(device, port)] = text.split(':', 1)[-1].strip()
    return out


def ping(module, ping_bin, peer, count, wait):
    mtu = int(peer.get('mtu') or 1500)
    size = mtu - 28
    cmd = [ping_bin, '-n', '-M', 'do', '-s', str(size), '-c', str(count), '-i', '0.2', '-W', str(wait)]
    if peer.get('interface'):
        cmd += ['-I', peer['interface']]
    cmd.append(peer['address'])
    # A second try when nothing came back: right after an address change, neighbour resolution on a
    # busy node can outlast the first burst. A local "message too long" is final.
    for attempt in (1, 2):
        rc, out, err = module.run_command(cmd)
        res = parse_ping(out + err)
        res['ok'] = rc == 0 and (res['received'] or 0) > 0 and not res['too_long']
        if res['ok'] or res['too_long']:
            break
    res.update({'peer': peer.get('name') or peer['address'], 'address': peer['address'],
                'interface': peer.get('interface'), 'mtu': mtu, 'size': size, 'rc': rc, 'attempts': attempt,
                'output': (out + err).strip()[-400:]})
    return res


def main():
    module = AnsibleModule(
        argument_spec=dict(
            interfaces=dict(type='list', elements='dict', default=[], options=dict(
                name=dict(type='str', required=True),
                variable=dict(type='str', default='dspark_fabric_interface'),
                mtu=dict(type='int'),
                address=dict(type='str'),
                require_up=dict(type='bool', default=True),
            )),
            networks=dict(type='list', elements='dict', default=[]),
            hca=dict(type='str'),
            hca_variable=dict(type='str', default='dspark_fabric_hca'),
            peers=dict(type='list', elements='dict', default=[]),
            ping_count=dict(type='int', default=3),
            ping_wait=dict(type='int', default=2),
            read_rings=dict(type='bool', default=False),
            sysfs_root=dict(type='path', default='/sys/class/infiniband'),
            sysctls=dict(type='list', elements='str', default=[]),
            packages=dict(type='list', elements='str', default=[]),
            units=dict(type='list', elements='str', default=[]),
            paths=dict(type='list', elements='path', default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    ip_bin = module.get_bin_path('ip', required=True)
    rc, out, err = module.run_command([ip_bin, '-j', 'addr', 'show'])
    if rc != 0:
        module.fail_json(msg='`ip -j addr show` failed (rc=%d): %s' % (rc, (err or out).strip()))
    links = parse_ip_addr_json(json.loads(out or '[]'))

    management = parse_ssh_connection(find_ssh_connection())
    if management:
        management['interface'] = route_interface(module, ip_bin, management['client'])

    link_results, problems = check_links(p['interfaces'], links)
    problems += check_management(p['interfaces'], p['networks'], links, management)

    rdma = []
    if p['hca']:
        try:
            selector = parse_hca_selector(p['hca'])
        except ValueError as e:
            module.fail_json(msg='%s=%s is not a valid NCCL_IB_HCA selector: %s' % (p['hca_variable'], p['hca'], e))
        inventory = scan_sysfs(p['sysfs_root'])
        rdma, found = check_rdma(selector, inventory, read_phys_states(p['sysfs_root'], inventory),
                                 [i['name'] for i in p['interfaces']], p['hca_variable'])
        problems += found

    pings = []
    if p['peers']:
        ping_bin = module.get_bin_path('ping')
        if not ping_bin:
            problems.append('ping is not installed, so the MTU cannot be checked end to end. Fix: install iputils-ping.')
        else:
            for peer in p['peers']:
                res = ping(module, ping_bin, peer, p['ping_count'], p['ping_wait'])
                pings.append(res)
                why = ping_problem(res)
                if why:
                    problems.append(why)

    rings = {}
    if p['read_rings']:
        for spec in p['interfaces']:
            if spec['name'] in links:
                rings[spec['name']] = read_rings(spec['name'])

    tools = dict((t, module.get_bin_path(t)) for t in TOOLS)
    services = dict((s, 'unknown') for s in SERVICES)
    systemctl = module.get_bin_path('systemctl')
    if systemctl:
        _rc, out, _err = module.run_command([systemctl, 'is-active'] + ['%s.service' % s for s in SERVICES])
        for name, state in zip(SERVICES, out.split()):
            services[name] = state

    sysctls = {}
    for name in p['sysctls']:
        try:
            with open('/proc/sys/' + name.replace('.', '/')) as f:
                sysctls[name] = ' '.join(f.read().split())
        except OSError:
            sysctls[name] = None

    missing = []
    if p['packages']:
        dpkg_query = module.get_bin_path('dpkg-query')
        installed = set()
        if dpkg_query:
            # ${...} is dpkg-query's format, not a variable to expand.
            fmt = '${Package} ${db:Status-Status}\\n'
            _rc, out, _err = module.run_command([dpkg_query, '-W', '-f', fmt] + p['packages'], expand_user_and_vars=False)
            installed = set(line.split()[0].split(':')[0] for line in out.splitlines()
                            if line.split()[1:] == ['installed'])
        missing = [pkg for pkg in p['packages'] if pkg not in installed]

    units = {}
    if p['units'] and systemctl:
        for unit in p['units']:
            _rc, out, _err = module.run_command([systemctl, 'show', '-p', 'LoadState,ActiveState,UnitFileState', unit])
            units[unit] = dict(line.split('=', 1) for line in out.splitlines() if '=' in line)

    paths = {}
    for path in p['paths']:
        info = {'exists': os.path.lexists(path), 'checksum': None, 'mode': None}
        if os.path.isfile(path):
            info['checksum'] = module.sha1(path)
            info['mode'] = '%04o' % stat.S_IMODE(os.stat(path).st_mode)
        paths[path] = info

    module.exit_json(changed=False, ok=not problems, problems=problems, links=link_results, interfaces=links,
                     management=management, rdma=rdma, pings=pings, rings=rings, tools=tools, services=services,
                     container=detect_container(module), sysctls=sysctls, missing_packages=missing, units=units,
                     paths=paths)


if __name__ == '__main__':
    main()
