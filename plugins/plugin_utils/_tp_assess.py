# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The assessment of a whole serving group from every rank's log and container state.

Registered and missing ranks (counted from what every vLLM version really prints, for any GPUs per node), one init
method for all ranks, head readiness, failures (root causes first) and warnings of earlier boots. No Ansible
imports, no I/O.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_loglines import (
    _INIT_RE, evidence_line, rank_kv_marker, rank_records, ready_markers, split_boots)
from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_plan import as_int
from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_signatures import CASCADE_CODES, diagnose_lines


def _norm_rank_entry(value):
    if value is None:
        return {}
    if isinstance(value, (str, bytes)):
        return {'log': value}
    return dict(value)


_RUNNING_STATES = ('running',)
_GONE_STATES = ('missing', 'absent', 'not_found', 'notfound', 'removed', 'removing')
_STOPPED_STATES = ('exited', 'dead', 'stopped')


def _container_diagnosis(rank, node, state, exit_code, oom_killed=None):
    """Failure/warning for a non-running container, or None."""
    state_l = str(state).strip().lower() if state is not None else None
    code = as_int(exit_code)
    if state_l in _RUNNING_STATES:
        # docker inspect keeps the exit code of an earlier run; ignore it.
        return None
    base = {'rank': rank, 'node': node, 'category': 'container', 'root_cause': False, 'count': 1,
            'lineno': None, 'line': None,
            'details': {'container_state': state, 'exit_code': exit_code, 'oom_killed': oom_killed}}
    if code is not None and code != 0:
        base.update(code='container_exited', signature='container_exited', severity='fatal',
                    cause='The container of rank {0} on {1} exited with code {2} (state {3}).'.format(
                        rank, node, code, state_l or 'unknown'),
                    fix='Read that rank\'s log for the root cause; restart the head and all workers together.')
        if state_l == 'restarting':
            base['cause'] += ' It is in a restart loop.'
        return base
    if state_l in _GONE_STATES:
        base.update(code='container_missing', signature='container_missing', severity='fatal',
                    cause='There is no container for rank {0} on {1}.'.format(rank, node),
                    fix='Start that rank (worker ranks first, then the head).')
        return base
    if state_l in _STOPPED_STATES:
        base.update(code='container_stopped', signature='container_stopped', severity='fatal',
                    cause='The container of rank {0} on {1} is {2} (exit code {3}).'.format(
                        rank, node, state_l, exit_code),
                    fix='Start the whole group again (workers first, then the head).')
        return base
    if state_l:
        base.update(code='container_not_running', signature='container_not_running', severity='warning',
                    cause='The container of rank {0} on {1} is {2}.'.format(rank, node, state_l),
                    fix='Wait for it or restart the whole group.')
        return base
    return None


# SIGKILL (128 + 9): `docker kill`, the kernel's OOM killer, or docker's SIGKILL after the stop grace period.
KILLED_EXIT_CODES = (137,)
_ENDED_STATES = ('exited', 'dead')
_DOCKER_TIME_RE = re.compile(r'^(?P<base>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?'
                             r'(?P<tz>Z|[+-]\d\d:\d\d)?$')


def docker_time(value):
    """Seconds since the epoch of a docker State time (RFC 3339, nanoseconds, trailing zeros cut); None if unset.

    docker inspect writes 0001-01-01T00:00:00Z for a time that never happened (FinishedAt of a running container).
    """
    match = _DOCKER_TIME_RE.match(str(value or '').strip())
    if not match or match.group('base').startswith('0001-'):
        return None
    try:
        stamp = datetime.strptime(match.group('base'), '%Y-%m-%dT%H:%M:%S').replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    seconds = stamp.timestamp() + float('0.' + (match.group('frac') or '0'))
    zone = match.group('tz') or 'Z'
    if zone != 'Z':
        sign = -1 if zone[0] == '+' else 1
        seconds += sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds


def container_killed(exit_code, oom_killed=None):
    return oom_killed is True or as_int(exit_code) in KILLED_EXIT_CODES


