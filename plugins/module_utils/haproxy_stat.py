# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read the servers of an HAProxy backend from its runtime API (the local admin socket). Read only.

Pure logic plus one small client, no Ansible imports, Python 3.8 compatible. State changes (drain, ready)
are not made here: the playbooks use community.general.haproxy for those.

- ``show stat`` (CSV): per server its status as the stats page shows it (UP, DOWN, DRAIN, MAINT,
  "UP 1/2" while a check is failing ...), current sessions (scur), seconds since the last UP/DOWN change
  (lastchg), the last health check's result.
- ``show servers state <backend>``: per server the operational state (srv_op_state: 0 stopped, 1 starting,
  2 running, 3 stopping) and the administrative flags (srv_admin_state, see ADMIN_FLAGS), which
  ``show stat`` hides while a drained server is down.
"""

import csv
import socket
import time

# srv_admin_state bits (HAProxy include/haproxy/server-t.h, enum srv_admin).
ADMIN_FLAGS = (
    (0x01, 'maint'),            # forced into maintenance (disable server / set server state maint)
    (0x02, 'maint_inherited'),  # inherited from a tracked server
    (0x04, 'maint_config'),     # "disabled" in the configuration
    (0x08, 'drain'),            # forced into drain (set server state drain)
    (0x10, 'drain_inherited'),
    (0x20, 'maint_resolution'),  # address resolution failed
    (0x40, 'maint_fqdn'),
)
MAINT_MASK = 0x01 | 0x02 | 0x04 | 0x20
DRAIN_MASK = 0x08 | 0x10
OP_STATES = {0: 'stopped', 1: 'starting', 2: 'running', 3: 'stopping'}
STAT_FIELDS = ('status', 'scur', 'smax', 'stot', 'lastchg', 'downtime', 'chkfail', 'check_status', 'check_code',
               'check_duration', 'last_chk', 'weight', 'addr')
INT_FIELDS = ('scur', 'smax', 'stot', 'lastchg', 'downtime', 'chkfail', 'check_code', 'check_duration', 'weight')


class HAProxyError(Exception):
    """The runtime API could not be reached or answered with an error."""


def query(path, command, timeout=5.0):
    """Send one command to the HAProxy runtime API on the unix socket ``path``; return its answer as text."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(timeout)
    try:
        client.connect(path)
        client.sendall(command.encode('ascii') + b'\n')
        chunks = []
        while True:
            chunk = client.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    except (OSError, socket.timeout) as err:
        raise HAProxyError('HAProxy runtime API on %s: %s: %s' % (path, command, err))
    finally:
        client.close()
    return b''.join(chunks).decode('utf-8', 'replace')


def _int(value, default=None):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _stat_rows(text):
    lines = (text or '').splitlines()
    if not lines or not lines[0].startswith('# '):
        raise HAProxyError('unexpected "show stat" answer: %r' % (text or '')[:200])
    lines[0] = lines[0][2:]
    return list(csv.DictReader(line for line in lines if line.strip()))


def backend_exists(text, backend):
    """Whether the ``show stat`` CSV ``text`` has a backend named ``backend``."""
    return any(row.get('pxname') == backend and row.get('svname') == 'BACKEND' for row in _stat_rows(text))


def parse_stat(text, backend):
    """``show stat`` CSV -> {server name: {field: value}} for the servers (not FRONTEND/BACKEND) of ``backend``."""
    servers = {}
    for row in _stat_rows(text):
        if row.get('pxname') != backend or row.get('svname') in ('FRONTEND', 'BACKEND'):
            continue
        entry = {}
        for field in STAT_FIELDS:
            value = row.get(field, '')
            entry[field] = _int(value) if field in INT_FIELDS else value
        # "* L7OK": that check is running now; the result shown is the previous one.
        entry['check_status'] = entry['check_status'].lstrip('* ')
        servers[row['svname']] = entry
    return servers


