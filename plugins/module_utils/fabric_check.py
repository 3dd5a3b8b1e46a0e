# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure logic of the fabric checks: parse what ip(8), ping(8) and ib_write_bw print, judge links,
RDMA ports and the management connection, and say what is wrong in words that name the inventory
variable and the fix.

No Ansible imports, Python 3.8 compatible. The modules ``fabric_check`` and ``rdma_bandwidth`` do
the I/O and call into here.
"""

import ipaddress
import re

from ansible_collections.dspark.cluster.plugins.module_utils.roce_gid import item_matches, selector_matches

# ------------------------------------------------------------------------------------------------
# ping(8)
# ------------------------------------------------------------------------------------------------

_PING_STATS_RE = re.compile(
    r'(?P<tx>\d+) packets transmitted, (?P<rx>\d+) (?:packets )?received'
    r'(?:, \+(?P<err>\d+) errors)?(?:, (?P<loss>[\d.]+)% packet loss)?')
_PING_RTT_RE = re.compile(r'= (?P<min>[\d.]+)/(?P<avg>[\d.]+)/(?P<max>[\d.]+)(?:/[\d.]+)? ms')


def parse_ping(text):
    """Summary of ``ping`` output (iputils).

    Returns ``{'transmitted', 'received', 'errors', 'loss_percent', 'rtt_avg_ms', 'too_long'}``;
    ``too_long`` is true when the kernel refused the packet locally (``Message too long``: the
    local MTU is below the size asked for with ``-M do``). Counters are None when ping printed no
    statistics (e.g. an unknown interface).
    """
    text = text or ''
    out = {'transmitted': None, 'received': None, 'errors': 0, 'loss_percent': None,
           'rtt_avg_ms': None, 'too_long': 'message too long' in text.lower()}
    m = _PING_STATS_RE.search(text)
    if m:
        out['transmitted'] = int(m.group('tx'))
        out['received'] = int(m.group('rx'))
        out['errors'] = int(m.group('err') or 0)
        if m.group('loss') is not None:
            out['loss_percent'] = float(m.group('loss'))
        elif out['transmitted']:
            out['loss_percent'] = 100.0 * (out['transmitted'] - out['received']) / out['transmitted']
    m = _PING_RTT_RE.search(text)
    if m:
        out['rtt_avg_ms'] = float(m.group('avg'))
    return out


# ------------------------------------------------------------------------------------------------
# ib_write_bw (perftest)
# ------------------------------------------------------------------------------------------------

_BW_HEADER_RE = re.compile(r'#bytes\s+#iterations\s+BW peak\[(?P<unit>[^\]]+)\]\s+BW average\[[^\]]+\]')
_BW_ROW_RE = re.compile(r'^\s*(?P<bytes>\d+)\s+(?P<iters>\d+)\s+(?P<peak>[\d.]+)\s+(?P<avg>[\d.]+)'
                        r'(?:\s+(?P<rate>[\d.]+))?\s*$')
# What perftest prints when the TCP side channel to the server cannot be opened (server not up yet).
CONNECT_ERRORS = ("Couldn't connect to", 'Unable to open file descriptor for socket connection',
                  'Unable to init the socket connection')


def parse_ib_write_bw(text):
    """The result row of an ``ib_write_bw`` run, or None when there is none.

    Returns ``{'bytes', 'iterations', 'bw_peak', 'bw_average', 'msg_rate_mpps', 'unit',
    'gbits_average', 'gbits_peak'}``. ``unit`` is what the header says (``Gb/sec`` with
    ``--report_gbits``, else ``MB/sec``, which perftest means as MiB/s); the ``gbits_*`` values are
    converted to Gb/s either way. With ``-D`` perftest does not measure the peak and prints 0.
    """
    text = text or ''
    header = None
    for line in text.splitlines():
        h = _BW_HEADER_RE.search(line)
        if h:
            header = h.group('unit')
            continue
        if header is None:
            continue
        m = _BW_ROW_RE.match(line)
        if not m:
            continue
        peak, avg = float(m.group('peak')), float(m.group('avg'))
        if header.lower().startswith('gb'):
            gpeak, gavg = peak, avg
        else:
            # perftest's MB/sec is 2^20 bytes per second.
            gpeak, gavg = peak * 8 * 1048576 / 1e9, avg * 8 * 1048576 / 1e9
        return {
            'bytes': int(m.group('bytes')),
            'iterations': int(m.group('iters')),
            'bw_peak': peak,
            'bw_average': avg,
            'msg_rate_mpps': float(m.group('rate')) if m.group('rate') else None,
            'unit': header,
            'gbits_average': round(gavg, 6),
            'gbits_peak': round(gpeak, 6),
        }
    return None


def is_connect_error(text):
    """True when ib_write_bw failed only because the server did not accept the TCP connection."""
    return any(marker in (text or '') for marker in CONNECT_ERRORS)


# ------------------------------------------------------------------------------------------------
# ip -j addr / the management connection
# ------------------------------------------------------------------------------------------------

def parse_ip_addr_json(data):
    """``ip -j addr show`` (parsed JSON) -> {ifname: {'mtu', 'operstate', 'up', 'carrier', 'ipv4',
    'ipv6', 'master'}}; ``ipv4``/``ipv6`` hold ``address/prefix`` strings."""
    links = {}
    for link in data or []:
        name = link.get('ifname')
        if not name:
            continue
        flags = link.get('flags') or []
        v4, v6 = [], []
        for a in link.get('addr_info') or []:
            if a.get('family') == 'inet' and a.get('local'):
                v4.append('%s/%s' % (a['local'], a.get('prefixlen', 32)))
            elif a.get('family') == 'inet6' and a.get('local'):
                v6.append('%s/%s' % (a['local'], a.get('prefixlen', 128)))
        links[name] = {
            'mtu': link.get('mtu'),
            'operstate': (link.get('operstate') or 'UNKNOWN').lower(),
            'up': 'UP' in flags,
            'carrier': 'LOWER_UP' in flags,
            'ipv4': v4,
            'ipv6': v6,
            'master': link.get('master'),
        }
    return links


def parse_ssh_connection(value):
    """``SSH_CONNECTION`` ("client_ip client_port server_ip server_port") -> dict, or None."""
    parts = (value or '').split()
    if len(parts) != 4:
        return None
    try:
        client = ipaddress.ip_address(parts[0].split('%')[0])
        server = ipaddress.ip_address(parts[2].split('%')[0])
    except ValueError:
        return None
    return {'client': str(client), 'client_port': parts[1], 'server': str(server), 'server_port': parts[3]}


# ------------------------------------------------------------------------------------------------
# judgements
# ------------------------------------------------------------------------------------------------

def _var(spec, key='variable', fallback='the fabric interface'):
    return spec.get(key) or fallback


def check_links(specs, links):
    """Judge each wanted fabric link against ``links`` (from parse_ip_addr_json).

    ``specs``: [{'name', 'variable', 'mtu' (or None), 'address' ('a.b.c.d/len' or None),
    'require_up' (bool)}]. Returns ``(results, problems)``; every problem names the variable.
    """
    results, problems = [], []
    known = ', '.join(sorted(n for n in links if n != 'lo')) or 'none'
    for spec in specs:
        name = spec['name']
        var = _var(spec)
        info = links.get(name)
        res = {'interface': name, 'variable': var, 'exists': info is not None, 'ok': True, 'problems': []}
        if info is None:
            res['ok'] = False
            res['problems'].append(
                '%s=%s does not exist on this node (interfaces: %s). Fix: set %s to the ConnectX netdev that '
                'carries the fabric (`ibdev2netdev` or `ip -br link` show the names).' % (var, name, known, var))
            results.append(res)
            problems.extend(res['problems'])
            continue
        res.update({'operstate': info['operstate'], 'carrier': info['carrier'], 'mtu': info['mtu'],
                    'ipv4': list(info['ipv4'])})
        down = not (info['up'] and info['carrier'] and info['operstate'] in ('up', 'unknown'))
        # A link that is down loses what its address and MTU depend on: say so first, the rest as consequences.
        after = ' (a consequence: the link is down)' if down else ''
        if spec.get('require_up', True) and down:
            res['problems'].append(
                '%s=%s is not up: the link is DOWN (operstate %s, carrier %s). Fix: check the cable and the peer, '
                'then `ip link set %s up` and `ip link show %s`.'
                % (var, name, info['operstate'], 'yes' if info['carrier'] else 'no', name, name))
        else:
            after = ''
        if spec.get('mtu') is not None:
            res['mtu_expected'] = int(spec['mtu'])
            if info['mtu'] != int(spec['mtu']):
                res['problems'].append(
                    '%s=%s has MTU %s, expected %s (dspark_fabric_mtu)%s. Fix: re-run the fabric role or check what '
                    'else configures %s.' % (var, name, info['mtu'], spec['mtu'], after, name))
        if spec.get('address'):
            res['address_expected'] = spec['address']
            want = ipaddress.ip_interface(spec['address'])
            have = [ipaddress.ip_interface(a) for a in info['ipv4']]
            if want not in have:
                res['problems'].append(
                    '%s=%s lacks the fabric address %s (has: %s)%s. Fix: re-run the fabric role; if the address '
                    'does not stay, another network configuration wins for %s (`networkctl status %s`).'
                    % (var, name, spec['address'], ', '.join(info['ipv4']) or 'no IPv4', after, name, name))
        res['ok'] = not res['problems']
        problems.extend(res['problems'])
        results.append(res)
    return results, problems


def check_management(specs, networks, links, management):
    """Problems that would cut the management connection if the fabric were applied.

    ``specs``: the fabric links (name, variable); ``networks``: [{'cidr', 'variable'}];
    ``management``: parse_ssh_connection() plus 'interface' (the route to the controller) or None.
    A fabric interface that is the management interface, a fabric network that holds the
    management or controller address, or one that overlaps a network on any other interface are
    refused: their connected route would steal traffic from the interface Ansible is using.
    """
    problems = []
    fabric_names = set(s['name'] for s in specs)
    mgmt_if = (management or {}).get('interface')
    mgmt_addrs = []
    if management:
        mgmt_addrs = [('management address', management.get('server')), ('controller address', management.get('client'))]
    for spec in specs:
        if mgmt_if and spec['name'] == mgmt_if:
            problems.append(
                '%s=%s carries this SSH connection (%s -> %s): configuring it as the fabric would cut the '
                'management connection. Fix: set %s to the ConnectX netdev of the direct link, not the '
                'management interface.'
                % (_var(spec), spec['name'], management.get('client'), management.get('server'), _var(spec)))
    for net in networks:
        try:
            network = ipaddress.ip_network(net['cidr'], strict=False)
        except ValueError:
            continue
        var = net.get('variable') or 'the fabric network'
        held = []
        for label, addr in mgmt_addrs:
            try:
                ip = ipaddress.ip_address(addr)
            except (TypeError, ValueError):
                continue
            if ip.version == network.version and ip in network and not ip.is_loopback:
                held.append('the %s %s' % (label, addr))
        if held:
            problems.append(
                '%s=%s holds %s of this SSH connection: its route would take the management traffic onto the '
                'fabric. Fix: give the fabric its own private network that holds no management address.'
                % (var, net['cidr'], ' and '.join(held)))
            continue
        for name, info in sorted(links.items()):
            if name in fabric_names or name == 'lo':
                continue
            for cidr in info.get('ipv4', []):
                other = ipaddress.ip_interface(cidr).network
                if other.overlaps(network):
                    problems.append(
                        '%s=%s overlaps %s on %s%s: two interfaces would claim the same addresses. Fix: choose a '
                        'fabric network that overlaps no other interface\'s network.'
                        % (var, net['cidr'], cidr, name, ' (the management interface)' if name == mgmt_if else ''))
    return problems


def check_rdma(selector, inventory, phys_states, fabric_netdevs, variable='dspark_fabric_hca'):
    """Judge the RDMA ports that ``selector`` (parsed NCCL_IB_HCA) names.

    Every item of an include selector must name at least one port that is ACTIVE (a DOWN sibling
    that the same prefix also names is skipped by NCCL and only reported with ``used: false``);
    with an exclude selector (``^``) at least one remaining port must be ACTIVE. An ACTIVE port
    must have the physical state LinkUp, and its netdev must be one of ``fabric_netdevs``: otherwise
    NCCL would send over another port than the one that carries the fabric address (upstream
    issue #4). ``phys_states``: {(device, port): 'LinkUp'}. Returns ``(results, problems)``.
    """
    results, problems = [], []
    text = selector.get('text') or ''
    for device in sorted(inventory):
        for port in sorted(inventory[device].get('ports', {})):
            if not selector_matches(selector, device, port):
                continue
            p = inventory[device]['ports'][port]
            phys = phys_states.get((device, port))
            active = p.get('state') == 'ACTIVE'
            res = {'device': device, 'port': port, 'state': p.get('state'), 'phys_state': phys,
                   'link_layer': p.get('link_layer'), 'netdev': p.get('netdev'), 'used': active, 'problems': []}
            if active and phys is not None and phys != 'LinkUp':
                res['problems'].append('%s=%s: %s port %s has physical state %s, not LinkUp.'
                                       % (variable, text, device, port, phys))
            if active and fabric_netdevs and p.get('netdev') and p.get('netdev') not in fabric_netdevs:
                res['problems'].append(
                    '%s=%s: %s port %s belongs to %s, which is not a fabric interface (%s): NCCL would use another '
                    'port than the one with the fabric address. Fix: pick the HCA of the fabric port '
                    '(`ibdev2netdev`).' % (variable, text, device, port, p['netdev'], ', '.join(fabric_netdevs)))
            results.append(res)
    if not selector.get('exclude'):
        for item in selector.get('items', []):
            hits = [r for r in results if item_matches(item, r['device'], r['port'], selector.get('exact'))]
            if not hits:
                problems.append(
                    '%s=%s: %s matches no RDMA device on this node (devices: %s). Fix: use the names '
                    '`ibdev2netdev` prints (case-sensitive; a leading "=" means exact names).'
                    % (variable, text, item.get('raw') or item['name'], ', '.join(sorted(inventory)) or 'none'))
            elif not any(r['used'] for r in hits):
                for r in hits:
                    r['problems'].append(
                        '%s=%s: %s port %s is %s, not ACTIVE. Fix: check the cable, the peer and `ibstat %s`.'
                        % (variable, text, r['device'], r['port'],
                           inventory[r['device']]['ports'][r['port']].get('state_raw') or 'unreadable', r['device']))
    elif not any(r['used'] for r in results):
        problems.append('%s=%s leaves no ACTIVE RDMA port on this node. Fix: check the links and `ibstat`.'
                        % (variable, text))
    for r in results:
        r['ok'] = not r['problems']
        problems.extend(r['problems'])
    return results, problems


def ping_problem(result):
    """A sentence for a failed DF ping result, or None when it passed."""
    if result.get('ok'):
        return None
    what = 'DF ping of %d bytes (MTU %s) from %s to %s %s over %s' % (
        result['size'], result.get('mtu'), result.get('source') or 'this node', result['peer'],
        result['address'], result['interface'])
    if result.get('too_long'):
        why = 'the local MTU is smaller than the packet'
    elif result.get('received') == 0 and (result.get('errors') or 0) == 0:
        why = 'no reply: the peer is down, has another address, or a smaller MTU drops the frame'
    else:
        why = (result.get('output') or 'ping failed').strip().splitlines()[-1:] or ['ping failed']
        why = why[0]
    return ('%s failed (%s). Fix: dspark_fabric_mtu must be the MTU of both ends and every hop; check '
            '`ip link show %s` on both nodes and the cable.' % (what, why, result['interface']))
