#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_qualify
short_description: Measure whether a node is fit to join the cluster and judge each measurement
version_added: 0.2.0
description:
  - Reads the kernel release, C(/etc/os-release), the NVIDIA driver version, free space and inodes of the given paths,
    C(/proc/meminfo), C(/proc/swaps), the state of earlyoom and systemd-oomd, the kernel clock discipline
    (C(adjtimex), read only), the TCP listeners (C(ss -Hltnp)) and C(/sys/class/net/<name>/).
  - With O(disks[].present_path), the apparent size of what of a model a path holds already (C(du)); with
    O(fabric_address), the IPv4 addresses of the O(links) (C(ip -j -4 addr show)) and whether the node is a container
    (C(systemd-detect-virt --container)); with O(image), whether Docker holds that image (C(docker image inspect)).
  - Returns one check per measurement with a verdict (V(pass), V(fail), V(warn), V(info) or V(skip)), a message that
    names the measured value, the threshold and the variable that sets it, and a fix for every V(fail).
  - Never changes anything, and does not fail on a failing verdict; it fails only on its own errors (a bad option
    value). The caller decides what to do with RV(failed_checks).
author:
  - dspark.cluster contributors (@dspark)
options:
  kernel_allow:
    description:
      - Regular expressions, each matched in full against C(uname -r). Empty allows any kernel.
    type: list
    elements: str
    default: []
  kernel_deny:
    description:
      - Kernel releases known to be bad. A release that matches one of them in full fails, whatever O(kernel_allow) says.
    type: list
    elements: dict
    default: []
    suboptions:
      pattern:
        description: Regular expression matched in full against C(uname -r).
        type: str
        required: true
      reason:
        description: Why the release is bad.
        type: str
      source:
        description: Where that is known from (an issue, an advisory).
        type: str
  os_allow:
    description:
      - Regular expressions, each matched in full against C(<ID> <VERSION_ID>) of C(/etc/os-release),
        for example C(ubuntu 24\.04). Empty allows any.
    type: list
    elements: str
    default: []
  driver_allow:
    description:
      - Regular expressions matched in full against the NVIDIA driver version (from C(/proc/driver/nvidia/version)
        or C(/sys/module/nvidia/version)). Empty allows any.
    type: list
    elements: str
    default: []
  driver_deny:
    description:
      - Driver versions known to be bad, as for O(kernel_deny).
    type: list
    elements: dict
    default: []
    suboptions:
      pattern:
        description: Regular expression matched in full against the driver version.
        type: str
        required: true
      reason:
        description: Why the version is bad.
        type: str
      source:
        description: Where that is known from.
        type: str
  driver_required:
    description:
      - V(true) makes a node without a loaded NVIDIA driver fail; V(false) skips the driver check there.
    type: bool
    default: false
  disks:
    description:
      - Paths that need free space. A path that does not exist yet is measured at its nearest existing parent.
      - Fails when C(f_bavail*f_frsize) is below O(disks[].need_bytes) or C(f_favail) below O(disks[].need_inodes).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The path.
        type: str
        required: true
      need_bytes:
        description: Bytes that must be free for an unprivileged user.
        type: int
        required: true
      need_inodes:
        description: Inodes that must be free (0 does not judge inodes).
        type: int
        default: 0
      variable:
        description: The inventory variable that sets the path, cited in the message.
        type: str
      label:
        description:
          - What the path is for, cited in the message. C({present}) in it becomes the bytes of the model already
            there (with O(disks[].model_bytes)).
        type: str
      model_bytes:
        description:
          - Bytes of a model to be stored under the path. The need becomes O(disks[].need_bytes) plus what of them is
            not there yet (this less the apparent size of O(disks[].present_path)). 0 adds nothing.
        type: int
        default: 0
      present_path:
        description:
          - Where the model's files are (C(du -s --apparent-size)); a path that does not exist holds nothing.
        type: str
      fix:
        description:
          - The fix to print when the check fails, for a path no variable sets (O(disks[].variable) then names what sets
            the need, not the path).
        type: str
  memory_fraction:
    description:
      - Fraction of C(MemTotal) that must be available (C(MemAvailable)), plus O(memory_reserve_mib). 0 skips the check,
        and so does a running container of O(own_containers) (it holds its share already).
    type: float
    default: 0.0
  memory_reserve_mib:
    description:
      - MiB needed on top of O(memory_fraction) of C(MemTotal).
    type: int
    default: 0
  memory_variable:
    description:
      - The inventory variable that sets O(memory_fraction), named in the message and the fix.
    type: str
    default: serve_gpu_memory_utilization
  memory_shares:
    description:
      - Every engine's share of C(MemTotal) on this node (vLLM's C(gpu_memory_utilization)), the main engine first, then
        the sidecars of its group (C(dspark_sidecars)). With more than one, their sum of C(MemTotal), O(lmcache_l1_mib)
        and O(lmcache_reserve_mib) must fit in C(MemTotal) (the memory budget check), and its message names each share.
      - Empty or one engine - the main engine alone at O(memory_fraction).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The engine's name (V(main) for the main engine).
        type: str
        required: true
      share:
        description: Its share of C(MemTotal), 0..1.
        type: float
        required: true
      variable:
        description: The inventory variable that sets the share, cited in the message and the fix.
        type: str
  lmcache_l1_mib:
    description:
      - LMCache's L1 beside the engine (C(serve_lmcache)), MiB. With it, O(memory_fraction) of C(MemTotal) (every share
        of O(memory_shares) when it names more than one engine), this and O(lmcache_reserve_mib) must fit in
        C(MemTotal) (the memory budget check). 0 skips that check unless O(memory_shares) names more than one engine.
    type: int
    default: 0
  lmcache_reserve_mib:
    description:
      - The host's reserve in the memory budget check (C(serve_lmcache_memory_reserve_mib)), MiB.
    type: int
    default: 0
  swap:
    description:
      - V(any) reports swap only, V(off) fails when swap is on, V(on) fails when there is no swap.
    type: str
    choices: [any, 'off', 'on']
    default: any
  oom_policy:
    description:
      - V(any) reports only, V(none) fails when earlyoom or systemd-oomd is active, V(required) fails when neither is.
      - Read with C(systemctl is-active); without systemctl (or systemd) the check is V(skip).
    type: str
    choices: [any, none, required]
    default: any
  cma_required:
    description:
      - V(true) fails when the kernel has no contiguous memory area (C(CmaTotal) absent or 0 in C(/proc/meminfo)),
        since on a DGX Spark NCCL over RoCE then cannot register memory. V(false) only reports it.
    type: bool
    default: false
  time_sync_required:
    description:
      - V(true) fails when the kernel clock is not synchronised (C(STA_UNSYNC)); V(false) only warns.
    type: bool
    default: true
  time_max_error_ms:
    description:
      - Largest estimated clock error (C(esterror) of C(adjtimex)) of a synchronised clock, in milliseconds.
    type: int
    default: 100
  ports:
    description:
      - TCP ports that the node's services will listen on. A port held by a host process or by a container not in
        O(own_containers) fails; a holder that C(ss) does not show (without root) warns.
    type: list
    elements: dict
    default: []
    suboptions:
      port:
        description: The port.
        type: int
        required: true
      label:
        description: What listens there.
        type: str
      variable:
        description: The inventory variable that sets the port.
        type: str
  own_containers:
    description:
      - Names of the containers of this deployment, allowed to hold O(ports).
    type: list
    elements: str
    default: []
  own_units:
    description:
      - systemd services of this deployment (the API edge, C(dspark-edge.service)) whose host processes may hold
        O(ports).
    type: list
    elements: str
    default: []
  links:
    description:
      - Network interfaces that must be up, read from C(/sys/class/net/<name>/) (operstate, carrier, speed, mtu).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The interface name.
        type: str
        required: true
      variable:
        description: The inventory variable that sets the name.
        type: str
      min_speed_mbps:
        description: Lowest acceptable speed in Mb/s; 0 sets no floor.
        type: int
        default: 0
  fabric_address:
    description:
      - The fabric address (IPv4, without a prefix length) the first of O(links) is to carry. When set, RV(fabric)
        says whether one of O(links) carries it and whether the node is a container.
    type: str
    default: ''
  image:
    description:
      - A container image; when set, RV(image) says whether Docker is there and holds it (C(docker image inspect)).
    type: str
    default: ''
  variable_names:
    description:
      - Inventory variable names to cite in the messages of the checks set by other options, keyed by option name
        (V(kernel_allow), V(kernel_deny), V(os_allow), V(driver_allow), V(driver_deny), V(driver_required), V(swap),
        V(oom_policy), V(cma_required), V(time_sync_required), V(time_max_error_ms)). An option not listed is cited by
        its own name.
    type: dict
    default: {}