def first_failure(per_rank):
    """The rank whose container failed first, as {rank, node, exit_code, killed, oom_killed, finished_at, why}, or None.

    per_rank: assess_group's 'ranks' entries. Only containers that ended (exited or dead) are candidates: the one that
    finished first when docker knows every candidate's FinishedAt and one is the earliest; else the only one killed
    (exit code 137 or OOMKilled); else the only one that ended while another rank's container still runs. None when
    the containers cannot tell (the logs decide then).
    """
    def state(item):
        return str(item.get('container_state') or '').strip().lower()

    ended = [r for r in per_rank if state(r) in _ENDED_STATES]
    if not ended:
        return None
    running = [r for r in per_rank if state(r) == 'running']
    times = [docker_time(r.get('finished_at')) for r in ended]
    killed = [r for r in ended if container_killed(r.get('exit_code'), r.get('oom_killed'))]
    pick, why = None, None
    if len(ended) > 1 and None not in times:
        earliest = min(times)
        if times.count(earliest) == 1:
            pick, why = ended[times.index(earliest)], 'ended_first'
    if pick is None and len(killed) == 1:
        pick, why = killed[0], 'killed'
    if pick is None and len(ended) == 1 and running:
        pick, why = ended[0], 'ended_while_others_run'
    if pick is None:
        return None
    finished = pick.get('finished_at') if docker_time(pick.get('finished_at')) is not None else None
    return {'rank': pick['rank'], 'node': pick['node'], 'state': state(pick),
            'exit_code': as_int(pick.get('exit_code')),
            'killed': container_killed(pick.get('exit_code'), pick.get('oom_killed')),
            'oom_killed': pick.get('oom_killed') is True, 'finished_at': finished, 'why': why,
            'running': [{'rank': r['rank'], 'node': r['node']} for r in running]}


def killed_text(oom_killed):
    """'killed' phrase of a container's exit: the OOM killer when docker says so, else SIGKILL's usual senders."""
    if oom_killed is True:
        return 'killed by the kernel\'s OOM killer (OOMKilled)'
    return 'killed (SIGKILL: docker kill, the kernel\'s OOM killer or docker\'s stop timeout)'


def _mark_first_failure(failures, first):
    """The first-failed rank's diagnoses get first_failure; the other ranks' consequences get consequence_of."""
    for failure in failures:
        if failure.get('rank') == first['rank']:
            failure['first_failure'] = True
            if failure.get('category') == 'container':
                _describe_first(failure, first)
        elif failure.get('rank') is not None and not failure.get('root_cause'):
            failure['consequence_of'] = first['rank']


def _describe_first(failure, first):
    failure['details'].update(killed=first['killed'], oom_killed=first['oom_killed'],
                              finished_at=first['finished_at'], first_failure=first['why'])
    failure.update(exit_code=first['exit_code'], killed=first['killed'], finished_at=first['finished_at'])
    extra = []
    if first['killed']:
        extra.append(killed_text(first['oom_killed']))
        failure['fix'] = ('Find what killed it (`docker events`, dmesg or journalctl -k on {0} for the OOM killer, '
                          'the node\'s memory), then restart the head and all workers together.'.format(first['node']))
    when = ' at {0}'.format(first['finished_at']) if first['finished_at'] else ''
    others = ', '.join('rank {0} on {1}'.format(r['rank'], r['node']) for r in first['running'])
    extra.append('this rank failed first{0}{1}; the other ranks\' errors are consequences'.format(
        when, ' while {0} still ran'.format(others) if others else ''))
    failure['cause'] = failure['cause'].rstrip('.') + ': ' + '; '.join(extra) + '.'


def _tagged(diag, rank, node, **extra):
    out = dict(diag)
    out['rank'] = rank
    out['node'] = node
    out.update(extra)
    return out


