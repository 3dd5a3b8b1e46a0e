#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: roce_gid_index
short_description: Resolve this node's RoCE v2 GID index for NCCL
version_added: 0.1.0
description:
  - Reads the RDMA sysfs tree of the target node and returns the C(NCCL_IB_GID_INDEX) that NCCL
    must use on this node for the HCA ports selected by O(hca).
  - GID indexes differ between nodes and change after reboots and link events. Each rank must get
    its own index; one literal shared by both ranks makes NCCL fail at init with
    C(unhandled system error). Run this module on every node right before the ranks start.
  - Port selection mirrors NCCL. O(hca) uses the C(NCCL_IB_HCA) syntax, and only ACTIVE ports with
    an Ethernet or InfiniBand link layer are used, so a DOWN sibling port is ignored.
  - For each selected HCA port the usable indexes are the C(RoCE v2) entries whose GID is the
    IPv4-mapped form (C(::ffff:a.b.c.d)) of O(match_ip) or of an IPv4 address on that port's own
    netdev. The usable sets are intersected across ports, because NCCL uses one index for every HCA
    of a rank. The lowest shared index is chosen, and an index reached through O(match_ip) is
    preferred.
  - The module only reads. It never reports a change.
author:
  - dspark.cluster contributors (@dspark)
options:
  hca:
    description:
      - The C(NCCL_IB_HCA) selector, exactly as it is passed to NCCL.
      - A leading C(^) excludes the listed devices. A leading C(=) (after C(^) if both are used)
        requires exact names. Without C(=), each name is a prefix.
      - The value is a comma-separated list of C(name) or C(name:port) items, for example
        C(=rocep1s0f1,roceP2p1s0f1). NCCL reads at most 32 items.
    type: str
    required: true
  match_ip:
    description:
      - Preferred IPv4 address whose IPv4-mapped RoCE v2 GID selects the index. This is usually the
        node's fabric address, for example the IPv4 on C(NCCL_SOCKET_IFNAME).
      - IPv4 addresses found on each selected port's own netdev are accepted as well. A GID that
        carries O(match_ip) is usable even when that address is not listed for the netdev. When
        several indexes are shared, one reached through O(match_ip) wins.
    type: str
  sysfs_root:
    description:
      - Directory laid out like C(/sys/class/infiniband). Change it only for tests.
    type: path
    default: /sys/class/infiniband
  netdev_ipv4:
    description:
      - Map of netdev name to the IPv4 addresses on that netdev. A value can be a list or a single
        string, and C(a.b.c.d/len) is accepted.
      - When omitted, the addresses are read with C(ip -4 -o addr show). If C(ip) is missing,
        the primary IPv4 of each interface is read with C(SIOCGIFADDR) instead.
    type: dict
extends_documentation_fragment:
  - dspark.cluster.read_only
attributes:
  platform:
    support: full
    platforms: posix
    description: Needs Linux RDMA sysfs (C(/sys/class/infiniband)).
notes:
  - Error results carry a RV(code) so a play can tell C(no_selected_port) (the selector matches no
    ACTIVE port), C(no_usable_gid) (a selected port has no RoCE v2 GID for its IPv4) and
    C(no_shared_index) (the selected ports share no index) apart. C(invalid_selector) and
    C(invalid_argument) report bad input, and C(ip_command_failed) means the address list could not be read.
seealso:
  - name: NCCL environment variables
    description: NCCL_IB_HCA and NCCL_IB_GID_INDEX reference.
    link: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html
"""

EXAMPLES = r"""
- name: Resolve the GID index of this node for both ConnectX-7 twins
  dspark.cluster.roce_gid_index:
    hca: "=rocep1s0f1,roceP2p1s0f1"
    match_ip: "{{ ansible_facts[nccl_socket_ifname]['ipv4']['address'] }}"
  register: gid

- name: Pass the per-node index to the rank's environment
  ansible.builtin.set_fact:
    nccl_ib_gid_index: "{{ gid.gid_index }}"

- name: Single HCA, addresses supplied by the caller instead of ip(8)
  dspark.cluster.roce_gid_index:
    hca: "=rocep1s0f1:1"
    netdev_ipv4:
      enp1s0f1np1: 192.168.177.11/24
"""

RETURN = r"""
gid_index:
  description: The GID index to export as C(NCCL_IB_GID_INDEX) on this node.
  returned: success
  type: int
  sample: 3
hca:
  description: The O(hca) selector as given.
  returned: success
  type: str
  sample: "=rocep1s0f1,roceP2p1s0f1"
selector:
  description: The parsed selector, as NCCL reads it.
  returned: success
  type: dict
  contains:
    exclude:
      description: Whether a leading C(^) excludes the listed devices.
      type: bool
    exact:
      description: Whether a leading C(=) requires exact names.
      type: bool
    devices:
      description: The list items, each with C(name) and C(port) (null for any port).
      type: list
      elements: dict
  sample: {"exclude": false, "exact": true, "devices": [{"name": "rocep1s0f1", "port": null}]}
