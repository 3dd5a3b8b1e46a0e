# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node qualification (issue #27): is this node fit to run its part of the cluster? Pure logic only.

Callers (the node_qualify module, the controller for group checks) read the node; this file parses what they read
(/proc/meminfo, /proc/swaps, /etc/os-release, `ss -Hltnp`, /proc/<pid>/cgroup, /sys/class/net/<if>/*,
the adjtimex() result) and judges it. Every judgement is a check dict:

    {check, subject, value, threshold, verdict, message, fix, variable}

verdict is one of pass, fail, warn, info, skip; every fail has a fix; the message names the measured value, the
threshold and the inventory variable that sets it.
"""

from __future__ import annotations

import math
import re

from ansible_collections.dspark.cluster.plugins.module_utils.memory_guard import parse_meminfo

CHECKS = ('kernel', 'os', 'driver', 'disk', 'memory', 'cma', 'swap', 'oom', 'time', 'port', 'link', 'link_speed')
VERDICTS = ('pass', 'fail', 'warn', 'info', 'skip')
MIB = 1024 * 1024
GIB = 1024 * MIB
STA_UNSYNC = 0x0040          # <linux/timex.h>: the kernel clock is not synchronised
OOM_SERVICES = ('earlyoom', 'systemd-oomd')


class QualifyError(ValueError):
    """A bad option value (a regex that does not compile, an unknown policy): the caller's error, not a verdict."""


def make_check(check, subject, value, threshold, verdict, message, fix=None, variable=None):
    """One check dict; refuses an unknown check/verdict and a fail without a fix."""
    if check not in CHECKS:
        raise QualifyError('unknown check %r' % (check,))
    if verdict not in VERDICTS:
        raise QualifyError('unknown verdict %r' % (verdict,))
    if verdict == 'fail' and not fix:
        raise QualifyError('a failing %s check needs a fix (%s)' % (check, message))
    return {'check': check, 'subject': str(subject), 'value': value, 'threshold': threshold, 'verdict': verdict,
            'message': message, 'fix': fix or None, 'variable': variable or None}


def count_failed(checks):
    return sum(1 for item in checks if item['verdict'] == 'fail')


def gib(nbytes):
    """Bytes for a message: GiB with one decimal, or MiB/bytes below 1 GiB so that small values do not read as 0."""
    if abs(nbytes) >= GIB:
        return '%.1f GiB' % (nbytes / float(GIB))
    if abs(nbytes) >= MIB:
        return '%.1f MiB' % (nbytes / float(MIB))
    return '%d bytes' % nbytes


# ---------------------------------------------------------------------------------------------------- patterns


def compile_allow(patterns, option):
    compiled = []
    for pattern in patterns or []:
        try:
            compiled.append((pattern, re.compile(str(pattern))))
        except re.error as exc:
            raise QualifyError('%s: %r is not a valid regular expression: %s' % (option, pattern, exc))
    return compiled


def compile_deny(entries, option):
    compiled = []
    for entry in entries or []:
        if isinstance(entry, str):
            entry = {'pattern': entry}
        if not isinstance(entry, dict) or not entry.get('pattern'):
            raise QualifyError('%s: each entry needs a pattern, got %r' % (option, entry))
        try:
            regex = re.compile(str(entry['pattern']))
        except re.error as exc:
            raise QualifyError('%s: %r is not a valid regular expression: %s' % (option, entry['pattern'], exc))
        compiled.append((entry, regex))
    return compiled


def judge_allow_deny(check, subject, value, allow, deny, allow_variable, deny_variable, what, fix_allow, fix_deny):
    """pass/fail of `value` against a fullmatch allow list (empty: any) and a deny list of {pattern, reason, source}."""
    allow_c = compile_allow(allow, allow_variable)
    deny_c = compile_deny(deny, deny_variable)
    for entry, regex in deny_c:
        if regex.fullmatch(value):
            reason = entry.get('reason') or 'no reason given'
            source = entry.get('source') or 'no source given'
            return make_check(check, subject, value, {'deny': entry['pattern']}, 'fail',
                              '%s %s matches %s entry %r: %s (source: %s)'
                              % (what, value, deny_variable, entry['pattern'], reason, source),
                              fix_deny, deny_variable)
    threshold = {'allow': [item[0] for item in allow_c]} if allow_c else None
    if not allow_c:
        denied = '' if deny is None else ' (and none of %d %s entries matches)' % (len(deny_c), deny_variable)
        return make_check(check, subject, value, None, 'pass',
                          '%s %s: %s is empty, any %s is allowed%s' % (what, value, allow_variable, what, denied),
                          None, allow_variable)
    for pattern, regex in allow_c:
        if regex.fullmatch(value):
            return make_check(check, subject, value, threshold, 'pass',
                              '%s %s matches %s entry %r' % (what, value, allow_variable, pattern), None, allow_variable)
    return make_check(check, subject, value, threshold, 'fail',
                      '%s %s matches none of %s (%s)' % (what, value, allow_variable,
                                                         ', '.join(repr(item[0]) for item in allow_c)),
                      fix_allow, allow_variable)


# ---------------------------------------------------------------------------------------------------- kernel, os, driver


def judge_kernel(release, allow=None, deny=None, allow_variable='kernel_allow', deny_variable='kernel_deny'):
    release = (release or '').strip()
    return judge_allow_deny(
        'kernel', 'kernel', release, allow, deny or [], allow_variable, deny_variable, 'kernel',
        'Boot a kernel that %s allows (apt install the supported kernel, reboot into it), or add this release to '
        '%s once it is validated' % (allow_variable, allow_variable),
        'Boot another kernel (pin the supported one, reboot into it); do not remove the %s entry unless its '
        'source says the problem is fixed' % deny_variable)


def parse_os_release(text):
    """{KEY: value} from /etc/os-release text, quotes removed; comments, blank and malformed lines skipped."""
    fields = {}
    for line in (text or '').splitlines():
        line = line.strip()
        if not line or line.startswith('#') or '=' not in line:
            continue
        key, _sep, value = line.partition('=')
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in '"\'':
            value = value[1:-1]
        value = re.sub(r'\\(.)', r'\1', value)
        fields[key.strip()] = value
    return fields


def distribution_facts(fields, machine):
    """The facts ansible.builtin.setup's distribution and platform subsets give that the docker_runtime role reads
    (distribution, distribution_release, architecture), from /etc/os-release's fields and `uname -m`; {} when the
    file lacks ID or VERSION_CODENAME (setup then gathers them). distribution as setup names it: the ID capitalized
    (amzn and rhel renamed as it does)."""
    ident, codename = fields.get('ID', '').strip(), fields.get('VERSION_CODENAME', '').strip()
    if not ident or not codename or not machine:
        return {}
    name = {'amzn': 'Amazon', 'rhel': 'Redhat'}.get(ident.lower(), ident.capitalize())
    return {'distribution': name, 'distribution_release': codename, 'architecture': machine}


def os_string(fields):
    """'<ID> <VERSION_ID>' (ID lower case as the file has it; a missing VERSION_ID, as on rolling releases, is '')."""
    return ('%s %s' % (fields.get('ID', 'unknown'), fields.get('VERSION_ID', ''))).strip()


def judge_os(fields, allow=None, allow_variable='os_allow'):
    value = os_string(fields)
    return judge_allow_deny(
        'os', 'os', value, allow, None, allow_variable, 'os_deny', 'os',
        'Install this node with an operating system that %s allows, or add %r to %s once it is validated'
        % (allow_variable, value, allow_variable), None)


VERSION_RE = re.compile(r'(?<![\w.])(\d+\.\d+(?:\.\d+)*)(?![\w.])')


def parse_nvidia_version(text):
    """The driver version from /proc/driver/nvidia/version (the NVRM line, not the GCC one) or
    /sys/module/nvidia/version (the version alone); None when there is none."""
    if not text:
        return None
    for line in text.splitlines():
        if line.strip().startswith('NVRM'):
            found = VERSION_RE.search(line.partition(':')[2] or line)
            return found.group(1) if found else None
    stripped = text.strip()
    if VERSION_RE.fullmatch(stripped):
        return stripped
    return None


def judge_driver(version, allow=None, deny=None, required=False, allow_variable='driver_allow',
                 deny_variable='driver_deny', required_variable='driver_required'):
    if not version:
        if required:
            return make_check('driver', 'nvidia', None, {'required': True}, 'fail',
                              'no NVIDIA driver is loaded (neither /proc/driver/nvidia/version nor '
                              '/sys/module/nvidia/version) and %s is true' % required_variable,
                              'Install and load the NVIDIA driver (modprobe nvidia; nvidia-smi must work), or set '
                              '%s to false for a node without a GPU' % required_variable, required_variable)
        return make_check('driver', 'nvidia', None, {'required': False}, 'skip',
                          'no NVIDIA driver is loaded and %s is false: driver not judged' % required_variable,
                          None, required_variable)
    return judge_allow_deny(
        'driver', 'nvidia', version, allow, deny or [], allow_variable, deny_variable, 'NVIDIA driver',
        'Install a driver version that %s allows and reboot, or add %s to %s once it is validated'
        % (allow_variable, version, allow_variable),
        'Install another driver version and reboot; do not remove the %s entry unless its source says the '
        'problem is fixed' % deny_variable)


# ---------------------------------------------------------------------------------------------------- disk


def judge_disk(spec, statvfs, measured_at=None):
    """spec: {path, need_bytes, need_inodes, variable, label[, fix]}; statvfs: mapping/object with f_bavail, f_frsize,
    f_favail, f_files; measured_at: the nearest existing parent when spec['path'] does not exist yet."""
    def field(name):
        if isinstance(statvfs, dict):
            return int(statvfs.get(name, 0) or 0)
        return int(getattr(statvfs, name, 0) or 0)

    path = spec['path']
    variable = spec.get('variable') or None
    label = spec.get('label') or path
    need_bytes = int(spec.get('need_bytes') or 0)
    need_inodes = int(spec.get('need_inodes') or 0)
    free_bytes = field('f_bavail') * field('f_frsize')
    free_inodes = field('f_favail')
    inodes_limited = field('f_files') > 0
    where = path if not measured_at or measured_at == path else (
        '%s (does not exist yet; measured at its nearest existing parent %s)' % (path, measured_at))
    # A spec with its own fix names a path that no variable sets (/dev/shm for LMCache's L1): the variable is the need's.
    named = '%s=%s' % (variable, path) if variable and not spec.get('fix') else path
    value = {'free_bytes': free_bytes, 'free_inodes': free_inodes if inodes_limited else None,
             'measured_at': measured_at or path}
    threshold = {'need_bytes': need_bytes, 'need_inodes': need_inodes}
    problems = []
    if free_bytes < need_bytes:
        problems.append('%s free, %s needed (%s missing)' % (gib(free_bytes), gib(need_bytes),
                                                             gib(need_bytes - free_bytes)))
    if need_inodes and inodes_limited and free_inodes < need_inodes:
        problems.append('%d inodes free, %d needed' % (free_inodes, need_inodes))
    inode_note = '' if not need_inodes else (
        ', %d inodes free of %d needed' % (free_inodes, need_inodes) if inodes_limited
        else ', the filesystem has no fixed inode count')
    subject = path
    if problems:
        return make_check('disk', subject, value, threshold, 'fail',
                          '%s (%s) at %s: %s' % (named, label, where, '; '.join(problems)),
                          spec.get('fix') or 'Free space on the filesystem of %s (old checkpoints, images: docker system '
                          'prune, caches), grow it, or set %s to a path on a larger filesystem'
                          % (measured_at or path, variable or 'the path'), variable)
    return make_check('disk', subject, value, threshold, 'pass',
                      '%s (%s) at %s: %s free, %s needed%s' % (named, label, where, gib(free_bytes),
                                                               gib(need_bytes), inode_note),
                      None, variable)


# ---------------------------------------------------------------------------------------------------- memory, swap


def parse_du(stdout):
    """The first field of `du -s --apparent-size --block-size=1` (bytes), or 0 when there is none (a missing path)."""
    fields = (stdout or '').split()
    try:
        return max(0, int(fields[0])) if fields else 0
    except ValueError:
        return 0


def model_disk_need(spec, present_bytes):
    """(need_bytes, label) of a disk spec that also holds a model: its need_bytes plus what of model_bytes is not
    there yet (present_bytes), and its label with {present} replaced by the bytes of the model already there."""
    model = int(spec.get('model_bytes') or 0)
    present = max(0, int(present_bytes or 0))
    need = int(spec.get('need_bytes') or 0) + max(0, model - present)
    label = spec.get('label')
    if label:
        label = label.replace('{present}', str(min(present, model)))
    return need, label


def parse_ipv4(ip_json):
    """`ip -j -4 addr show` (parsed JSON) -> {ifname: ['a.b.c.d/len', ...]}."""
    out = {}
    for link in ip_json or []:
        if not isinstance(link, dict) or not link.get('ifname'):
            continue
        out[link['ifname']] = ['%s/%s' % (a['local'], a.get('prefixlen', 32)) for a in link.get('addr_info') or []
                               if a.get('family') == 'inet' and a.get('local')]
    return out


def holds_address(ipv4, names, address):
    """Whether one of the interfaces ``names`` carries ``address`` (without its prefix length) in ``ipv4``."""
    if not address:
        return False
    return any(str(a).split('/', 1)[0] == str(address) for name in names for a in (ipv4 or {}).get(name) or [])


def meminfo_facts(meminfo_text):
    fields = parse_meminfo(meminfo_text)

    def mib(name):
        return fields[name] // 1024 if name in fields else None
    return {'memory_total_mib': mib('MemTotal'), 'memory_available_mib': mib('MemAvailable'),
            'swap_total_mib': mib('SwapTotal')}


def judge_cma(meminfo_text, required=False, variable='cma_required'):
    """The kernel's contiguous memory area (CmaTotal in /proc/meminfo). On a DGX Spark, NCCL over RoCE cannot
    register memory without it (ibv_reg_mr_iova2: Cannot allocate memory): a kernel that booted with CmaTotal 0 kB
    (7.0.0-1019-nvidia in the field) fails every start."""
    fields = parse_meminfo(meminfo_text)
    total = fields.get('CmaTotal')
    mib = None if total is None else total // 1024
    if not required:
        return make_check('cma', 'CmaTotal', mib, None, 'info',
                          'CmaTotal %s (not required: %s is false)' % ('absent' if mib is None else '%d MiB' % mib,
                                                                       variable), None, variable)
    if not total:
        return make_check('cma', 'CmaTotal', mib, {'min_mib': 1}, 'fail',
                          'CmaTotal is %s: NCCL over RoCE cannot register memory on this kernel (ibv_reg_mr_iova2 '
                          'fails with Cannot allocate memory)' % ('absent' if total is None else '0 kB'),
                          'Boot a kernel with a CMA area (6.17.0-1032-nvidia is reported to work; 7.0.0-1019-nvidia '
                          'boots without one), or give one on the kernel command line (cma=...); then reboot',
                          variable)
    return make_check('cma', 'CmaTotal', mib, {'min_mib': 1}, 'pass', 'CmaTotal %d MiB' % mib, None, variable)


def judge_memory(meminfo_text, fraction=0.0, reserve_mib=0, variable='serve_gpu_memory_utilization', engine_running=None):
    """MemAvailable against what a start needs. engine_running: the name of this collection's serving container when it
    runs: it holds its share already, so what is available now says nothing about the next start (a restart stops it
    first, and the serve role's memory guard waits for the memory then)."""
    facts = meminfo_facts(meminfo_text)
    total, available = facts['memory_total_mib'], facts['memory_available_mib']
    value = {'total_mib': total, 'available_mib': available}
    if not fraction:
        return make_check('memory', 'memory', value, None, 'skip',
                          '%s is 0 (memory_fraction): memory not judged; %s MiB of %s MiB available'
                          % (variable, available, total), None, variable)
    if engine_running:
        return make_check('memory', 'memory', value, None, 'skip',
                          'the serving container %s runs and holds its share: MemAvailable (%s of %s MiB) not judged '
                          '(the serve role\'s memory guard checks it when the group restarts)'
                          % (engine_running, available, total), None, variable)
    if total is None or available is None:
        return make_check('memory', 'memory', value, None, 'skip',
                          '/proc/meminfo has no MemTotal/MemAvailable (kernel older than 3.14?): memory not judged',
                          None, variable)
    total, available = int(total), int(available)
    need = int(math.ceil(fraction * total + (reserve_mib or 0)))
    threshold = {'need_mib': need, 'fraction': fraction, 'reserve_mib': reserve_mib}
    how = '%s=%s x MemTotal %d MiB + reserve %d MiB' % (variable, fraction, total, reserve_mib or 0)
    if available < need:
        return make_check('memory', 'memory', value, threshold, 'fail',
                          'MemAvailable %d MiB < %d MiB needed (%s): %d MiB missing'
                          % (available, need, how, need - available),
                          'Stop what holds the memory (a leftover engine or container: docker ps, '
                          'ps aux --sort=-rss | head), reboot the node when a dead rank keeps it (unified memory is '
                          'not given back until then), or lower %s (now %s)' % (variable, fraction), variable)
    return make_check('memory', 'memory', value, threshold, 'pass',
                      'MemAvailable %d MiB >= %d MiB needed (%s)' % (available, need, how), None, variable)


def _engines_text(engines):
    """'main 0.8 + vl 0.12 = 0.92' (as plugin_utils._group_engines.shares_text writes it on the controller)."""
    total = sum(float(share) for dummy, share, dummy2 in engines)
    return '%s = %g' % (' + '.join('%s %g' % (name, float(share)) for name, share, dummy in engines), round(total, 6))


def judge_memory_budget(meminfo_text, fraction=0.0, l1_mib=0, reserve_mib=0, variable='serve_gpu_memory_utilization',
                        shares=None):
    """Every engine's share of MemTotal (unified memory on a DGX Spark), LMCache's L1 (issue #45) and the host's reserve
    must fit in MemTotal, whatever runs now (a configuration that can never fit).

    shares: every engine of the node's group as (name, share[, variable]), the main engine first (issue #46: its
    sidecars beside it); None or one engine: the main engine alone at ``fraction``, named by ``variable``. None with
    one engine and no L1: nothing shares the memory with the engine (judge_memory judges it)."""
    engines = [(str(item[0]), item[1], (item[2] if len(item) > 2 else None) or None) for item in shares or []]
    if len(engines) < 2:
        if engines:
            fraction, variable = engines[0][1], engines[0][2] or variable
        return _judge_one_engine_budget(meminfo_text, fraction, l1_mib, reserve_mib, variable)
    shown = _engines_text(engines)
    # The check is LMCache's where it runs (as with the main engine alone), else the sidecars'.
    budget_variable = 'serve_lmcache_l1_size_gb' if l1_mib else 'dspark_sidecars'
    total = meminfo_facts(meminfo_text)['memory_total_mib']
    if total is None:
        return make_check('memory', 'memory budget', {'total_mib': None}, None, 'skip',
                          '/proc/meminfo has no MemTotal: the memory budget of the engines (%s) is not judged' % shown,
                          None, budget_variable)
    total, l1_mib, reserve_mib = int(total), int(l1_mib or 0), int(reserve_mib or 0)
    # Each vLLM takes its own share of MemTotal.
    engine = sum(int(math.ceil(float(share) * total)) for dummy, share, dummy2 in engines)
    need = engine + l1_mib + reserve_mib
    setters = ', '.join('%s: %s' % (name, var or 'its gpu_memory_utilization') for name, dummy, var in engines)
    beside = ('LMCache\'s L1 %d MiB (serve_lmcache_l1_size_gb) and ' % l1_mib) if l1_mib else ''
    how = ('%s of MemTotal %d MiB (%s) is %d MiB for the engines (%s); with %sthe host\'s %d MiB '
           '(serve_lmcache_memory_reserve_mib) that is %d MiB'
           % (shown, total, gib(total * MIB), engine, setters, beside, reserve_mib, need))
    value = {'total_mib': total}
    threshold = {'need_mib': need, 'engine_mib': engine, 'l1_mib': l1_mib, 'reserve_mib': reserve_mib,
                 'shares': [[name, share] for name, share, dummy in engines]}
    if need > total:
        # The largest sum of the shares that fits beside the L1 and the reserve (rounded down to a hundredth), and the
        # largest L1 that fits beside the shares as they are.
        room = math.floor((total - l1_mib - reserve_mib) * 100.0 / total) / 100.0
        l1_room_gb = (total - engine - reserve_mib) // 1024
        if room > 0:
            fix = ('Lower the engines\' shares (%s) so that they add up to at most %g, not %s'
                   % (setters, room, shown.rpartition(' = ')[2]))
            if l1_mib and l1_room_gb > 0:
                fix += ', or lower serve_lmcache_l1_size_gb to at most %d' % l1_room_gb
        else:
            fix = ('Lower serve_lmcache_l1_size_gb (now %d MiB; with serve_lmcache_memory_reserve_mib it leaves the engines '
                   'nothing), then the engines\' shares (%s)' % (l1_mib, setters))
        return make_check('memory', 'memory budget', value, threshold, 'fail',
                          '%s > MemTotal %d MiB: the engines%s and the host cannot all fit'
                          % (how, total, ', LMCache\'s L1' if l1_mib else ''), fix, budget_variable)
    return make_check('memory', 'memory budget', value, threshold, 'pass', '%s <= MemTotal %d MiB' % (how, total), None,
                      budget_variable)


def _judge_one_engine_budget(meminfo_text, fraction, l1_mib, reserve_mib, variable):
    """LMCache's L1 (issue #45) beside the main engine alone: its share of MemTotal, the L1 and the host's reserve.
    None without an L1."""
    if not l1_mib:
        return None
    total = meminfo_facts(meminfo_text)['memory_total_mib']
    if total is None:
        return make_check('memory', 'memory budget', {'total_mib': None}, None, 'skip',
                          '/proc/meminfo has no MemTotal: the LMCache memory budget is not judged', None,
                          'serve_lmcache_l1_size_gb')
    total = int(total)
    engine = int(math.ceil(fraction * total))
    need = engine + int(l1_mib) + int(reserve_mib)
    how = ('%s=%s x MemTotal %d MiB (%d MiB) + LMCache L1 %d MiB (serve_lmcache_l1_size_gb) + %d MiB '
           '(serve_lmcache_memory_reserve_mib) = %d MiB' % (variable, fraction, total, engine, l1_mib, reserve_mib, need))
    value = {'total_mib': total}
    threshold = {'need_mib': need, 'engine_mib': engine, 'l1_mib': int(l1_mib), 'reserve_mib': int(reserve_mib)}
    if need > total:
        room_gb = (total - engine - int(reserve_mib)) // 1024
        return make_check('memory', 'memory budget', value, threshold, 'fail',
                          '%s > MemTotal %d MiB: the engine, LMCache\'s L1 and the host cannot all fit' % (how, total),
                          'Lower serve_lmcache_l1_size_gb to at most %d, or lower %s (now %s)'
                          % (max(room_gb, 0), variable, fraction), 'serve_lmcache_l1_size_gb')
    return make_check('memory', 'memory budget', value, threshold, 'pass', '%s <= MemTotal %d MiB' % (how, total), None,
                      'serve_lmcache_l1_size_gb')


def parse_swaps(text):
    """Active swap areas from /proc/swaps: [{name, type, size_kib, used_kib, priority}] (header skipped)."""
    areas = []
    for line in (text or '').splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[0] == 'Filename':
            continue
        area = {'name': parts[0], 'type': parts[1]}
        for key, index in (('size_kib', 2), ('used_kib', 3), ('priority', 4)):
            try:
                area[key] = int(parts[index])
            except (IndexError, ValueError):
                area[key] = None
        areas.append(area)
    return areas


def judge_swap(swaps_text, meminfo_text=None, policy='any', variable='swap'):
    if policy not in ('any', 'off', 'on'):
        raise QualifyError('swap=%r: must be any, off or on' % (policy,))
    areas = parse_swaps(swaps_text)
    total_mib = meminfo_facts(meminfo_text)['swap_total_mib'] if meminfo_text else None
    if total_mib is None:
        total_mib = sum(a.get('size_kib') or 0 for a in areas) // 1024
    on = bool(areas) or total_mib > 0
    names = ', '.join(a['name'] for a in areas) or 'none'
    value = {'on': on, 'total_mib': total_mib, 'areas': [a['name'] for a in areas]}
    state = 'swap is %s (%d MiB; areas: %s)' % ('on' if on else 'off', total_mib, names)
    if policy == 'any':
        return make_check('swap', 'swap', value, 'any', 'info', '%s; %s=any: report only' % (state, variable),
                          None, variable)
    if policy == 'off' and on:
        return make_check('swap', 'swap', value, 'off', 'fail', '%s but %s=off' % (state, variable),
                          'swapoff -a, then remove the swap entries from /etc/fstab (and mask zram/swap units: '
                          'systemctl mask dev-zram0.swap), or set %s to any' % variable, variable)
    if policy == 'on' and not on:
        return make_check('swap', 'swap', value, 'on', 'fail', '%s but %s=on' % (state, variable),
                          'Create and enable a swap file (fallocate -l 16G /swapfile; chmod 600 /swapfile; '
                          'mkswap /swapfile; swapon /swapfile; add it to /etc/fstab), or set %s to any' % variable,
                          variable)
    return make_check('swap', 'swap', value, policy, 'pass', '%s; %s=%s' % (state, variable, policy), None, variable)


# ---------------------------------------------------------------------------------------------------- oom


def parse_is_active(rc, stdout, units=OOM_SERVICES):
    """{unit: state} from `systemctl is-active <units>` (one state a line, in order); None when the output does not
    have one line a unit (systemctl absent, no systemd as PID 1, no bus)."""
    if rc is None or stdout is None:
        return None
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if len(lines) != len(units):
        return None
    return dict(zip(units, lines))


def judge_oom(states, policy='any', variable='oom_policy', why_unknown='systemctl is absent'):
    if policy not in ('any', 'none', 'required'):
        raise QualifyError('oom_policy=%r: must be any, none or required' % (policy,))
    if states is None:
        return make_check('oom', 'oom', 'unknown', policy, 'skip',
                          'userspace OOM killers (%s) are unknown: %s; %s=%s not judged'
                          % (', '.join(OOM_SERVICES), why_unknown, variable, policy), None, variable)
    active = [unit for unit, state in states.items() if state == 'active']
    shown = ', '.join('%s %s' % (unit, state) for unit, state in states.items())
    if policy == 'none' and active:
        return make_check('oom', 'oom', states, policy, 'fail',
                          '%s but %s=none (a userspace OOM killer may kill an engine holding most of the memory)'
                          % (shown, variable),
                          'systemctl disable --now %s, or set %s to any' % (' '.join(active), variable), variable)
    if policy == 'required' and not active:
        return make_check('oom', 'oom', states, policy, 'fail',
                          '%s but %s=required' % (shown, variable),
                          'apt install earlyoom (or systemctl enable --now systemd-oomd), or set %s to any'
                          % variable, variable)
    return make_check('oom', 'oom', states, policy, 'info' if policy == 'any' else 'pass',
                      '%s; %s=%s' % (shown, variable, policy), None, variable)


# ---------------------------------------------------------------------------------------------------- time


def time_facts(timex, wall):
    """The `time` return value from an adjtimex() result {status, esterror, maxerror} (microseconds), or None
    when adjtimex could not be read."""
    if not timex:
        return {'synchronized': False, 'esterror_ms': None, 'maxerror_ms': None, 'wall': wall}
    return {'synchronized': not (int(timex.get('status', STA_UNSYNC)) & STA_UNSYNC),
            'esterror_ms': round(int(timex.get('esterror', 0)) / 1000.0, 3),
            'maxerror_ms': round(int(timex.get('maxerror', 0)) / 1000.0, 3),
            'wall': wall}


def judge_time(time, required=True, max_error_ms=100, error=None, required_variable='time_sync_required',
               error_variable='time_max_error_ms'):
    fix_sync = ('Run a time daemon against the same source on every node (apt install chrony; systemctl enable '
                '--now chrony; chronyc tracking), or set %s to false' % required_variable)
    if error:
        return make_check('time', 'clock', None, {'required': required, 'max_error_ms': max_error_ms}, 'skip',
                          'cannot read the kernel clock discipline (adjtimex): %s' % error, None, required_variable)
    value = {'synchronized': time['synchronized'], 'esterror_ms': time['esterror_ms'],
             'maxerror_ms': time['maxerror_ms']}
    threshold = {'required': required, 'max_error_ms': max_error_ms}
    if not time['synchronized']:
        text = ('kernel clock is not synchronised (STA_UNSYNC; its esterror %s ms and maxerror %s ms mean nothing '
                'then)' % (time['esterror_ms'], time['maxerror_ms']))
        if required:
            return make_check('time', 'clock', value, threshold, 'fail', '%s and %s is true' % (text, required_variable),
                              fix_sync, required_variable)
        return make_check('time', 'clock', value, threshold, 'warn', '%s; %s is false' % (text, required_variable),
                          None, required_variable)
    if time['esterror_ms'] > max_error_ms:
        return make_check('time', 'clock', value, threshold, 'fail',
                          'kernel clock is synchronised but its estimated error %s ms > %s=%s ms (maxerror %s ms)'
                          % (time['esterror_ms'], error_variable, max_error_ms, time['maxerror_ms']),
                          'Use a closer or better time source (a local NTP/PTP server; chronyc sources -v), wait '
                          'for the daemon to converge, or raise %s' % error_variable, error_variable)
    return make_check('time', 'clock', value, threshold, 'pass',
                      'kernel clock is synchronised, estimated error %s ms <= %s=%s ms (maxerror %s ms)'
                      % (time['esterror_ms'], error_variable, max_error_ms, time['maxerror_ms']), None, error_variable)


# ---------------------------------------------------------------------------------------------------- ports

USER_RE = re.compile(r'\("((?:[^"\\]|\\.)*)",(?:pid=)?(\d+)(?:,(?:fd=)?(\d+))?')
DOCKER_SCOPE_RE = re.compile(r'docker-([0-9a-f]{64})\.scope')
DOCKER_HEX_RE = re.compile(r'[0-9a-f]{64}')


def parse_ss(text):
    """TCP listeners from `ss -Hltnp` (or `ss -ltnp` with its header, or without -p): [{address, port, users}],
    users [{name, pid, fd}] ([] when ss shows none, as without root)."""
    listeners = []
    for line in (text or '').splitlines():
        users_text = ''
        index = line.find('users:(')
        if index >= 0:
            users_text = line[index:]
            line = line[:index]
        tokens = line.split()
        if not tokens or tokens[0] in ('State', 'Netid', 'Recv-Q'):
            continue
        local = None
        for token in tokens:
            if ':' in token and token != '*:*':
                local = token
                break
        if local is None:
            continue
        address, _sep, port = local.rpartition(':')
        if not port.isdigit():
            continue
        users = [{'name': m.group(1), 'pid': int(m.group(2)),
                  'fd': int(m.group(3)) if m.group(3) else None} for m in USER_RE.finditer(users_text)]
        listeners.append({'address': address, 'port': int(port), 'users': users})
    return listeners


def container_id_from_cgroup(text):
    """The docker container ID in /proc/<pid>/cgroup text (cgroup v1 or v2, systemd or cgroupfs driver), or None.

    Only a container that holds the process directly counts: the last part of the path. A service of a node that is
    itself a container (a lab node, a DinD host) sits under /docker/<node>/system.slice/... and is a host process of
    that node. cgroup v1's resource controllers stop at the container's root even then, so the unified (0::) and
    name=systemd hierarchies decide when the text has them."""
    paths, preferred = [], []
    for line in (text or '').splitlines():
        parts = line.strip().split(':', 2)
        if len(parts) != 3:
            continue
        paths.append(parts[2])
        # A root path there (0::/ on cgroup v1 with the cgroupfs driver) places nothing.
        if ((parts[0] == '0' and parts[1] == '') or parts[1] == 'name=systemd') and parts[2].strip('/'):
            preferred.append(parts[2])
    for path in preferred or paths:
        names = [n for n in path.split('/') if n]
        if not names:
            continue
        found = DOCKER_SCOPE_RE.fullmatch(names[-1])
        if found:
            return found.group(1)
        if len(names) >= 2 and names[-2] == 'docker' and DOCKER_HEX_RE.fullmatch(names[-1]):
            return names[-1]
    return None


def docker_proxy_target(cmdline):
    """(container_ip, container_port) from a docker-proxy's /proc/<pid>/cmdline (NUL separated), or None."""
    if isinstance(cmdline, bytes):
        cmdline = cmdline.decode('utf-8', 'replace')
    args = [a for a in (cmdline or '').replace('\0', ' ').split() if a]
    wanted = {}
    for index, arg in enumerate(args):
        key, sep, inline = arg.lstrip('-').partition('=')
        if key in ('container-ip', 'container-port'):
            if sep:
                wanted[key] = inline
            elif index + 1 < len(args):
                wanted[key] = args[index + 1]
    if 'container-ip' not in wanted:
        return None
    return wanted['container-ip'], wanted.get('container-port')


def unit_from_cgroup(text):
    """The systemd service that holds a process, from /proc/<pid>/cgroup (the unified or name=systemd hierarchy):
    'x.service' for .../system.slice/x.service, else None."""
    for line in (text or '').splitlines():
        parts = line.strip().split(':', 2)
        if len(parts) == 3 and ((parts[0] == '0' and parts[1] == '') or parts[1] == 'name=systemd'):
            names = [n for n in parts[2].split('/') if n]
            if names and names[-1].endswith('.service'):
                return names[-1]
    return None


def judge_port(spec, holders, own_containers=(), own_units=()):
    """spec: {port, label, variable}; holders: [{address, process, pid, container[, unit]}] of the listeners on that
    port, process/pid None when ss did not show them, container the docker name (or 'id <short>') or None for a host
    process, unit the systemd service of a host process (this collection's API edge is one of own_units)."""
    port = int(spec['port'])
    variable = spec.get('variable') or None
    label = spec.get('label') or 'port %d' % port
    named = '%s=%d' % (variable, port) if variable else 'port %d' % port
    own = set(own_containers or ())
    units = set(own_units or ())
    value = [dict(h) for h in holders]
    threshold = {'own_containers': sorted(own)}
    if units:
        threshold['own_units'] = sorted(units)
    if not holders:
        return make_check('port', port, value, threshold, 'pass', '%s (%s) is free' % (named, label), None, variable)
    foreign, unknown, owned = [], [], []
    for holder in holders:
        where = 'on %s' % holder.get('address')
        if holder.get('container'):
            text = "container '%s' (pid %s %s)" % (holder['container'], holder.get('pid'), where)
            (owned if holder['container'] in own else foreign).append(text)
        elif holder.get('unit') and holder['unit'] in units:
            owned.append("unit '%s' ('%s' pid %s %s)" % (holder['unit'], holder.get('process'), holder['pid'], where))
        elif holder.get('pid') is None:
            unknown.append('unknown holder %s (ss shows no process: not root, or the holder runs in another pid namespace)' % where)
        else:
            foreign.append("host process '%s' pid %s %s" % (holder.get('process'), holder['pid'], where))
    if foreign:
        return make_check('port', port, value, threshold, 'fail',
                          '%s (%s) is held by %s' % (named, label, '; '.join(_unique(foreign + unknown + owned))),
                          'Stop what holds port %d (docker stop <container>, systemctl stop <service> or kill the '
                          'pid), or set %s to a free port' % (port, variable or 'the port'), variable)
    if unknown:
        return make_check('port', port, value, threshold, 'warn',
                          '%s (%s) is held by %s' % (named, label, '; '.join(_unique(unknown + owned))),
                          'Run with become (ss needs root to name the holder), then stop it or set %s to a free port'
                          % (variable or 'the port'), variable)
    return make_check('port', port, value, threshold, 'pass',
                      '%s (%s) is held by our own %s' % (named, label, '; '.join(_unique(owned))), None, variable)


def _unique(items):
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


# ---------------------------------------------------------------------------------------------------- links


def _int_or_none(text):
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def judge_link(spec, attrs, present_names=None):
    """spec: {name, variable, min_speed_mbps}; attrs: {operstate, carrier, speed, mtu} as read from
    /sys/class/net/<name>/ (None for an attribute that cannot be read, as carrier/speed of a down or virtual link)
    or None when the interface does not exist. Returns [link check, link_speed check]."""
    name = spec['name']
    variable = spec.get('variable') or None
    floor = int(spec.get('min_speed_mbps') or 0)
    named = '%s=%s' % (variable, name) if variable else name
    fix_down = ('Check the cable and the peer (switch port or the other node), then ip link set %s up; '
                'ip -d link show %s and dmesg name the cause' % (name, name))
    if attrs is None:
        shown = ', '.join(sorted(present_names or [])) or 'none'
        link = make_check('link', name, {'exists': False}, None, 'fail',
                          '%s is DOWN (operstate absent, carrier absent): no interface of that name here '
                          '(interfaces: %s)' % (named, shown),
                          'Check %s names a real interface of this node (ip -br link), that its driver is loaded '
                          'and the cable is in; %s' % (variable or 'the name', fix_down), variable)
        speed = make_check('link_speed', name, None, floor or None, 'skip',
                           '%s does not exist: speed not judged' % named, None, variable)
        return [link, speed]
    operstate = (attrs.get('operstate') or 'unreadable').strip()
    carrier_raw = attrs.get('carrier')
    carrier = _int_or_none(carrier_raw)
    speed_mbps = _int_or_none(attrs.get('speed'))
    mtu = _int_or_none(attrs.get('mtu'))
    value = {'exists': True, 'operstate': operstate, 'carrier': carrier, 'speed_mbps': speed_mbps, 'mtu': mtu}
    up = operstate in ('up', 'unknown') and carrier != 0
    shown = 'operstate %s, carrier %s' % (operstate, carrier if carrier is not None else 'unreadable')
    if not up:
        link = make_check('link', name, value, 'up', 'fail', '%s is DOWN (%s)' % (named, shown), fix_down, variable)
        speed = make_check('link_speed', name, speed_mbps, floor or None, 'skip',
                           '%s is down: speed not judged' % named, None, variable)
        return [link, speed]
    link = make_check('link', name, value, 'up', 'pass', '%s is up (%s, mtu %s)' % (named, shown, mtu), None, variable)
    if speed_mbps is None or speed_mbps <= 0:
        why = 'unreadable' if speed_mbps is None else str(speed_mbps)
        speed = make_check('link_speed', name, speed_mbps, floor or None, 'skip',
                           '%s speed is %s (a virtual link, or the driver does not report it): speed not judged '
                           'against min_speed_mbps %d' % (named, why, floor), None, variable)
    elif not floor:
        speed = make_check('link_speed', name, speed_mbps, None, 'info',
                           '%s runs at %d Mb/s (min_speed_mbps 0: no floor)' % (named, speed_mbps), None, variable)
    elif speed_mbps < floor:
        speed = make_check('link_speed', name, speed_mbps, floor, 'fail',
                           '%s runs at %d Mb/s < min_speed_mbps %d Mb/s' % (named, speed_mbps, floor),
                           'Check the cable/transceiver and the peer port speed (ethtool %s), reseat or replace the '
                           'cable, or lower min_speed_mbps for %s' % (name, variable or name), variable)
    else:
        speed = make_check('link_speed', name, speed_mbps, floor, 'pass',
                           '%s runs at %d Mb/s >= min_speed_mbps %d Mb/s' % (named, speed_mbps, floor), None, variable)
    return [link, speed]


# ---------------------------------------------------------------------------------------------------- group


def _group(check, subject, value, threshold, verdict, message, fix=None, variable=None):
    item = make_check(check, subject, value, threshold, verdict, message, fix, variable)
    item['scope'] = 'group'
    return item


def judge_group(members, max_offset_ms=100, offset_variable='max_offset_ms', wall_warn_s=60):
    """Group checks from each member's node_qualify result: {host: {"time": {...}, "links": [{name, variable}]}}.

    time: the clocks of two synchronised hosts may differ by up to esterror_a + esterror_b; the largest such pair
    must stay within max_offset_ms, and every member must be synchronised. wall (time.time() at measurement) only
    shows gross gaps, since hosts are measured at slightly different moments. links: the interface names a
    variable resolves to must be the same on every host."""
    checks = []
    members = members or {}
    timed = {host: m['time'] for host, m in sorted(members.items()) if isinstance(m, dict) and m.get('time')}
    if timed:
        unsynced = [host for host, t in timed.items() if not t.get('synchronized')]
        if unsynced:
            checks.append(_group('time', 'group', {'unsynchronized': unsynced}, {'synchronized': True}, 'fail',
                                 'clock not synchronised on %s' % ', '.join(unsynced),
                                 'Run a time daemon against the same source on every node (chrony; chronyc '
                                 'tracking) on %s' % ', '.join(unsynced), offset_variable))
        synced = [(host, float(t['esterror_ms'])) for host, t in timed.items()
                  if t.get('synchronized') and t.get('esterror_ms') is not None]
        worst = None
        for i, (host_a, err_a) in enumerate(synced):
            for host_b, err_b in synced[i + 1:]:
                if worst is None or err_a + err_b > worst[2]:
                    worst = (host_a, host_b, err_a + err_b)
        if worst:
            value = {'hosts': [worst[0], worst[1]], 'bound_ms': round(worst[2], 3)}
            if worst[2] > max_offset_ms:
                checks.append(_group('time', 'group', value, max_offset_ms, 'fail',
                                     'clocks of %s and %s may differ by up to %s ms (sum of their estimated errors) '
                                     '> %s=%s ms' % (worst[0], worst[1], round(worst[2], 3), offset_variable,
                                                     max_offset_ms),
                                     'Point %s and %s at a closer common time source (a local NTP/PTP server) and '
                                     'let chrony converge, or raise %s' % (worst[0], worst[1], offset_variable),
                                     offset_variable))
            else:
                checks.append(_group('time', 'group', value, max_offset_ms, 'pass',
                                     'largest pairwise clock bound %s ms (%s, %s) <= %s=%s ms'
                                     % (round(worst[2], 3), worst[0], worst[1], offset_variable, max_offset_ms),
                                     None, offset_variable))
        walls = [(t['wall'], host) for host, t in timed.items() if isinstance(t.get('wall'), (int, float))]
        if len(walls) > 1:
            spread = max(walls)[0] - min(walls)[0]
            pair = [min(walls)[1], max(walls)[1]]
            text = ('wall clocks read %.1f s apart (%s earliest, %s latest; measured moments differ by the run\'s '
                    'own skew, so only gaps of minutes mean anything)' % (spread, pair[0], pair[1]))
            if spread > wall_warn_s:
                checks.append(_group('time', 'wall', {'spread_s': round(spread, 3), 'hosts': pair}, wall_warn_s, 'warn',
                                     text, 'Check the clocks of %s and %s (date; chronyc tracking)' % tuple(pair),
                                     offset_variable))
            else:
                checks.append(_group('time', 'wall', {'spread_s': round(spread, 3), 'hosts': pair}, wall_warn_s, 'info',
                                     text, None, offset_variable))
    linked = {host: member['links'] for host, member in sorted(members.items())
              if isinstance(member, dict) and member.get('links') is not None}
    by_variable = {}
    for host, links in linked.items():
        for link in links:
            by_variable.setdefault(link.get('variable') or '', {}).setdefault(host, set()).add(link['name'])
    for hosts in by_variable.values():
        for host in linked:
            hosts.setdefault(host, set())
    for variable, hosts in sorted(by_variable.items()):
        names = {host: sorted(found) for host, found in hosts.items()}
        distinct = set(tuple(n) for n in names.values())
        shown = '; '.join('%s has %s' % (host, ', '.join(n) or 'none') for host, n in sorted(names.items()))
        subject = variable or 'links'
        if len(distinct) > 1:
            checks.append(_group('link', subject, names, None, 'fail',
                                 '%s names different interfaces across the group: %s' % (subject, shown),
                                 'Give the interface of %s the same name on every node (a udev rule or netplan '
                                 'set-name, then reboot), so that one value of %s fits the whole group'
                                 % (subject, subject),
                                 variable or None))
        else:
            checks.append(_group('link', subject, names, None, 'pass',
                                 '%s names the same interfaces on all %d hosts: %s'
                                 % (subject, len(names), ', '.join(sorted(distinct)[0])), None, variable or None))
    return checks