def assess_group(expected_world_size, logs_by_rank, last_boot_only=True):
    """Assess a TP group from every rank's log and container state.

    logs_by_rank: {rank: {"node", "log", "container_state", "exit_code"}}
    (rank keys may be strings, as after a JSON round trip). With
    last_boot_only, failures of older boots become warnings.
    """
    expected = as_int(expected_world_size)
    if expected is None or expected < 1:
        raise ValueError('expected_world_size must be a positive integer, got %r' % (expected_world_size,))
    entries = {}
    for key, value in (logs_by_rank or {}).items():
        rank = as_int(key)
        if rank is None:
            raise ValueError('logs_by_rank keys must be ranks (integers), got %r' % (key,))
        entries[rank] = _norm_rank_entry(value)

    failures = []
    warnings = []
    registered = {}     # rank -> registration entry
    world_lines = {}    # rank -> [(log key, node, record)]
    rank_nodes = {}     # rank -> {node: first record}, to catch a --node-rank used twice
    per_rank = []
    head_markers = None
    head_fatal_after_ready = False
    nccl_started = None     # rank 0's "vLLM is using nccl==": every rank passed the store rendezvous
    inferred = []           # (log key, node, record) of world lines to vouch for by the node's local rank 0

    for key in sorted(entries):
        entry = entries[key]
        node = entry.get('node') or 'rank{0}'.format(key)
        boots = split_boots(entry.get('log') or '')
        current = boots[-1] if last_boot_only else [pair for boot in boots for pair in boot]
        if last_boot_only:
            for boot_index, old in enumerate(boots[:-1]):
                for diag in diagnose_lines(old):
                    warnings.append(_tagged(diag, key, node, severity='warning', previous_boot=boot_index + 1))

        records = rank_records(current)
        if nccl_started is None:
            nccl_started = _nccl_started(current, key, node)
        ranks_in_log = set()
        for rec in records:
            ranks_in_log.add(rec['rank'])
            if rec['kind'] == 'world_size':
                world_lines.setdefault(rec['rank'], []).append((key, node, rec))
            rank_nodes.setdefault(rec['rank'], {}).setdefault(node, rec)
            if rec['kind'] == 'assignment' and rec['rank'] not in registered:
                registered[rec['rank']] = {
                    'rank': rec['rank'], 'node': node, 'tp_rank': rec['tp_rank'],
                    'world_size': rec['world_size'], 'groups': rec['groups'],
                    'evidence': rec['line'], 'lineno': rec['lineno'], 'log_key': key}
        inferred.extend(_local_rank0_vouches(records, key, node))

        if records and key not in ranks_in_log:
            failures.append({
                'code': 'rank_mismatch', 'signature': 'rank_mismatch', 'category': 'config', 'severity': 'fatal',
                'root_cause': True, 'rank': key, 'node': node, 'count': 1,
                'cause': 'The log of {0} (expected rank {1}) shows rank(s) {2}.'.format(
                    node, key, ', '.join(str(r) for r in sorted(ranks_in_log))),
                'fix': 'Check --node-rank on {0}: node r must run rank r.'.format(node),
                'details': {'ranks_in_log': sorted(ranks_in_log)}, 'lineno': records[0]['lineno'],
                'line': records[0]['line']})

        diags = diagnose_lines(current)
        markers = ready_markers(current) if key == 0 else None
        kv = rank_kv_marker(current)
        for diag in diags:
            tagged = _tagged(diag, key, node)
            (failures if diag['severity'] == 'fatal' else warnings).append(tagged)
            if (markers and markers['ready'] and diag['severity'] == 'fatal'
                    and diag['lineno'] > markers['startup_complete']['lineno']):
                head_fatal_after_ready = True

        cont = _container_diagnosis(key, node, entry.get('container_state'), entry.get('exit_code'),
                                    entry.get('oom_killed'))
        if cont is not None:
            (failures if cont['severity'] == 'fatal' else warnings).append(cont)
        if key == 0:
            head_markers = markers
            if cont is not None and cont['severity'] == 'fatal':
                head_fatal_after_ready = True

        per_rank.append({'rank': key, 'node': node, 'boots': len(boots), 'lines': len(current),
                         'container_state': entry.get('container_state'), 'exit_code': entry.get('exit_code'),
                         'oom_killed': entry.get('oom_killed'), 'finished_at': entry.get('finished_at'),
                         'kv_cache_ready': kv is not None, 'kv_cache': kv,
                         'ready': _rank_ready(key, kv, diags, cont, markers)})

    # From vLLM 0.19 the assignment line is info_once(scope="local"): only each node's local rank 0 prints it.
    # It comes after the collective group creation, which no rank passes alone, so it vouches for the ranks
    # whose world_size line is in the same container log.
    for key, node, rec, proof in inferred:
        if rec['rank'] not in registered:
            registered[rec['rank']] = {
                'rank': rec['rank'], 'node': node, 'tp_rank': None, 'world_size': rec['world_size'], 'groups': {},
                'evidence': rec['line'], 'lineno': rec['lineno'], 'log_key': key, 'via': 'local_rank0',
                'proof': proof['line']}

    for rank in sorted(rank_nodes):
        if len(rank_nodes[rank]) > 1:
            nodes = sorted(rank_nodes[rank])
            rec = rank_nodes[rank][nodes[-1]]
            failures.append({
                'code': 'duplicate_rank', 'signature': 'duplicate_rank', 'category': 'config',
                'severity': 'fatal', 'root_cause': True, 'rank': rank, 'node': nodes[-1], 'count': 1,
                'cause': 'Rank {0} appears in the logs of {1}.'.format(rank, ', '.join(nodes)),
                'fix': 'Give every node a distinct --node-rank 0..N-1.',
                'details': {'nodes': nodes}, 'lineno': rec['lineno'], 'line': rec['line']})

    # Init method per rank: the INFO line carries tcp://A:P; the DEBUG entry
    # line shows the pre-substitution tcp://127.0.0.1:<port>, so use DEBUG only
    # when a (very old) build logged nothing else.
    init_methods = []
    world_sizes = set(r['world_size'] for r in registered.values())
    for rank in sorted(world_lines):
        lines = world_lines[rank]
        preferred = [item for item in lines if item[2]['level'] != 'DEBUG'] or lines
        _key, node, rec = preferred[-1]
        world_sizes.add(rec['world_size'])
        init_methods.append({'rank': rank, 'node': node, 'init_method': rec['init_method'],
                             'evidence': rec['line'], 'lineno': rec['lineno']})
    methods = set(item['init_method'] for item in init_methods if item['init_method'])
    if len(methods) > 1:
        failures.append(endpoint_mismatch(init_methods))
    if world_sizes and world_sizes != set([expected]):
        failures.append({
            'code': 'world_size_mismatch', 'signature': 'world_size_seen', 'category': 'config',
            'severity': 'fatal', 'root_cause': True, 'rank': None, 'node': None, 'count': 1,
            'cause': 'Expected world size {0}, logs show {1}.'.format(
                expected, ', '.join(str(w) for w in sorted(world_sizes))),
            'fix': 'Use --tensor-parallel-size x --pipeline-parallel-size = {0} and the same --nnodes on every '
                   'node.'.format(expected),
            'details': {'world_sizes': sorted(world_sizes)}, 'lineno': None, 'line': None})

    expected_ranks = list(range(expected))
    registered_list = []
    for rank in sorted(registered):
        item = dict(registered[rank])
        item.pop('log_key', None)
        registered_list.append(item)
    missing = [r for r in expected_ranks if r not in registered]
    pending = [r for r in missing if r in world_lines]
    seen_methods = dict((i['rank'], i['init_method']) for i in init_methods)
    consistent = (len(methods) == 1 and all(seen_methods.get(r) for r in expected_ranks))
    head_ready = bool(head_markers and head_markers['ready'] and not head_fatal_after_ready)
    failures.sort(key=lambda d: (d['rank'] is None, d['rank'] if d['rank'] is not None else 0,
                                 d['lineno'] or 0))
    first = first_failure(per_rank) if failures else None
    if first is not None:
        _mark_first_failure(failures, first)

    ok = (not missing and consistent and world_sizes == set([expected]) and head_ready and not failures)
    seen_sizes = sorted(world_sizes | set(r['world_size'] for r in registered_list))
    return {
        'ok': ok,
        'msg': _summary(expected, registered_list, missing, methods, head_ready, failures, entries, first),
        'expected_world_size': expected,
        'expected_ranks': expected_ranks,
        'registered_ranks': registered_list,
        'missing_ranks': missing,
        'pending_ranks': pending,
        # The head's rank line only appears once every rank passed the store
        # rendezvous and group creation.
        'rendezvous_complete': 0 in registered,
        # Rank 0 created its NCCL communicator: the store rendezvous is over, NCCL setup may still hang.
        'store_rendezvous_complete': 0 in registered or nccl_started is not None,
        'nccl_started': nccl_started,
        'world_size': seen_sizes[0] if len(seen_sizes) == 1 else None,
        'world_sizes_seen': seen_sizes,
        'init_method': sorted(methods)[0] if len(methods) == 1 else None,
        'init_methods': init_methods,
        'init_method_consistent': consistent,
        'head_ready': head_ready,
        'head_markers': head_markers,
        'failures': failures,
        # The rank whose container failed first (killed, or ended first): the others' errors follow from it.
        'first_failure': first,
        'warnings': warnings,
        'ranks': per_rank,
    }