match_ip:
  description: The preferred IPv4 address, normalized, or null when none was given.
  returned: success
  type: str
  sample: 192.168.177.11
match_ip_used:
  description: Whether the chosen index was reached through RV(match_ip).
  returned: success
  type: bool
  sample: true
shared_indexes:
  description: Every index usable on all selected HCA ports. RV(gid_index) is one of them.
  returned: success
  type: list
  elements: int
  sample: [3]
members:
  description: The HCA ports NCCL will use, with their usable indexes and evidence.
  returned: success
  type: list
  elements: dict
  contains:
    device:
      description: RDMA device name.
      type: str
    port:
      description: Port number.
      type: int
    netdev:
      description: The port's network device, if known.
      type: str
    link_layer:
      description: Link layer read from sysfs.
      type: str
    state:
      description: Port state name read from sysfs.
      type: str
    candidates:
      description: Usable RoCE v2 GID indexes of this port.
      type: list
      elements: int
    evidence:
      description: For each usable index, the GID, its IPv4, the netdev, and whether it matched
        C(match_ip) or an address on the netdev (C(via)).
      type: list
      elements: dict
  sample:
    - device: rocep1s0f1
      port: 1
      netdev: enp1s0f1np1
      link_layer: Ethernet
      state: ACTIVE
      candidates: [3]
      evidence:
        - index: 3
          gid: "0000:0000:0000:0000:0000:ffff:c0a8:b10b"
          ipv4: 192.168.177.11
          ndev: enp1s0f1np1
          via: match_ip
          detail: RoCE v2 GID 0000:0000:0000:0000:0000:ffff:c0a8:b10b is match_ip 192.168.177.11
ignored:
  description: Ports the selector names that NCCL will not use, each with a C(reason) (for example, a DOWN sibling port).
  returned: success
  type: list
  elements: dict
  sample: [{"device": "rocep1s0f0", "port": 1, "reason": "link is DOWN (state '1: DOWN'), NCCL skips it"}]
netdev_ipv4:
  description: The netdev to IPv4 map used for matching.
  returned: success
  type: dict
  sample: {"enp1s0f1np1": ["192.168.177.11"]}
code:
  description: Machine-readable failure reason.
  returned: failure
  type: str
  sample: no_shared_index
details:
  description: What the resolver found when it failed (members, candidates, ignored ports).
  returned: failure
  type: dict
"""

import fcntl
import socket
import struct

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dspark.cluster.plugins.module_utils.roce_gid import (
    GidResolutionError,
    normalize_netdev_ipv4,
    parse_ip_addr_output,
    resolve_gid_index,
    scan_sysfs,
)

SIOCGIFADDR = 0x8915


def _ioctl_ipv4():
    """Primary IPv4 of each interface through SIOCGIFADDR (fallback without ip(8))."""
    out = {}
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _index, name in socket.if_nameindex():
            try:
                res = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack('256s', name.encode()[:15]))
            except OSError:
                continue
            out[name] = [socket.inet_ntoa(res[20:24])]
    finally:
        sock.close()
    return out


def read_netdev_ipv4(module):
    ip_bin = module.get_bin_path('ip')
    if ip_bin:
        rc, out, err = module.run_command([ip_bin, '-4', '-o', 'addr', 'show'])
        if rc == 0:
            return parse_ip_addr_output(out)
        module.fail_json(msg='`%s -4 -o addr show` failed (rc=%d): %s. Pass netdev_ipv4 instead.'
                         % (ip_bin, rc, (err or out).strip()), code='ip_command_failed')
    try:
        return _ioctl_ipv4()
    except (OSError, AttributeError) as e:
        module.fail_json(msg='Cannot list IPv4 addresses: ip(8) is not installed and SIOCGIFADDR failed (%s). '
                         'Install iproute2 or pass netdev_ipv4.' % e, code='ip_command_failed')


def main():
    module = AnsibleModule(
        argument_spec=dict(
            hca=dict(type='str', required=True),
            match_ip=dict(type='str'),
            sysfs_root=dict(type='path', default='/sys/class/infiniband'),
            netdev_ipv4=dict(type='dict'),
        ),
        supports_check_mode=True,
    )
    p = module.params

    netdev_ipv4 = p['netdev_ipv4']
    if netdev_ipv4 is None:
        netdev_ipv4 = read_netdev_ipv4(module)

    inventory = scan_sysfs(p['sysfs_root'])
    try:
        result = resolve_gid_index(p['hca'], inventory, netdev_ipv4, match_ip=p['match_ip'])
    except GidResolutionError as e:
        module.fail_json(msg=e.message, code=e.code, details=e.details)

    for warning in result.pop('warnings'):
        module.warn(warning)
    result['netdev_ipv4'] = dict((k, [str(a) for a in v]) for k, v in normalize_netdev_ipv4(netdev_ipv4).items())
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()