extends_documentation_fragment:
  - dspark.cluster.read_only
attributes:
  platform:
    support: full
    platforms: posix
    description: Linux (C(/proc), C(/sys/class/net), C(adjtimex), C(ss) from iproute2).
notes:
  - Run it with become so that C(ss) names the processes that hold the ports.
  - The controller judges the group (clock bounds between hosts, interface names) from the returned RV(time) and the
    links with C(judge_group) of the C(qualify) module utility.
"""

EXAMPLES = r"""
- name: Qualify a serving node
  dspark.cluster.node_qualify:
    kernel_allow: ['6\.11\..*-nvidia.*']
    kernel_deny:
      - pattern: '6\.11\.0-1001-nvidia'
        reason: unified memory is not reclaimed after an engine exits
        source: issue 27
    os_allow: ['ubuntu 24\.04']
    driver_required: true
    driver_allow: ['580\..*']
    disks:
      - path: /var/lib/dspark/models
        need_bytes: 120000000000
        variable: model_cache_dir
        label: model cache
    memory_fraction: 0.835
    memory_reserve_mib: 2048
    swap: 'off'
    oom_policy: none
    ports:
      - port: 8000
        label: vLLM API
        variable: serve_port
    own_containers: [vllm-serve]
    links:
      - name: enp1s0f0np0
        variable: rdma_interface
        min_speed_mbps: 100000
  become: true
  register: qualify