def parse_servers_state(text, backend):
    """``show servers state`` (format version 1) -> {server name: {op_state, admin_state, ...}} of ``backend``."""
    lines = [line for line in (text or '').splitlines() if line.strip()]
    if not lines or lines[0].strip() != '1':
        raise HAProxyError('unexpected "show servers state" answer (format version 1 expected): %r' % (text or '')[:200])
    header = None
    servers = {}
    for line in lines[1:]:
        if line.startswith('#'):
            header = line.lstrip('# ').split()
            continue
        if header is None:
            continue
        row = dict(zip(header, line.split()))
        if row.get('be_name') != backend:
            continue
        servers[row['srv_name']] = {
            'op_state': _int(row.get('srv_op_state'), -1),
            'admin_state': _int(row.get('srv_admin_state'), 0),
            'weight_configured': _int(row.get('srv_iweight')),
            'weight_current': _int(row.get('srv_uweight')),
            'address': row.get('srv_addr', ''),
            'port': _int(row.get('srv_port')),
        }
    return servers


def admin_flags(admin_state):
    """srv_admin_state -> the names of its set bits, e.g. 0x08 -> ['drain']."""
    return [name for bit, name in ADMIN_FLAGS if admin_state & bit]


def combine(stat, state):
    """One list of server dicts, sorted by name, from parse_stat and parse_servers_state of one backend."""
    servers = []
    for name in sorted(set(stat) | set(state)):
        st = stat.get(name, {})
        sv = state.get(name, {'op_state': -1, 'admin_state': 0})
        admin = sv['admin_state']
        if admin & MAINT_MASK:
            admin_name = 'maint'
        elif admin & DRAIN_MASK:
            admin_name = 'drain'
        else:
            admin_name = 'ready'
        healthy = sv['op_state'] == 2
        weight = sv.get('weight_current')
        entry = {
            'name': name,
            'status': st.get('status', ''),
            'op_state': OP_STATES.get(sv['op_state'], 'unknown'),
            'healthy': healthy,
            'admin': admin_name,
            'admin_flags': admin_flags(admin),
            # Takes new requests: health check passing, neither drained nor in maintenance, a weight above 0.
            'in_rotation': sv['op_state'] in (1, 2) and admin_name == 'ready' and (weight is None or weight > 0),
            'sessions': st.get('scur') or 0,
            'sessions_max': st.get('smax') or 0,
            'sessions_total': st.get('stot') or 0,
            'seconds_since_change': st.get('lastchg'),
            'downtime_seconds': st.get('downtime'),
            'check_failures': st.get('chkfail'),
            'check_status': st.get('check_status', ''),
            'check_code': st.get('check_code'),
            'last_check': st.get('last_chk', ''),
            'weight': weight,
            'address': sv.get('address', '') or st.get('addr', ''),
            'port': sv.get('port'),
        }
        servers.append(entry)
    return servers


def read_servers(path, backend, timeout=5.0):
    """The servers of ``backend`` as combine() lists them, or None when HAProxy has no such backend."""
    stat_text = query(path, 'show stat', timeout)
    if not backend_exists(stat_text, backend):
        return None
    stat = parse_stat(stat_text, backend)
    state = parse_servers_state(query(path, 'show servers state %s' % backend, timeout), backend)
    return combine(stat, state)


def condition_met(server, wait_for):
    """Whether ``server`` (a combine() dict) satisfies ``wait_for``: no_sessions, healthy or in_rotation."""
    if wait_for == 'no_sessions':
        return server['sessions'] == 0
    if wait_for == 'healthy':
        return server['healthy']
    if wait_for == 'in_rotation':
        return server['in_rotation']
    raise ValueError('unknown condition %r' % wait_for)


def wait_for_server(read, name, wait_for, timeout, interval, clock=time.monotonic, sleep=time.sleep):
    """Poll ``read()`` (-> server list) until server ``name`` meets ``wait_for`` or ``timeout`` seconds pass.

    Returns (servers, server, waited seconds, timed_out). ``server`` is None when the name is not there.
    """
    started = clock()
    while True:
        servers = read()
        server = next((s for s in servers if s['name'] == name), None)
        waited = clock() - started
        if server is None:
            return servers, None, waited, False
        if condition_met(server, wait_for):
            return servers, server, waited, False
        if waited >= timeout:
            return servers, server, waited, True
        sleep(min(interval, max(timeout - waited, 0.05)))
