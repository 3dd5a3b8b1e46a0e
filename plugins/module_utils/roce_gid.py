# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Resolve the per-node RoCE v2 GID index that NCCL should use.

Pure logic, no Ansible imports, Python 3.8 compatible.

NCCL_IB_GID_INDEX is a single value per rank, but GID tables are per
HCA port, differ between nodes, and are renumbered after reboots and link
events. This module mirrors how NCCL picks its HCA/ports from NCCL_IB_HCA
(``ncclIbInit`` / ``parseStringList`` / ``matchIfList``) and then looks in
the sysfs GID tables of exactly those ports for a RoCE v2 entry whose GID
is the IPv4-mapped form of the node's fabric address.

Pipeline::

    selector = parse_hca_selector(text)
    inventory = scan_sysfs('/sys/class/infiniband')
    members, diag = select_ports(selector, inventory)
    result = resolve_gid_index(text, inventory, netdev_ipv4, match_ip)
"""

import ipaddress
import os
import re

# NCCL: MAX_IB_DEVS bounds both the selector list and the number of ports kept.
MAX_IB_DEVS = 32
# NCCL: struct netIf { char prefix[64]; ... } -> 63 bytes plus NUL.
MAX_NAME_BYTES = 63
MAX_PORT = 2147483647

ROCE_V2 = 'RoCE v2'
LINK_LAYERS = ('Ethernet', 'InfiniBand', 'IB')
ZERO_GID = ipaddress.IPv6Address('::')

_DIGITS_RE = re.compile(r'[ \t\n\v\f\r]*([+-]?)([0-9]*)')


class GidResolutionError(Exception):
    """The GID index could not be resolved.

    ``code`` is one of ``invalid_selector``, ``invalid_argument``,
    ``no_selected_port``, ``no_usable_gid``, ``no_shared_index``.
    ``details`` is a JSON-friendly dict with what was found.
    """

    def __init__(self, code, message, details=None):
        super(GidResolutionError, self).__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}

    def __str__(self):
        return self.message


# --------------------------------------------------------------------------
# NCCL_IB_HCA selector
# --------------------------------------------------------------------------

def _atoi(text):
    """C atoi(): skip leading whitespace, optional sign, leading digits, else 0."""
    m = _DIGITS_RE.match(text)
    sign, digits = m.group(1), m.group(2)
    if not digits:
        return 0
    value = int(digits)
    return -value if sign == '-' else value


def _truncate_bytes(name, limit):
    raw = name.encode('utf-8')
    if len(raw) <= limit:
        return name
    return raw[:limit].decode('utf-8', 'ignore')


def parse_hca_selector(text):
    """Parse an ``NCCL_IB_HCA`` value the way NCCL does.

    Syntax: optional leading ``^`` (exclude the listed devices), then optional
    ``=`` (exact names; without it every name is a prefix), then a comma
    separated list of ``name`` or ``name:port``. The port is read like C
    ``atoi`` (``"1x"`` is 1). Names are truncated to 63 bytes like NCCL's
    ``prefix[64]`` buffer. Empty list items (``a,,b`` or a trailing comma)
    are skipped, as NCCL does.

    Returns a dict ``{'text', 'exclude', 'exact', 'items': [{'name', 'port',
    'raw'}]}`` where ``port`` is ``None`` for "any port".

    Raises ValueError for input NCCL would accept but that can never select
    what the user meant: empty selector, an item without a name, a port that
    atoi() reads as 0 or negative (it matches no port), whitespace inside a
    name (NCCL does not trim it) or more than 32 items (NCCL silently drops
    the rest).
    """
    if text is None:
        raise ValueError('NCCL_IB_HCA selector is empty: give at least one HCA name, e.g. "=rocep1s0f1"')
    if not isinstance(text, str):
        raise ValueError('NCCL_IB_HCA selector must be a string, got %s' % type(text).__name__)
    body = text
    exclude = body.startswith('^')
    if exclude:
        body = body[1:]
    exact = body.startswith('=')
    if exact:
        body = body[1:]

    items = []
    for raw in body.split(','):
        if raw == '':
            continue
        if ':' in raw:
            name, port_text = raw.split(':', 1)
        else:
            name, port_text = raw, None
        if name == '':
            raise ValueError(
                'NCCL_IB_HCA item %r in %r has no device name before ":"; use "name:port", e.g. "rocep1s0f1:1"'
                % (raw, text))
        if re.search(r'\s', name):
            raise ValueError(
                'NCCL_IB_HCA item %r in %r contains whitespace; NCCL does not trim it, so this item would '
                'match no device. Write the list without spaces, e.g. "=rocep1s0f1,roceP2p1s0f1"' % (raw, text))
        port = None
        if port_text is not None:
            port = _atoi(port_text)
            if port < 1:
                raise ValueError(
                    'NCCL_IB_HCA item %r in %r: port %r is read by NCCL as %d, which matches no port '
                    '(ports start at 1). Give a port number such as "%s:1", or drop the ":"'
                    % (raw, text, port_text, port, name))
            if port > MAX_PORT:
                raise ValueError('NCCL_IB_HCA item %r in %r: port %r is out of range' % (raw, text, port_text))
        items.append({'name': _truncate_bytes(name, MAX_NAME_BYTES), 'port': port, 'raw': raw})

    if not items:
        raise ValueError(
            'NCCL_IB_HCA selector %r names no HCA; give at least one device name, e.g. "=rocep1s0f1" '
            '(see ibdev2netdev)' % (text,))
    if len(items) > MAX_IB_DEVS:
        raise ValueError(
            'NCCL_IB_HCA selector %r has %d items; NCCL reads at most %d (MAX_IB_DEVS) and silently '
            'ignores the rest' % (text, len(items), MAX_IB_DEVS))
    return {'text': text, 'exclude': exclude, 'exact': exact, 'items': items}


def _item_matches(item, device, port, exact):
    if exact:
        name_ok = device == item['name']
    else:
        name_ok = device.startswith(item['name'])
    return name_ok and (item['port'] is None or item['port'] == port)


def item_matches(item, device, port, exact):
    """True when one parsed selector item names ``device:port`` (prefix match unless ``exact``)."""
    return _item_matches(item, device, port, exact)


def selector_matches(selector, device, port):
    """True when NCCL would use ``device:port`` given this selector (state aside)."""
    hit = any(_item_matches(i, device, port, selector['exact']) for i in selector['items'])
    return hit != selector['exclude']


def format_selector(selector):
    """Canonical text of a parsed selector (what NCCL effectively reads)."""
    parts = []
    for item in selector['items']:
        parts.append(item['name'] if item['port'] is None else '%s:%d' % (item['name'], item['port']))
    return '%s%s%s' % ('^' if selector['exclude'] else '', '=' if selector['exact'] else '', ','.join(parts))


# --------------------------------------------------------------------------
# sysfs scan
# --------------------------------------------------------------------------

def _read(path):
    """Stripped text of a sysfs attribute, or None when it cannot be read."""
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except (OSError, IOError):
        return None
    return data.decode('utf-8', 'replace').strip()


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except (OSError, IOError):
        return []


def _numeric_entries(path):
    out = []
    for name in _listdir(path):
        if name.isdigit():
            out.append(int(name))
    return sorted(out)


def _parse_state(text):
    """'4: ACTIVE' -> 'ACTIVE'; 'ACTIVE' -> 'ACTIVE'; None -> None."""
    if text is None:
        return None
    if ':' in text:
        text = text.split(':', 1)[1]
    return text.strip().upper() or None


def parse_gid(text):
    """Return an ipaddress.IPv6Address for a sysfs GID string, or None."""
    if not text:
        return None
    try:
        return ipaddress.IPv6Address(text.strip())
    except ValueError:
        return None


def _port_netdev(device_netdevs, gids):
    ndevs = [g['ndev'] for _i, g in sorted(gids.items()) if g.get('ndev')]
    if len(device_netdevs) == 1:
        return device_netdevs[0]
    for nd in ndevs:
        if not device_netdevs or nd in device_netdevs:
            return nd
    if device_netdevs:
        return device_netdevs[0]
    return None


def scan_sysfs(root='/sys/class/infiniband'):
    """Read an ``/sys/class/infiniband``-shaped tree into plain data.

    Returns::

        {device: {'netdevs': [...],
                  'ports': {port: {'state': 'ACTIVE' | 'DOWN' | ... | None,
                                   'state_raw': '4: ACTIVE' | None,
                                   'link_layer': 'Ethernet' | None,
                                   'netdev': 'enp1s0f1np1' | None,
                                   'gids': {index: {'gid': text,
                                                    'type': 'RoCE v2' | None,
                                                    'ndev': name | None}}}}}}

    Each entry is read on its own: an attribute that raises OSError (real
    sysfs answers EINVAL for unused GID slots) is skipped or recorded as
    None. The all-zero GID and unparsable GIDs are left out. A missing
    ``root`` gives ``{}``.
    """
    inventory = {}
    for device in _listdir(root):
        dev_dir = os.path.join(root, device)
        ports_dir = os.path.join(dev_dir, 'ports')
        if not os.path.isdir(ports_dir):
            continue
        device_netdevs = _listdir(os.path.join(dev_dir, 'device', 'net'))
        if not device_netdevs:
            parent = _read(os.path.join(dev_dir, 'parent'))  # rdma_rxe exposes its netdev here
            if parent:
                device_netdevs = [parent]
        ports = {}
        for port in _numeric_entries(ports_dir):
            pdir = os.path.join(ports_dir, str(port))
            state_raw = _read(os.path.join(pdir, 'state'))
            gids = {}
            for index in _numeric_entries(os.path.join(pdir, 'gids')):
                text = _read(os.path.join(pdir, 'gids', str(index)))
                addr = parse_gid(text)
                if addr is None or addr == ZERO_GID:
                    continue
                gids[index] = {
                    'gid': text,
                    'type': _read(os.path.join(pdir, 'gid_attrs', 'types', str(index))),
                    'ndev': _read(os.path.join(pdir, 'gid_attrs', 'ndevs', str(index))) or None,
                }
            ports[port] = {
                'state': _parse_state(state_raw),
                'state_raw': state_raw,
                'link_layer': _read(os.path.join(pdir, 'link_layer')),
                'netdev': _port_netdev(device_netdevs, gids),
                'gids': gids,
            }
        inventory[device] = {'netdevs': device_netdevs, 'ports': ports}
    return inventory


# --------------------------------------------------------------------------
# port selection (ncclIbInit)
# --------------------------------------------------------------------------

def select_ports(selector, inventory):
    """HCA:port members NCCL would use for this selector.

    Mirrors ncclIbInit: a port is a candidate only when it is ACTIVE and its
    link layer is Ethernet or InfiniBand; both tests happen before the
    selector is applied, so a DOWN sibling port is simply not used. An
    unreadable state or link layer is not evidence of a problem, so such a
    port stays a candidate. At most 32 ports are kept, like NCCL.

    ``selector`` is a parsed selector or selector text. Returns
    ``(members, diagnostics)``: members is a list of
    ``{'device', 'port', 'netdev', 'link_layer', 'state'}``; diagnostics has
    ``ignored`` (ports the selector names that NCCL will not use, with a
    reason), ``unmatched_items`` (list items that name no port at all),
    ``capped`` (ports dropped past MAX_IB_DEVS) and ``devices`` (all devices
    seen).
    """
    if isinstance(selector, str):
        selector = parse_hca_selector(selector)
    members = []
    ignored = []
    capped = []
    item_hits = [False] * len(selector['items'])
    for device in sorted(inventory):
        for port in sorted(inventory[device].get('ports', {})):
            pinfo = inventory[device]['ports'][port]
            for n, item in enumerate(selector['items']):
                if _item_matches(item, device, port, selector['exact']):
                    item_hits[n] = True
            if not selector_matches(selector, device, port):
                continue
            state = pinfo.get('state')
            link_layer = pinfo.get('link_layer')
            entry = {
                'device': device,
                'port': port,
                'netdev': pinfo.get('netdev'),
                'link_layer': link_layer,
                'state': state,
            }
            if state is not None and state != 'ACTIVE':
                reason = 'link is %s (state %r), NCCL skips it' % (state, pinfo.get('state_raw'))
                ignored.append(dict(entry, reason=reason))
                continue
            if link_layer is not None and link_layer not in LINK_LAYERS:
                ignored.append(dict(entry, reason='link layer %r is neither Ethernet nor InfiniBand' % link_layer))
                continue
            if len(members) >= MAX_IB_DEVS:
                capped.append(entry)
                continue
            members.append(entry)
    unmatched = []
    if not selector['exclude']:
        unmatched = [item['raw'] for n, item in enumerate(selector['items']) if not item_hits[n]]
    diagnostics = {
        'ignored': ignored,
        'unmatched_items': unmatched,
        'capped': capped,
        'devices': sorted(inventory),
    }
    return members, diagnostics


# --------------------------------------------------------------------------
# IPv4 helpers
# --------------------------------------------------------------------------

def _ipv4(value, what):
    text = str(value).strip()
    try:
        return ipaddress.IPv4Interface(text).ip
    except ValueError:
        raise GidResolutionError(
            'invalid_argument', '%s %r is not an IPv4 address' % (what, value), {'value': text})


def normalize_netdev_ipv4(netdev_ipv4):
    """{netdev: 'a.b.c.d' | ['a.b.c.d/24', ...]} -> {netdev: [IPv4Address, ...]}."""
    out = {}
    for netdev, addrs in (netdev_ipv4 or {}).items():
        if addrs is None:
            addrs = []
        elif isinstance(addrs, str):
            addrs = [a for a in re.split(r'[\s,]+', addrs) if a]
        out[str(netdev)] = [_ipv4(a, 'netdev_ipv4[%s] entry' % netdev) for a in addrs]
    return out


def parse_ip_addr_output(text):
    """Parse ``ip -4 -o addr show`` output into {netdev: [ipv4 strings]}.

    Lines look like ``3: enp1s0f1np1    inet 192.168.177.11/24 brd ... scope
    global enp1s0f1np1\\       valid_lft forever preferred_lft forever``.
    VLAN names printed as ``name@parent`` are reduced to ``name``.
    """
    out = {}
    for line in (text or '').splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[2] != 'inet':
            continue
        netdev = fields[1].split('@', 1)[0].rstrip(':')
        try:
            addr = ipaddress.IPv4Interface(fields[3]).ip
        except ValueError:
            continue
        out.setdefault(netdev, [])
        if str(addr) not in out[netdev]:
            out[netdev].append(str(addr))
    return out


def gid_ipv4(gid_text):
    """IPv4 address embedded in an IPv4-mapped GID (::ffff:a.b.c.d), else None."""
    addr = parse_gid(gid_text)
    if addr is None:
        return None
    return addr.ipv4_mapped


# --------------------------------------------------------------------------
# resolution
# --------------------------------------------------------------------------

def _describe_member(m):
    return '%s port %s (netdev %s)' % (m['device'], m['port'], m.get('netdev') or 'unknown')


def _gid_text(gid_text):
    addr = parse_gid(gid_text)
    if addr is None:
        return str(gid_text)
    if addr.ipv4_mapped is not None:
        return '::ffff:%s' % addr.ipv4_mapped
    return addr.compressed


def _gid_summary(gids, limit=8):
    parts = []
    for index in sorted(gids)[:limit]:
        g = gids[index]
        parts.append('%d=%s (%s)' % (index, _gid_text(g.get('gid')), g.get('type') or 'type unreadable'))
    if len(gids) > limit:
        parts.append('... %d more' % (len(gids) - limit))
    return ', '.join(parts) if parts else 'no readable non-zero GID'


def _member_candidates(member, pinfo, netdevs, match_ip):
    """Usable indexes of one member plus evidence and a reason when empty."""
    evidence = []
    v2_seen = 0
    for index in sorted(pinfo.get('gids', {})):
        g = pinfo['gids'][index]
        if g.get('type') != ROCE_V2:
            continue
        v2_seen += 1
        ip = gid_ipv4(g.get('gid'))
        if ip is None:
            continue
        ndev = g.get('ndev') or member.get('netdev')
        if match_ip is not None and ip == match_ip:
            evidence.append({'index': index, 'gid': g.get('gid'), 'ipv4': str(ip), 'ndev': ndev,
                             'via': 'match_ip',
                             'detail': 'RoCE v2 GID %s is match_ip %s' % (g.get('gid'), ip)})
            continue
        owners = [nd for nd in (g.get('ndev'), member.get('netdev')) if nd and ip in netdevs.get(nd, [])]
        if owners:
            evidence.append({'index': index, 'gid': g.get('gid'), 'ipv4': str(ip), 'ndev': owners[0],
                             'via': 'netdev',
                             'detail': 'RoCE v2 GID %s is IPv4 %s on %s' % (g.get('gid'), ip, owners[0])})
    return evidence, v2_seen


def resolve_gid_index(selector_text, inventory, netdev_ipv4, match_ip=None):
    """Pick the NCCL_IB_GID_INDEX for this node.

    For every selected HCA:port, the usable indexes are those of type
    ``RoCE v2`` whose GID is the IPv4-mapped form of ``match_ip`` or of an
    IPv4 on that member's own netdev (the GID's ndev, else the port's
    netdev). The usable sets are intersected across members (NCCL uses one
    index for all HCAs of a rank); the lowest shared index wins, preferring
    one that some member reached through ``match_ip``.

    ``netdev_ipv4`` maps netdev name -> IPv4 strings (``a.b.c.d`` or
    ``a.b.c.d/len``). Raises GidResolutionError.
    """
    try:
        selector = parse_hca_selector(selector_text)
    except ValueError as e:
        raise GidResolutionError('invalid_selector', 'Invalid NCCL_IB_HCA: %s' % e,
                                 {'hca': selector_text})
    mip = None
    if match_ip not in (None, ''):
        mip = _ipv4(match_ip, 'match_ip')
    netdevs = normalize_netdev_ipv4(netdev_ipv4)
    inventory = inventory or {}

    members, diag = select_ports(selector, inventory)
    warnings = []
    for item in diag['unmatched_items']:
        warnings.append('NCCL_IB_HCA item %r matches no RDMA device/port (devices: %s); NCCL ignores it silently'
                        % (item, ', '.join(diag['devices']) or 'none'))
    for c in diag['capped']:
        warnings.append('%s is past NCCL MAX_IB_DEVS=%d and is not used' % (_describe_member(c), MAX_IB_DEVS))

    if not members:
        if not inventory:
            found = 'no RDMA device was found (is the mlx5/rxe driver loaded? check ibdev2netdev and /dev/infiniband)'
        else:
            found = 'devices present: %s' % ', '.join(
                '%s[ports %s]' % (d, ','.join(str(p) for p in sorted(inventory[d].get('ports', {}))))
                for d in sorted(inventory))
        reasons = ['%s: %s' % (_describe_member(i), i['reason']) for i in diag['ignored']]
        fixes = []
        if any(i.get('state') not in (None, 'ACTIVE') for i in diag['ignored']):
            fixes.append('the link is DOWN or not ACTIVE: check the cable and `ip link set <netdev> up`, then '
                         '`ibstat` / `cat /sys/class/infiniband/<hca>/ports/<n>/state`')
        fixes.append('check NCCL_IB_HCA against `ibdev2netdev` (names are case-sensitive, "=" means exact match, '
                     'without it names are prefixes; "^" excludes)')
        msg = 'NCCL_IB_HCA %r selects no ACTIVE HCA port; %s.' % (selector_text, found)
        if reasons:
            msg += ' Matched but unusable: %s.' % '; '.join(reasons)
        msg += ' Fix: %s.' % '; '.join(fixes)
        raise GidResolutionError('no_selected_port', msg, {
            'hca': selector_text, 'devices': diag['devices'], 'ignored': diag['ignored'],
            'unmatched_items': diag['unmatched_items']})

    member_results = []
    failures = []
    for m in members:
        pinfo = inventory[m['device']]['ports'][m['port']]
        evidence, v2_seen = _member_candidates(m, pinfo, netdevs, mip)
        result = dict(m)
        result['candidates'] = sorted(set(e['index'] for e in evidence))
        result['evidence'] = evidence
        member_results.append(result)
        if evidence:
            continue
        nds = sorted(set(nd for nd in [m.get('netdev')] + [g.get('ndev') for g in pinfo.get('gids', {}).values()] if nd))
        own = ['%s: %s' % (nd, ', '.join(str(a) for a in netdevs.get(nd, [])) or 'none') for nd in nds]
        has_ipv4 = any(netdevs.get(nd) for nd in nds)
        v2_ipv4 = []
        for index in sorted(pinfo.get('gids', {})):
            g = pinfo['gids'][index]
            ip = gid_ipv4(g.get('gid')) if g.get('type') == ROCE_V2 else None
            if ip is not None and str(ip) not in v2_ipv4:
                v2_ipv4.append(str(ip))
        netdev_name = m.get('netdev') or 'the netdev of this HCA'
        if m.get('link_layer') in ('InfiniBand', 'IB'):
            hint = ('the link layer is InfiniBand, which has no RoCE v2 GIDs (NCCL_IB_GID_INDEX only matters for '
                    'RoCE on an Ethernet link layer): drop this HCA from NCCL_IB_HCA or do not set the index')
        elif v2_ipv4:
            hint = ('the RoCE v2 GIDs of this port carry IPv4 %s, which is neither the match_ip nor an address '
                    'listed on %s. If that is the fabric address, pass it as match_ip (or fix netdev_ipv4); '
                    'otherwise put the fabric IPv4 on this port\'s own netdev and re-run after the link settles'
                    % (', '.join(v2_ipv4), netdev_name))
        elif not has_ipv4:
            hint = ('give the fabric interface (%s) an IPv4 address; the kernel then adds its RoCE v2 GID' % netdev_name)
        elif not v2_seen:
            hint = ('this port has no RoCE v2 GID at all: check that the fabric interface (%s) is up with an IPv4 '
                    'address and that RoCE v2 is enabled' % netdev_name)
        else:
            hint = ('the GID table has no RoCE v2 entry for the IPv4 of %s: the address must sit on this port\'s '
                    'own netdev, not on another interface; re-run after the link settles' % netdev_name)
        wanted = 'match_ip %s or an IPv4 of its own netdev' % mip if mip is not None else \
            'an IPv4 of its own netdev (no match_ip given)'
        failures.append('%s: no RoCE v2 GID carries %s. IPv4 on netdev: %s. GIDs found: %s. Fix: %s.'
                        % (_describe_member(m), wanted, '; '.join(own) or 'netdev unknown',
                           _gid_summary(pinfo.get('gids', {})), hint))
    if failures:
        raise GidResolutionError(
            'no_usable_gid',
            'No usable RoCE v2 GID for NCCL_IB_HCA %r on %s' % (selector_text, ' | '.join(failures)),
            {'hca': selector_text, 'members': member_results, 'match_ip': str(mip) if mip else None})

    shared = set(member_results[0]['candidates'])
    for r in member_results[1:]:
        shared &= set(r['candidates'])
    if not shared:
        per = '; '.join('%s -> %s' % (_describe_member(r), r['candidates']) for r in member_results)
        raise GidResolutionError(
            'no_shared_index',
            'The HCA ports selected by NCCL_IB_HCA %r share no RoCE v2 GID index (%s). NCCL_IB_GID_INDEX is one '
            'value per rank, so no single index fits. Fix: make the GID tables line up (same address layout on '
            'every selected netdev: one IPv4 each, same IPv6/VLAN setup, then re-check `show_gids`), or narrow '
            'NCCL_IB_HCA to members that share an index.' % (selector_text, per),
            {'hca': selector_text, 'members': member_results, 'match_ip': str(mip) if mip else None})

    via_match = set()
    for r in member_results:
        via_match.update(e['index'] for e in r['evidence'] if e['via'] == 'match_ip')
    preferred = shared & via_match
    chosen = min(preferred) if preferred else min(shared)
    if mip is not None and not via_match:
        warnings.append('match_ip %s is not carried by a RoCE v2 GID on any selected HCA port; index %d was '
                        'chosen from the netdev addresses' % (mip, chosen))

    for r in member_results:
        r['evidence'] = sorted(r['evidence'], key=lambda e: (e['index'] != chosen, e['index']))

    return {
        'gid_index': chosen,
        'hca': selector_text,
        'selector': {'exclude': selector['exclude'], 'exact': selector['exact'],
                     # not 'items': a return key Jinja's dot notation cannot reach (dict.items)
                     'devices': [{'name': i['name'], 'port': i['port']} for i in selector['items']]},
        'match_ip': str(mip) if mip is not None else None,
        'match_ip_used': chosen in via_match,
        'shared_indexes': sorted(shared),
        'members': member_results,
        'ignored': diag['ignored'],
        'warnings': warnings,
    }