- name: Fail on any failing check
  ansible.builtin.assert:
    that: qualify.failed_checks == 0
    fail_msg: "{{ qualify.checks | selectattr('verdict', 'eq', 'fail') | map(attribute='message') | list }}"
"""

RETURN = r"""
checks:
  description:
    - One dict a measurement, with keys C(check) (kernel, os, driver, disk, memory, swap, oom, time, port, link or
      link_speed), C(subject) (the path, port, interface), C(value) (what was measured), C(threshold) (or null),
      C(verdict) (pass, fail, warn, info or skip), C(message), C(fix) (non-empty for every fail, else null) and
      C(variable) (the inventory variable that sets the threshold, or null).
  type: list
  elements: dict
  returned: always
  sample:
    - check: link
      subject: enp1s0f0np0
      value: {exists: true, operstate: down, carrier: 0, speed_mbps: null, mtu: 9000}
      threshold: up
      verdict: fail
      message: rdma_interface=enp1s0f0np0 is DOWN (operstate down, carrier 0)
      fix: Check the cable and the peer (switch port or the other node), then ip link set enp1s0f0np0 up
      variable: rdma_interface
failed_checks:
  description: How many checks have the verdict fail.
  type: int
  returned: always
  sample: 1
ansible_facts:
  description:
    - C(distribution), C(distribution_release) and C(architecture) as C(ansible.builtin.setup) names them (from
      C(/etc/os-release) and C(uname -m)), so that a later play's role need not gather them; empty when
      C(/etc/os-release) lacks C(ID) or C(VERSION_CODENAME).
  type: dict
  returned: success
  sample: {"distribution": "Ubuntu", "distribution_release": "noble", "architecture": "aarch64"}
facts:
  description: What was read, for reports.
  type: dict
  returned: always
  contains:
    kernel:
      description: C(uname -r).
      type: str
    os_id:
      description: C(ID) of C(/etc/os-release).
      type: str
    os_version:
      description: C(VERSION_ID) of C(/etc/os-release).
      type: str
    driver:
      description: The NVIDIA driver version, or null.
      type: str
    memory_total_mib:
      description: C(MemTotal) in MiB.
      type: int
    memory_available_mib:
      description: C(MemAvailable) in MiB.
      type: int
    swap_total_mib:
      description: C(SwapTotal) in MiB.
      type: int
time:
  description:
    - The kernel clock discipline, for the group check on the controller. C(esterror_ms) and C(maxerror_ms) are null
      when C(adjtimex) could not be read; C(wall) is C(time.time()) at the measurement.
  type: dict
  returned: always
  sample: {synchronized: true, esterror_ms: 0.5, maxerror_ms: 12.0, wall: 1767225600.25}