def _endpoint(init_method):
    """(host, port) of a tcp://host:port init method, or None."""
    match = _INIT_RE.match(init_method or '')
    if not match:
        return None
    return match.group('host').strip('[]'), match.group('port')


def endpoint_difference(init_method, reference):
    """('--master-port 29599, not 29511', {'port'}): how init_method's endpoint differs from the reference's."""
    end, ref = _endpoint(init_method), _endpoint(reference)
    what, differs = [], set()
    if end and ref:
        if end[0] != ref[0]:
            what.append('--master-addr {0}, not {1}'.format(end[0], ref[0]))
            differs.add('address')
        if end[1] != ref[1]:
            what.append('--master-port {0}, not {1}'.format(end[1], ref[1]))
            differs.add('port')
    return ' and '.join(what), differs


def endpoint_mismatch(init_methods):
    """The init_method_mismatch failure: which rank dials which rendezvous endpoint, against rank 0's store.

    Rank 0 hosts the store on its endpoint; a rank that dials another address or port retries silently until the
    store timeout (torch: 30 min with Gloo, 10 with NCCL), and so does the head, so no log names the cause. The
    failure names the rank(s) that differ from rank 0 (or from the endpoint most ranks use when rank 0 logged none)
    and whether the address, the port or both differ.
    """
    by_rank = dict((i['rank'], i) for i in init_methods if i.get('init_method'))
    counts = {}
    for item in by_rank.values():
        counts[item['init_method']] = counts.get(item['init_method'], 0) + 1
    if 0 in by_rank:
        reference, where = by_rank[0]['init_method'], 'rank 0 on {0} hosts the rendezvous store on {1}'.format(
            by_rank[0]['node'], by_rank[0]['init_method'])
    else:
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        tied = len(top) > 1 and top[0][1] == top[1][1]
        reference = None if tied else top[0][0]
        where = ('no log shows rank 0\'s store yet; most ranks dial {0}'.format(reference) if reference
                 else 'no log shows rank 0\'s store yet')
    odd = [by_rank[r] for r in sorted(by_rank) if by_rank[r]['init_method'] != reference]
    parts = []
    differs = set()
    for item in odd:
        what, how = endpoint_difference(item['init_method'], reference)
        differs |= how
        parts.append('rank {0} on {1} dials {2}{3}'.format(
            item['rank'], item['node'], item['init_method'], ' ({0})'.format(what) if what else ''))
    cause = ('The ranks dial different rendezvous endpoints: {0}, but {1}. torch retries a connection to a wrong '
             'endpoint silently until the store timeout (30 min with Gloo, 10 with NCCL) and the store host waits as '
             'silently, so no log names this.'.format('; '.join(parts), where))
    culprit = odd[0] if len(odd) == 1 and reference else None
    return {
        'code': 'init_method_mismatch', 'signature': 'init_method_mismatch', 'category': 'config',
        'severity': 'fatal', 'root_cause': True, 'rank': culprit['rank'] if culprit else None,
        'node': culprit['node'] if culprit else None, 'count': 1, 'cause': cause[0].upper() + cause[1:],
        'fix': 'Use the same --master-addr and --master-port (MASTER_ADDR/MASTER_PORT: dspark_master_port, the head\'s '
               'fabric address) on every node of the group.',
        'details': {'init_methods': sorted(counts), 'store': reference, 'differs': sorted(differs),
                    'by_rank': dict((r, by_rank[r]['init_method']) for r in sorted(by_rank)),
                    'odd_ranks': [item['rank'] for item in odd]},
        'lineno': culprit['lineno'] if culprit else None, 'line': culprit['evidence'] if culprit else None}


