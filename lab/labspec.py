# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read a lab inventory and print the container lab it describes, one plain line per object, for lab/lab.sh.

    python3 lab/labspec.py [--json | --name] INVENTORY

INVENTORY is a hosts.yml (or its directory). The variables come from `ansible-inventory -i INVENTORY --list`
(the venv's, so group_vars files and hosts.yml combine exactly as they do for ansible-playbook). Every host
of group `dspark` becomes a container named after the host; its serving group is the inventory group that
its dspark_group names. Output (whitespace-separated, no field is empty or contains spaces):

    lab    NAME
    mgmt   NETWORK SUBNET
    fabric NETWORK GROUP CIDR GATEWAY MTU
    node   NAME GROUP RANK SSH_PORT MGMT_IP FABRIC_NETWORK FABRIC_IP PREFIXLEN FABRIC_IF MTU HOSTS
    router  NAME SSH_PORT MGMT_IP PUBLISH

- NAME of the lab: the inventory's directory name (inventories/lab -> lab, inventories/lab-fleet -> lab-fleet).
- Networks: dspark-NAME-mgmt (subnet from the lab-only variable lab_mgmt_subnet, default 10.231.0.0/24,
  NAT, SSH published on 127.0.0.1:ansible_port) and one internal fabric network per serving group:
  dspark-NAME-fabric when the lab has a single group (the pair lab), dspark-NAME-GROUP otherwise. Its subnet
  is the group's dspark_fabric_cidr, its MTU dspark_fabric_mtu, the host's end of the bridge the last usable
  address of the CIDR.
- Management addresses: .11, .12, ... of the subnet, groups by name, members by rank.
- HOSTS: the --add-host entries NAME-fabric:ADDRESS of the node's own group, by rank, comma-separated.
- Routers: every host of group `dspark_router` (the fleet's router, never a serving node) becomes a container on
  the management network only, at .201, .202, ... (by name; fixed, so adding nodes never moves them), with SSH on
  127.0.0.1:ansible_port and the lab-only `lab_published_ports` (["HOSTPORT:CONTAINERPORT", ...]) published on
  127.0.0.1. PUBLISH is those pairs comma-separated, or `-` for none.
- A serving node's `dspark_mgmt_address`, when set, must be the management address the lab gives it.

Nodes are listed by group name, then rank. On a bad inventory nothing is printed on stdout; every problem is
printed on stderr as `labspec: ERROR: ...` (the host or group, the variable, what is wrong, the fix) and the
exit status is 2 (1 when ansible-inventory itself fails). Stdlib only, and the collection's own pure-Python group
model (plugins/plugin_utils/_group_model.py: one integer reading, members in rank order, as the roles see them),
imported from the checkout's collections/ link: lab.sh runs it with the system python3.
"""

import argparse
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, 'collections'))
from ansible_collections.dspark.cluster.plugins.plugin_utils import _group_model  # noqa: E402  pylint: disable=wrong-import-position
DEFAULT_INVENTORY = os.path.join(REPO, 'inventories', 'lab', 'hosts.yml')
DEFAULT_MGMT_SUBNET = '10.231.0.0/24'
MGMT_FIRST_HOST = 11
MGMT_ROUTER_FIRST = 201
SERVING_PARENT = 'dspark'
ROUTER_PARENT = 'dspark_router'
PORT_MIN, PORT_MAX = 1024, 65535
MTU_MIN, MTU_MAX = 1280, 9216
LOOPBACK = ('127.0.0.1', 'localhost')

_HOSTNAME_RE = re.compile(r'^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$')
_DOCKER_NAME_RE = re.compile(r'^[a-zA-Z0-9][a-zA-Z0-9_.-]*$')
_IFNAME_RE = re.compile(r'^[A-Za-z0-9_.-]{1,15}$')


class SpecError(Exception):
    """The inventory cannot be turned into a lab; .problems lists every reason."""

    def __init__(self, problems):
        super().__init__('\n'.join(problems))
        self.problems = list(problems)


def lab_name(inventory):
    """inventories/lab/hosts.yml -> 'lab'; a directory names itself."""
    path = os.path.abspath(inventory)
    if not os.path.isdir(path):
        path = os.path.dirname(path)
    return os.path.basename(path.rstrip(os.sep))


def find_ansible_inventory():
    """The checkout's venv first (what ansible-playbook there uses), then PATH; DSPARK_ANSIBLE_INVENTORY wins."""
    explicit = os.environ.get('DSPARK_ANSIBLE_INVENTORY')
    if explicit:
        return explicit
    venv = os.path.join(REPO, '.venv', 'bin', 'ansible-inventory')
    if os.access(venv, os.X_OK):
        return venv
    return shutil.which('ansible-inventory')


def load_inventory(inventory):
    """The inventory as `ansible-inventory --list` prints it (hostvars merged the way ansible-playbook sees them)."""
    if not os.path.exists(inventory):
        raise SpecError(['%s: no such inventory file or directory' % inventory])
    tool = find_ansible_inventory()
    if not tool:
        raise SpecError(['ansible-inventory not found (neither %s/.venv/bin nor PATH). Fix: make venv' % REPO])
    env = dict(os.environ, ANSIBLE_INVENTORY_UNPARSED_FAILED='true', ANSIBLE_NOCOLOR='1')
    # The inventory printed whole (lab keys included) is this query's answer, not a record: keep it out of a log file
    # that the caller's Ansible runs write (the serve scenario's leak sweep logs every run).
    env.pop('ANSIBLE_LOG_PATH', None)
    result = subprocess.run([tool, '-i', os.path.abspath(inventory), '--list'], cwd=REPO, env=env,
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError('ansible-inventory -i %s --list failed (exit %d): %s'
                           % (inventory, result.returncode, result.stderr.strip()))
    return json.loads(result.stdout)


def group_hosts(inv, group, _seen=None):
    """Every host of `group` and its children, in inventory order, once each."""
    seen = set() if _seen is None else _seen
    if group in seen:
        return []
    seen.add(group)
    entry = inv.get(group) or {}
    hosts = list(entry.get('hosts', []))
    for child in entry.get('children', []):
        hosts.extend(group_hosts(inv, child, seen))
    return list(dict.fromkeys(hosts))


def _int(value):
    """Non-negative integers only, read as the roles read them (_group_model.as_int): bools and '9000.5' are not."""
    number = _group_model.as_int(value)
    return number if number is not None and number >= 0 else None


def _is_template(value):
    return isinstance(value, str) and ('{{' in value or '{%' in value)


class _Problems(list):
    def add(self, where, var, value, problem, fix):
        if value is None:
            self.append('%s: %s is not set (%s). Fix: %s' % (where, var, problem, fix))
        else:
            self.append('%s: %s=%r %s. Fix: %s' % (where, var, value, problem, fix))


def _literal(problems, host, hostvars, var, problem, fix):
    """A variable the lab needs as a plain value (lab.sh never renders Jinja)."""
    value = hostvars.get(var)
    if value is None:
        problems.add(host, var, None, problem, fix)
        return None
    if _is_template(value):
        problems.add(host, var, value, 'is a template; the lab needs a literal value', 'write the value itself')
        return None
    return value


def _network(problems, where, var, value, fix):
    if not isinstance(value, str) or '/' not in value:
        problems.add(where, var, value, 'is not an IPv4 network in CIDR form', fix)
        return None
    try:
        net = ipaddress.IPv4Network(value, strict=False)
    except ValueError:
        problems.add(where, var, value, 'is not an IPv4 network in CIDR form', fix)
        return None
    if str(net) != value.strip():
        problems.add(where, var, value, 'has host bits set', 'use the network address %s' % net)
    return net


def _ssh_vars(problems, host, hv, example):
    """Check what every lab container needs to be reached: its name, ansible_host, ansible_port.

    Returns (raw_port, port); port is None where invalid."""
    if not _HOSTNAME_RE.match(host):
        problems.add(host, 'inventory_hostname', host, 'is not usable as a container and host name',
                     'use lower-case letters, digits and dashes (e.g. %s)' % example)
    where_host = hv.get('ansible_host')
    if where_host is not None and str(where_host) not in LOOPBACK:
        problems.add(host, 'ansible_host', where_host, 'is not the loopback address the lab publishes SSH on',
                     'set ansible_host: 127.0.0.1 (lab inventories only)')
    raw_port = _literal(problems, host, hv, 'ansible_port', 'the lab publishes each host\'s sshd on 127.0.0.1:<ansible_port>',
                        'give every host of the lab its own ansible_port in %d-%d' % (PORT_MIN, PORT_MAX))
    port = _int(raw_port) if raw_port is not None else None
    if raw_port is not None and (port is None or not PORT_MIN <= port <= PORT_MAX):
        problems.add(host, 'ansible_port', raw_port, 'is not a port in %d-%d' % (PORT_MIN, PORT_MAX),
                     'choose a free TCP port in %d-%d' % (PORT_MIN, PORT_MAX))
        port = None
    return raw_port, port


def _node_vars(problems, host, hv):
    """Check one host's own variables; returns the parsed ones (None where invalid)."""
    raw_port, port = _ssh_vars(problems, host, hv, 'spark-a0')
    raw_rank = _literal(problems, host, hv, 'dspark_rank', 'every node needs its rank in the group',
                        'set 0 on the head and 1..N-1 on the workers')
    rank = _int(raw_rank) if raw_rank is not None else None
    if raw_rank is not None and rank is None:
        problems.add(host, 'dspark_rank', raw_rank, 'is not a non-negative integer', 'set 0 on the head and 1..N-1 on the workers')
    iface = _literal(problems, host, hv, 'dspark_fabric_interface', 'the lab renames the fabric NIC to it',
                     'set the fabric netdev name, e.g. enp1s0f1np1')
    if iface is not None and not (isinstance(iface, str) and _IFNAME_RE.match(iface)):
        problems.add(host, 'dspark_fabric_interface', iface, 'is not a Linux interface name (1-15 of A-Za-z0-9_.-)',
                     'set the fabric netdev name, e.g. enp1s0f1np1')
        iface = None
    raw_mtu = _literal(problems, host, hv, 'dspark_fabric_mtu', 'the fabric bridge is created with it',
                       'set dspark_fabric_mtu, e.g. 9000')
    mtu = _int(raw_mtu) if raw_mtu is not None else None
    if raw_mtu is not None and (mtu is None or not MTU_MIN <= mtu <= MTU_MAX):
        problems.add(host, 'dspark_fabric_mtu', raw_mtu, 'is not an MTU in %d-%d' % (MTU_MIN, MTU_MAX), 'use 9000 (jumbo frames)')
        mtu = None
    address = _literal(problems, host, hv, 'dspark_fabric_address', 'the node\'s address on its group\'s fabric',
                       'set an address inside the group\'s dspark_fabric_cidr')
    return {'host': host, 'port': port, 'rank': rank, 'iface': iface, 'mtu': mtu, 'address': address,
            'raw_port': raw_port}


def _router_vars(problems, host, hv):
    """Check one router's own variables: name, SSH port, published ports."""
    raw_port, port = _ssh_vars(problems, host, hv, 'spark-router')
    raw_publish = hv.get('lab_published_ports', [])
    publish = []
    fix = 'write a list of "HOSTPORT:CONTAINERPORT" strings, e.g. ["18080:8080"] (published on 127.0.0.1 only)'
    if _is_template(raw_publish) or not isinstance(raw_publish, list):
        problems.add(host, 'lab_published_ports', raw_publish, 'is not a list', fix)
        raw_publish = []
    for item in raw_publish:
        match = re.fullmatch(r'\s*([0-9]+):([0-9]+)\s*', str(item))
        pair = (int(match.group(1)), int(match.group(2))) if match else None
        if pair is None or not PORT_MIN <= pair[0] <= PORT_MAX or not 1 <= pair[1] <= PORT_MAX:
            problems.add(host, 'lab_published_ports', item, 'is not HOSTPORT:CONTAINERPORT with a host port in %d-%d'
                         % (PORT_MIN, PORT_MAX), fix)
            continue
        if pair[1] == 22:
            problems.add(host, 'lab_published_ports', item, 'publishes sshd, which ansible_port already does', fix)
            continue
        publish.append(pair)
    return {'host': host, 'port': port, 'publish': publish, 'raw_port': raw_port}


def _agreed(problems, where, members, key, var):
    """(True, the value every member of `where` has for `key`), or (False, None), reported, when they differ."""
    values = {}
    for node in members:
        values.setdefault(repr(node[key]), []).append(node['host'])
    if len(values) > 1:
        detail = '; '.join('%s on %s' % (v, ', '.join(h)) for v, h in sorted(values.items()))
        problems.add(where, var, 'differs', 'between members (%s)' % detail, 'set %s once for the group' % var)
        return False, None
    return True, members[0][key]


def _group(problems, name, members, hostvars):
    """Check one serving group: ranks, fabric CIDR, addresses, MTU. Returns its spec or None."""
    where = 'group %s' % name
    if not _DOCKER_NAME_RE.match(name):
        problems.add(where, 'dspark_group', name, 'cannot be part of a Docker network name', 'use letters, digits, _ . -')
    ranks = {}
    for node in members:
        if node['rank'] is not None:
            ranks.setdefault(node['rank'], []).append(node['host'])
    for rank, hosts in sorted(ranks.items()):
        if len(hosts) > 1:
            problems.add(where, 'dspark_rank', rank, 'is set on %s' % ', '.join(hosts), 'give every member its own rank')
    for node in members:
        node['cidr'] = hostvars[node['host']].get('dspark_fabric_cidr')
    mtu = _agreed(problems, where, members, 'mtu', 'dspark_fabric_mtu')[1]
    agreed, raw_cidr = _agreed(problems, where, members, 'cidr', 'dspark_fabric_cidr')
    fix = 'set the group\'s fabric subnet, e.g. 192.168.101.0/24, in group_vars/%s.yml' % name
    net = None
    if agreed and raw_cidr is None:
        problems.add(where, 'dspark_fabric_cidr', None, 'the lab makes one fabric network per group from it', fix)
    elif agreed and _is_template(raw_cidr):
        problems.add(where, 'dspark_fabric_cidr', raw_cidr, 'is a template; the lab needs a literal value', 'write the value itself')
    elif agreed:
        net = _network(problems, where, 'dspark_fabric_cidr', raw_cidr, fix)
    gateway = None
    if net is not None:
        if net.num_addresses - 2 < len(members) + 1:
            problems.add(where, 'dspark_fabric_cidr', raw_cidr,
                         'has room for %d host(s); the lab needs %d (the members + the bridge on the last address)'
                         % (max(net.num_addresses - 2, 0), len(members) + 1), 'use a larger subnet, e.g. a /24')
            net = None
        else:
            gateway = net.broadcast_address - 1
    seen = {}
    for node in members:
        raw = node['address']
        if raw is None:
            continue
        try:
            addr = ipaddress.IPv4Address(str(raw))
        except ValueError:
            problems.add(node['host'], 'dspark_fabric_address', raw, 'is not an IPv4 address', 'set an address inside %s' % raw_cidr)
            continue
        node['address'] = str(addr)
        if addr in seen:
            problems.add(node['host'], 'dspark_fabric_address', raw, 'is also the address of %s' % seen[addr],
                         'give every member of the group its own fabric address')
        seen.setdefault(addr, node['host'])
        if net is None:
            continue
        if addr not in net:
            problems.add(node['host'], 'dspark_fabric_address', raw, 'is outside the group\'s dspark_fabric_cidr (%s)' % net,
                         'choose an address inside %s or correct dspark_fabric_cidr' % net)
        elif addr in (net.network_address, net.broadcast_address):
            problems.add(node['host'], 'dspark_fabric_address', raw, 'is the network or broadcast address of %s' % net,
                         'use a host address between %s and %s' % (net.network_address + 1, gateway - 1))
        elif addr == gateway:
            problems.add(node['host'], 'dspark_fabric_address', raw,
                         'is the last usable address of %s, which the lab gives the host\'s end of the bridge' % net,
                         'use an address below %s' % gateway)
    return {'name': name, 'net': net, 'gateway': gateway, 'mtu': mtu}


def build(inv, name, inventory='INVENTORY'):
    """The lab spec of `ansible-inventory --list` output `inv`; raises SpecError listing every problem."""
    problems = _Problems()
    hostvars = (inv.get('_meta') or {}).get('hostvars') or {}
    if not _DOCKER_NAME_RE.match(name):
        problems.add('lab', 'name', name, '(the inventory directory name) cannot be part of a Docker name',
                     'rename the inventory directory to letters, digits, _ . -')
    hosts = group_hosts(inv, SERVING_PARENT)
    if not hosts:
        raise SpecError(['%s: group %s has no hosts: the lab is made of the hosts of group %s'
                         % (inventory, SERVING_PARENT, SERVING_PARENT)])
    nodes = {h: _node_vars(problems, h, hostvars.get(h, {})) for h in hosts}

    # Serving groups: the inventory group each host's dspark_group names.
    members = {}
    for host in hosts:
        group = hostvars.get(host, {}).get('dspark_group')
        if not isinstance(group, str) or not group or _is_template(group):
            problems.add(host, 'dspark_group', group, 'does not name the host\'s serving group',
                         'set dspark_group to the name of the inventory group of the host\'s serving group')
        elif host not in group_hosts(inv, group):
            problems.add(host, 'dspark_group', group, 'names a group this host is not in',
                         'add the host to group %s or correct dspark_group' % group)
        else:
            members.setdefault(group, []).append(nodes[host])
    groups = {g: _group(problems, g, m, hostvars) for g, m in sorted(members.items())}

    # Routers (the fleet's endpoint): management network only, never a serving node.
    router_hosts = sorted(group_hosts(inv, ROUTER_PARENT))
    for host in router_hosts:
        if host in nodes:
            problems.add(host, 'groups', '%s and %s' % (SERVING_PARENT, ROUTER_PARENT), 'is in both groups',
                         'a router is not a serving node: keep it out of the groups under %s' % SERVING_PARENT)
    routers = {h: _router_vars(problems, h, hostvars.get(h, {})) for h in router_hosts if h not in nodes}

    # Lab-wide: SSH and published ports, the management subnet, overlapping networks.
    ports = {}
    for node in list(nodes.values()) + list(routers.values()):
        if node['port'] is not None:
            ports.setdefault(node['port'], []).append(node['host'])
    for router in routers.values():
        for host_port, dummy in router['publish']:
            ports.setdefault(host_port, []).append('%s (lab_published_ports)' % router['host'])
    for port, owners in sorted(ports.items()):
        if len(owners) > 1:
            problems.add('lab %s' % name, 'ansible_port', port, 'is set on %s' % ', '.join(owners),
                         'give every host of the lab its own ansible_port (and published port)')
    subnets = {repr(hostvars.get(h, {}).get('lab_mgmt_subnet', DEFAULT_MGMT_SUBNET)) for h in hosts}
    raw_mgmt = hostvars.get(hosts[0], {}).get('lab_mgmt_subnet', DEFAULT_MGMT_SUBNET)
    mgmt = None
    if len(subnets) > 1:
        problems.add('lab %s' % name, 'lab_mgmt_subnet', 'differs', 'between hosts (%s)' % ', '.join(sorted(subnets)),
                     'set lab_mgmt_subnet once for the whole lab (group_vars/dspark.yml)')
    else:
        mgmt = _network(problems, 'lab %s' % name, 'lab_mgmt_subnet', raw_mgmt, 'set e.g. 10.232.0.0/24')
    if mgmt is not None and mgmt.num_addresses - 2 < MGMT_FIRST_HOST - 1 + len(hosts):
        problems.add('lab %s' % name, 'lab_mgmt_subnet', raw_mgmt,
                     'is too small for %d nodes from .%d' % (len(hosts), MGMT_FIRST_HOST), 'use a /24')
        mgmt = None
    if mgmt is not None and routers and (MGMT_FIRST_HOST + len(hosts) > MGMT_ROUTER_FIRST
                                         or mgmt.num_addresses - 2 < MGMT_ROUTER_FIRST - 1 + len(routers)):
        problems.add('lab %s' % name, 'lab_mgmt_subnet', raw_mgmt,
                     'has no room for %d node(s) from .%d and %d router(s) from .%d'
                     % (len(hosts), MGMT_FIRST_HOST, len(routers), MGMT_ROUTER_FIRST), 'use a /24 and fewer nodes')
        mgmt = None
    for router in routers.values():
        own = hostvars.get(router['host'], {}).get('lab_mgmt_subnet')
        if own is not None and own != raw_mgmt:
            problems.add(router['host'], 'lab_mgmt_subnet', own, 'differs from the serving nodes\' (%s)' % raw_mgmt,
                         'set lab_mgmt_subnet once for the whole lab')
    nets = [('lab_mgmt_subnet', mgmt)] + [('dspark_fabric_cidr of %s' % g['name'], g['net']) for g in groups.values()]
    nets = [(label, net) for label, net in nets if net is not None]
    for i, (label_a, net_a) in enumerate(nets):
        for label_b, net_b in nets[i + 1:]:
            if net_a.overlaps(net_b):
                problems.add('lab %s' % name, label_b, str(net_b), 'overlaps %s (%s)' % (label_a, net_a),
                             'give every network of the lab its own subnet')
    if len(groups) > 1 and 'mgmt' in groups:
        problems.add('group mgmt', 'dspark_group', 'mgmt', 'would share its network name with the management network',
                     'rename the group')
    if problems:
        raise SpecError(['%s: %s' % (inventory, p) for p in problems])

    single = len(groups) == 1
    spec = {'lab': name, 'inventory': inventory,
            'mgmt': {'network': 'dspark-%s-mgmt' % name, 'subnet': str(mgmt)},
            'fabrics': [], 'nodes': [], 'routers': []}
    index = 0
    for gname, group in groups.items():
        network = 'dspark-%s-fabric' % name if single else 'dspark-%s-%s' % (name, gname)
        spec['fabrics'].append({'network': network, 'group': gname, 'cidr': str(group['net']),
                                'gateway': str(group['gateway']), 'mtu': group['mtu']})
        by_host = {n['host']: n for n in members[gname]}
        ordered = [by_host[h] for h in _group_model.members_by_rank(list(by_host), lambda h: by_host[h]['rank'])]
        add_hosts = ','.join('%s-fabric:%s' % (n['host'], n['address']) for n in ordered)
        for node in ordered:
            spec['nodes'].append({
                'name': node['host'], 'group': gname, 'rank': node['rank'], 'ssh_port': node['port'],
                'mgmt_ip': str(mgmt.network_address + MGMT_FIRST_HOST + index),
                'fabric_network': network, 'fabric_ip': node['address'], 'prefixlen': group['net'].prefixlen,
                'fabric_if': node['iface'], 'mtu': group['mtu'], 'hosts': add_hosts,
            })
            index += 1
    for index, host in enumerate(sorted(routers)):
        router = routers[host]
        spec['routers'].append({'name': host, 'ssh_port': router['port'],
                                'mgmt_ip': str(mgmt.network_address + MGMT_ROUTER_FIRST + index),
                                'publish': [list(p) for p in router['publish']]})
    # A serving node's dspark_mgmt_address (what the router connects to) must be the address the lab gives it.
    wrong = []
    for node in spec['nodes']:
        want = hostvars.get(node['name'], {}).get('dspark_mgmt_address')
        if want is not None and str(want) != node['mgmt_ip']:
            wrong.append('%s: %s: dspark_mgmt_address=%r is not the management address the lab gives it (%s). Fix: set '
                         'dspark_mgmt_address: %s, or leave it unset'
                         % (inventory, node['name'], want, node['mgmt_ip'], node['mgmt_ip']))
    if wrong:
        raise SpecError(wrong)
    return spec


def render(spec):
    """The plain lines lab.sh reads."""
    lines = ['lab %s' % spec['lab'],
             'mgmt %s %s' % (spec['mgmt']['network'], spec['mgmt']['subnet'])]
    for f in spec['fabrics']:
        lines.append('fabric %s %s %s %s %s' % (f['network'], f['group'], f['cidr'], f['gateway'], f['mtu']))
    for n in spec['nodes']:
        lines.append('node %s %s %s %s %s %s %s %s %s %s %s' % (
            n['name'], n['group'], n['rank'], n['ssh_port'], n['mgmt_ip'], n['fabric_network'], n['fabric_ip'],
            n['prefixlen'], n['fabric_if'], n['mtu'], n['hosts']))
    for g in spec.get('routers', []):
        publish = ','.join('%d:%d' % tuple(p) for p in g['publish']) or '-'
        lines.append('router %s %s %s %s' % (g['name'], g['ssh_port'], g['mgmt_ip'], publish))
    for line in lines:
        if any(not field or field != field.strip() for field in line.split(' ')):
            raise SpecError(['internal: spec line with an empty field: %r' % line])
    return '\n'.join(lines) + '\n'


def spec_for(inventory):
    """Convenience for the tests: the spec of an inventory path."""
    return build(load_inventory(inventory), lab_name(inventory), inventory)


def main(argv=None):
    parser = argparse.ArgumentParser(description='Print the container lab an inventory describes (for lab/lab.sh).')
    parser.add_argument('inventory', nargs='?', default=DEFAULT_INVENTORY, help='hosts.yml or its directory')
    parser.add_argument('--json', action='store_true', help='print the spec as JSON instead of lines')
    parser.add_argument('--name', action='store_true', help='print only the lab name (no ansible-inventory run)')
    args = parser.parse_args(argv)
    if args.name:
        print(lab_name(args.inventory))
        return 0
    try:
        spec = spec_for(args.inventory)
        out = json.dumps(spec, indent=2, sort_keys=True) + '\n' if args.json else render(spec)
    except SpecError as err:
        for problem in err.problems:
            print('labspec: ERROR: %s' % problem, file=sys.stderr)
        return 2
    except (RuntimeError, ValueError) as err:
        print('labspec: ERROR: %s' % err, file=sys.stderr)
        return 1
    sys.stdout.write(out)
    return 0


if __name__ == '__main__':
    sys.exit(main())