fabric:
  description:
    - With O(fabric_address) - C(address), C(addressed) (one of O(links) carries it), C(ipv4) (each link's IPv4
      addresses with their prefix length) and C(container) (the container type, or null on a host or a VM).
  type: dict
  returned: when O(fabric_address) is set
  sample: {address: 192.168.100.1, addressed: true, ipv4: {enp1s0f1np1: [192.168.100.1/24]}, container: null}
image:
  description:
    - With O(image) - C(name), C(docker) (whether the docker program is there), C(present) (whether it holds the
      image) and C(msg) (what docker said when it does not).
  type: dict
  returned: when O(image) is set
  sample: {name: 'registry.example/vllm:1', docker: true, present: false, msg: 'No such image'}
"""

import ctypes
import ctypes.util
import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dspark.cluster.plugins.module_utils import qualify

NET = '/sys/class/net'
DRIVER_FILES = ('/proc/driver/nvidia/version', '/sys/module/nvidia/version')


def read_text(path):
    """The file's text, or None when it cannot be read (missing, EINVAL as for speed of a virtual link)."""
    try:
        with open(path, encoding='utf-8', errors='replace') as handle:
            return handle.read()
    except OSError:
        return None


def read_bytes(path):
    try:
        with open(path, 'rb') as handle:
            return handle.read()
    except OSError:
        return None


def kernel_release():
    return os.uname().release


def statvfs(path):
    return os.statvfs(path)


def path_exists(path):
    return os.path.exists(path)


def list_links():
    try:
        return sorted(os.listdir(NET))
    except OSError:
        return []


def wall_time():
    return time.time()


class _Timeval(ctypes.Structure):
    _fields_ = [('tv_sec', ctypes.c_long), ('tv_usec', ctypes.c_long)]


class _Timex(ctypes.Structure):
    # struct timex of <sys/timex.h> (glibc): the 11 trailing ints are its padding.
    _fields_ = [('modes', ctypes.c_uint), ('offset', ctypes.c_long), ('freq', ctypes.c_long),
                ('maxerror', ctypes.c_long), ('esterror', ctypes.c_long), ('status', ctypes.c_int),
                ('constant', ctypes.c_long), ('precision', ctypes.c_long), ('tolerance', ctypes.c_long),
                ('time', _Timeval), ('tick', ctypes.c_long), ('ppsfreq', ctypes.c_long), ('jitter', ctypes.c_long),
                ('shift', ctypes.c_int), ('stabil', ctypes.c_long), ('jitcnt', ctypes.c_long),
                ('calcnt', ctypes.c_long), ('errcnt', ctypes.c_long), ('stbcnt', ctypes.c_long),
                ('tai', ctypes.c_int), ('_pad', ctypes.c_int * 11)]


def adjtimex():
    """{state, status, maxerror, esterror} of adjtimex() with modes 0 (reads only; allowed unprivileged)."""
    libc = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6', use_errno=True)
    timex = _Timex()
    timex.modes = 0
    state = libc.adjtimex(ctypes.byref(timex))
    if state < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return {'state': state, 'status': timex.status, 'maxerror': timex.maxerror, 'esterror': timex.esterror}


def run(module, argv):
    """(rc, stdout, stderr) of a read-only command, or None when its program is absent."""
    path = module.get_bin_path(argv[0])
    if not path:
        return None
    return module.run_command([path] + list(argv[1:]))


def nearest_existing(path):
    current = os.path.abspath(path)
    while not path_exists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def present_bytes(module, path):
    """The apparent size of path (du), 0 when it does not exist or du is absent."""
    result = run(module, ['du', '-s', '--apparent-size', '--block-size=1', '--', path])
    return qualify.parse_du(result[1]) if result else 0


def measure_disks(module, disks):
    checks = []
    for spec in disks:
        if spec.get('model_bytes'):
            need, label = qualify.model_disk_need(spec, present_bytes(module, spec['present_path'])
                                                  if spec.get('present_path') else 0)
            spec = dict(spec, need_bytes=need, label=label)
        at = nearest_existing(spec['path'])
        try:
            checks.append(qualify.judge_disk(spec, statvfs(at), measured_at=at))
        except OSError as exc:
            checks.append(qualify.make_check('disk', spec['path'], None, {'need_bytes': spec['need_bytes']}, 'skip',
                                             'cannot statvfs %s: %s' % (at, exc), None, spec.get('variable')))
    return checks