def _rank_ready(key, kv, diags, cont, markers):
    """Whether the rank(s) of one log finished start-up and still run.

    A headless worker logs no "ready" line (a CPU one ends with its KV cache line, or "Warming up done." when it
    compiles): its KV cache allocation in the current boot, no fatal error after it and a container that has not
    failed make it ready. The head also needs its API up after the engine core sized the KV cache.
    """
    if kv is None or (cont is not None and cont['severity'] == 'fatal'):
        return False
    if any(d['severity'] == 'fatal' for d in diags):
        return False
    return bool(markers['ready']) if key == 0 else True


_NCCL_STARTED_RE = re.compile(r'vLLM is using nccl==(?P<version>\S+)')


def _nccl_started(numbered, key, node):
    for lineno, line in numbered:
        if 'vLLM is using nccl==' in line:
            match = _NCCL_STARTED_RE.search(line)
            return {'rank': key, 'node': node, 'version': match.group('version'), 'lineno': lineno,
                    'line': evidence_line(line)}
    return None


def _local_rank0_vouches(records, key, node):
    """(key, node, world record, proof) for each rank that only logged its world_size line.

    The proof is an assignment line, in the same boot of the same container log, of a rank whose world_size line
    says local_rank=0 (or, without one, the lowest rank of the log), for the same world size.
    """
    worlds = {}
    for rec in records:
        if rec['kind'] == 'world_size':
            known = worlds.get(rec['rank'])
            # The INFO line carries the real init method; the DEBUG one comes first.
            if known is None or known['level'] == 'DEBUG':
                worlds[rec['rank']] = rec
    if not worlds:
        return []
    lowest = min(worlds)
    proofs = {}
    for rec in records:
        if rec['kind'] != 'assignment':
            continue
        world = worlds.get(rec['rank'])
        local_rank = world['local_rank'] if world is not None else None
        if local_rank == 0 or (local_rank is None and rec['rank'] == lowest):
            proofs.setdefault(rec['world_size'], rec)
    out = []
    for rank in sorted(worlds):
        proof = proofs.get(worlds[rank]['world_size'])
        if proof is not None and proof['rank'] != rank:
            out.append((key, node, worlds[rank], proof))
    return out