def measure_oom(module, policy, variable):
    result = run(module, ['systemctl', 'is-active'] + list(qualify.OOM_SERVICES))
    if result is None:
        return qualify.judge_oom(None, policy, variable, 'systemctl is absent')
    rc, out, err = result
    states = qualify.parse_is_active(rc, out)
    why = (err or out or 'no output').strip().splitlines()[0] if states is None else None
    return qualify.judge_oom(states, policy, variable, 'systemctl is-active said: %s' % why)


class DockerNames:
    """Container names by ID (docker inspect) and by IP (for docker-proxy), read once each."""

    def __init__(self, module):
        self.module = module
        self.by_id = {}
        self.by_ip = None

    def name(self, container_id):
        if container_id not in self.by_id:
            result = run(self.module, ['docker', 'inspect', '--format', '{{.Name}}', container_id])
            name = None
            if result and result[0] == 0 and result[1].strip():
                name = result[1].strip().splitlines()[0].lstrip('/')
            self.by_id[container_id] = name or 'id %s (name unknown)' % container_id[:12]
        return self.by_id[container_id]

    def by_address(self, ip):
        if self.by_ip is None:
            self.by_ip = {}
            listed = run(self.module, ['docker', 'ps', '-q', '--no-trunc'])
            ids = listed[1].split() if listed and listed[0] == 0 else []
            if ids:
                result = run(self.module, ['docker', 'inspect', '--format',
                                           '{{.Name}}{{range .NetworkSettings.Networks}} {{.IPAddress}}{{end}}'] + ids)
                if result and result[0] == 0:
                    for line in result[1].splitlines():
                        parts = line.split()
                        for address in parts[1:]:
                            self.by_ip[address] = parts[0].lstrip('/')
        return self.by_ip.get(ip)


def holder_of(pid, process, docker):
    """The docker container name of a listener's pid, or None for a host process."""
    container_id = qualify.container_id_from_cgroup(read_text('/proc/%d/cgroup' % pid))
    if container_id:
        return docker.name(container_id)
    if process == 'docker-proxy':
        target = qualify.docker_proxy_target(read_bytes('/proc/%d/cmdline' % pid))
        if target:
            return docker.by_address(target[0]) or 'container at %s (name unknown)' % target[0]
    return None


def running_container(module, names):
    """The first of this collection's serving containers (own_containers) that runs, else None."""
    for name in names or []:
        result = run(module, ['docker', 'inspect', '--format', '{{.State.Running}}', name])
        if result and result[0] == 0 and result[1].strip() == 'true':
            return name
    return None


def measure_ports(module, ports, own_containers, own_units=()):
    if not ports:
        return []
    result = run(module, ['ss', '-Hltnp'])
    if result is None or result[0] != 0:
        why = 'ss is absent (install iproute2)' if result is None else 'ss -Hltnp failed: %s' % result[2].strip()
        return [qualify.make_check('port', spec['port'], None, None, 'skip', '%s: port %s not judged'
                                   % (why, spec['port']), None, spec.get('variable')) for spec in ports]
    listeners = qualify.parse_ss(result[1])
    docker = DockerNames(module)
    checks = []
    for spec in ports:
        holders = []
        for listener in listeners:
            if listener['port'] != int(spec['port']):
                continue
            if not listener['users']:
                holders.append({'address': listener['address'], 'process': None, 'pid': None, 'container': None})
            for user in listener['users']:
                holder = {'address': listener['address'], 'process': user['name'], 'pid': user['pid'],
                          'container': holder_of(user['pid'], user['name'], docker)}
                if own_units and not holder['container']:
                    holder['unit'] = qualify.unit_from_cgroup(read_text('/proc/%d/cgroup' % user['pid']))
                if holder not in holders:
                    holders.append(holder)
        checks.append(qualify.judge_port(spec, holders, own_containers, own_units))
    return checks


def detect_container(module):
    """The container type (docker, lxc, ...), or None on a host or a VM."""
    result = run(module, ['systemd-detect-virt', '--container'])
    if result is not None:
        value = result[1].strip()
        return value if result[0] == 0 and value and value != 'none' else None
    if path_exists('/.dockerenv'):
        return 'docker'
    return (read_text('/run/systemd/container') or '').strip() or None


def read_fabric(module, links, address):
    """Whether one of the links carries the fabric address, their IPv4 addresses, and the container type."""
    names = [spec['name'] for spec in links]
    result = run(module, ['ip', '-j', '-4', 'addr', 'show'])
    ipv4 = {}
    if result and result[0] == 0:
        try:
            ipv4 = qualify.parse_ipv4(json.loads(result[1] or '[]'))
        except ValueError:
            ipv4 = {}
    return {'address': address, 'addressed': qualify.holds_address(ipv4, names, address),
            'ipv4': dict((name, ipv4.get(name, [])) for name in names), 'container': detect_container(module)}


def read_image(module, image):
    """Whether Docker is there and holds the image."""
    result = run(module, ['docker', 'image', 'inspect', '--format', '{{.Id}}', image])
    if result is None:
        return {'name': image, 'docker': False, 'present': False, 'msg': 'docker is absent'}
    said = (result[2] or result[1] or '').strip().splitlines()
    return {'name': image, 'docker': True, 'present': result[0] == 0,
            'msg': None if result[0] == 0 else (said[-1] if said else 'rc %s' % result[0])}


def measure_links(links):
    checks = []
    present = None
    for spec in links:
        base = os.path.join(NET, spec['name'])
        if '/' in spec['name'] or read_text(os.path.join(base, 'operstate')) is None:
            if present is None:
                present = list_links()
            checks.extend(qualify.judge_link(spec, None, present))
            continue
        attrs = dict((name, read_text(os.path.join(base, name))) for name in ('operstate', 'carrier', 'speed', 'mtu'))
        checks.extend(qualify.judge_link(spec, attrs))
    return checks