def _summary(expected, registered, missing, methods, head_ready, failures, entries, first=None):
    def where(rank):
        entry = entries.get(rank) or {}
        return 'rank {0} ({1})'.format(rank, entry.get('node') or 'unknown node')

    parts = ['{0}/{1} TP ranks registered'.format(len(registered), expected)]
    if len(methods) == 1:
        parts[0] += ' via {0}'.format(next(iter(methods)))
    if missing:
        parts.append('missing: ' + ', '.join(where(r) for r in missing))
    parts.append('head ready' if head_ready else 'head not ready')
    if first is not None:
        # The rank that failed first (its own log's root cause, else its container's end), then the first of the
        # others' consequences that names a cause.
        own = sorted((f for f in failures if f.get('first_failure')),
                     key=lambda f: (not f.get('root_cause'), f['code'] in CASCADE_CODES))
        if own:
            lead = own[0]
            parts.append('{0} failed first: {1}: {2} Fix: {3}'.format(where(first['rank']), lead['code'],
                                                                      lead['cause'], lead['fix']))
        rest = [f for f in failures if not f.get('first_failure')]
        rest = sorted(rest, key=lambda f: (f.get('consequence_of') is not None, f.get('category') == 'container',
                                           f['code'] in CASCADE_CODES))
        if rest:
            other = rest[0]
            loc = where(other['rank']) if other.get('rank') is not None else 'group'
            parts.append('{0}{1}: {2}: {3}'.format('consequence: ' if other.get('consequence_of') is not None else '',
                                                   loc, other['code'], other['cause']))
        return '; '.join(parts)
    # No root cause in any log (a peer lost while serving): the first consequence that names a cause, before the
    # cascade's "see the stack trace above" lines.
    roots = ([f for f in failures if f.get('root_cause')] or [f for f in failures if f['code'] not in CASCADE_CODES]
             or failures)
    if roots:
        top = roots[0]
        loc = where(top['rank']) if top.get('rank') is not None else 'group'
        parts.append('{0}: {1}: {2} Fix: {3}'.format(loc, top['code'], top['cause'], top['fix']))
    return '; '.join(parts)