def main():
    deny = dict(pattern=dict(type='str', required=True), reason=dict(type='str'), source=dict(type='str'))
    module = AnsibleModule(
        argument_spec=dict(
            kernel_allow=dict(type='list', elements='str', default=[]),
            kernel_deny=dict(type='list', elements='dict', default=[], options=deny),
            os_allow=dict(type='list', elements='str', default=[]),
            driver_allow=dict(type='list', elements='str', default=[]),
            driver_deny=dict(type='list', elements='dict', default=[], options=deny),
            driver_required=dict(type='bool', default=False),
            disks=dict(type='list', elements='dict', default=[], options=dict(
                path=dict(type='str', required=True), need_bytes=dict(type='int', required=True),
                need_inodes=dict(type='int', default=0), variable=dict(type='str'), label=dict(type='str'),
                model_bytes=dict(type='int', default=0), present_path=dict(type='str'), fix=dict(type='str'))),
            memory_fraction=dict(type='float', default=0.0),
            memory_reserve_mib=dict(type='int', default=0),
            memory_variable=dict(type='str', default='serve_gpu_memory_utilization'),
            memory_shares=dict(type='list', elements='dict', default=[], options=dict(
                name=dict(type='str', required=True), share=dict(type='float', required=True),
                variable=dict(type='str'))),
            lmcache_l1_mib=dict(type='int', default=0),
            lmcache_reserve_mib=dict(type='int', default=0),
            swap=dict(type='str', default='any', choices=['any', 'off', 'on']),
            oom_policy=dict(type='str', default='any', choices=['any', 'none', 'required']),
            cma_required=dict(type='bool', default=False),
            time_sync_required=dict(type='bool', default=True),
            time_max_error_ms=dict(type='int', default=100),
            ports=dict(type='list', elements='dict', default=[], options=dict(
                port=dict(type='int', required=True), label=dict(type='str'), variable=dict(type='str'))),
            own_containers=dict(type='list', elements='str', default=[]),
            own_units=dict(type='list', elements='str', default=[]),
            links=dict(type='list', elements='dict', default=[], options=dict(
                name=dict(type='str', required=True), variable=dict(type='str'),
                min_speed_mbps=dict(type='int', default=0))),
            fabric_address=dict(type='str', default=''),
            image=dict(type='str', default=''),
            variable_names=dict(type='dict', default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    bad = []
    if not 0 <= p['memory_fraction'] <= 1:
        bad.append('memory_fraction=%s must be within 0..1' % p['memory_fraction'])
    for spec in p['memory_shares']:
        if not spec['name'] or not 0 <= spec['share'] <= 1:
            bad.append('memory_shares: %s=%s needs a name and a share within 0..1' % (spec['name'], spec['share']))
    if p['memory_reserve_mib'] < 0:
        bad.append('memory_reserve_mib=%s must be >= 0' % p['memory_reserve_mib'])
    if p['time_max_error_ms'] < 0:
        bad.append('time_max_error_ms=%s must be >= 0' % p['time_max_error_ms'])
    for spec in p['disks']:
        if spec['need_bytes'] < 0 or spec['need_inodes'] < 0 or spec['model_bytes'] < 0:
            bad.append('disks: %s needs need_bytes, need_inodes and model_bytes >= 0' % spec['path'])
    for spec in p['ports']:
        if not 0 < spec['port'] < 65536:
            bad.append('ports: %s is not a TCP port' % spec['port'])
    for spec in p['links']:
        if spec['min_speed_mbps'] < 0:
            bad.append('links: %s needs min_speed_mbps >= 0' % spec['name'])
    if bad:
        module.fail_json(msg='node_qualify: ' + '; '.join(bad))

    def var(option):
        return str((p['variable_names'] or {}).get(option) or option)

    facts = {'kernel': kernel_release()}
    checks = []
    try:
        checks.append(qualify.judge_kernel(facts['kernel'], p['kernel_allow'], p['kernel_deny'],
                                           var('kernel_allow'), var('kernel_deny')))
        os_fields = qualify.parse_os_release(read_text('/etc/os-release') or read_text('/usr/lib/os-release'))
        # The docker_runtime role reads these as setup names them: its own gathering is skipped when they are here.
        setup_facts = qualify.distribution_facts(os_fields, os.uname().machine)
        facts['os_id'] = os_fields.get('ID')
        facts['os_version'] = os_fields.get('VERSION_ID')
        checks.append(qualify.judge_os(os_fields, p['os_allow'], var('os_allow')))
        driver = None
        for path in DRIVER_FILES:
            driver = qualify.parse_nvidia_version(read_text(path))
            if driver:
                break
        facts['driver'] = driver
        checks.append(qualify.judge_driver(driver, p['driver_allow'], p['driver_deny'], p['driver_required'],
                                           var('driver_allow'), var('driver_deny'), var('driver_required')))
        checks.extend(measure_disks(module, p['disks']))
        meminfo = read_text('/proc/meminfo')
        facts.update(qualify.meminfo_facts(meminfo))
        checks.append(qualify.judge_memory(meminfo, p['memory_fraction'], p['memory_reserve_mib'],
                                           p['memory_variable'], running_container(module, p['own_containers'])))
        shares = [(spec['name'], spec['share'], spec['variable']) for spec in p['memory_shares']]
        budget = qualify.judge_memory_budget(meminfo, p['memory_fraction'], p['lmcache_l1_mib'], p['lmcache_reserve_mib'],
                                             p['memory_variable'], shares=shares)
        if budget:
            checks.append(budget)
        checks.append(qualify.judge_cma(meminfo, p['cma_required'], var('cma_required')))
        checks.append(qualify.judge_swap(read_text('/proc/swaps'), meminfo, p['swap'], var('swap')))
        checks.append(measure_oom(module, p['oom_policy'], var('oom_policy')))
        wall = wall_time()
        try:
            timex, error = adjtimex(), None
        except (OSError, AttributeError, TypeError) as exc:
            timex, error = None, str(exc) or type(exc).__name__
        time_result = qualify.time_facts(timex, wall)
        checks.append(qualify.judge_time(time_result, p['time_sync_required'], p['time_max_error_ms'], error,
                                         var('time_sync_required'), var('time_max_error_ms')))
        checks.extend(measure_ports(module, p['ports'], p['own_containers'], p['own_units']))
        checks.extend(measure_links(p['links']))
    except qualify.QualifyError as exc:
        module.fail_json(msg='node_qualify: %s' % exc)
    extra = {}
    if p['fabric_address']:
        extra['fabric'] = read_fabric(module, p['links'], p['fabric_address'])
    if p['image']:
        extra['image'] = read_image(module, p['image'])
    failed = qualify.count_failed(checks)
    module.exit_json(changed=False, checks=checks, failed_checks=failed, facts=facts, time=time_result,
                     ansible_facts=setup_facts, msg='%d of %d checks failed' % (failed, len(checks)), **extra)


if __name__ == '__main__':
    main()
