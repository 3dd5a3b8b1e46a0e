# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The diagnoses and verdicts of a tp_ranks poll, and the result pieces built from them.

Each diagnosis names the rank, the node, the cause and the fix. From the log assessment (``_tp_assess``), from what
the logs cannot show (a node unreachable, docker unusable, a container restarted), at the timeout, and the verdict of
one poll round. No Ansible imports, no I/O.
"""

from __future__ import annotations

from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_assess import endpoint_difference
from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_plan import as_int, log_key
from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_signatures import CASCADE_CODES

# The keys a diagnosis of the rank that failed first, or of a consequence, carries into the result.
FIRST_FAILURE_KEYS = ('first_failure', 'consequence_of', 'exit_code', 'killed', 'finished_at')
# Rounds a fatal-but-secondary failure (peer exited, container stopped) may
# wait for the root cause to show up in another rank's log.
SETTLE_ROUNDS = 3
# Consecutive rounds a node may be unreachable (or the probe broken) before failing.
UNREACHABLE_ROUNDS = 3
# Until every rank registered, the API is probed every this many rounds only: the probe is a module run on the head,
# the costliest part of a round (about 0.3 CPU-s against 0.08 for a member's docker command, measured on the lab
# pair), and before then the group cannot be ready (real vLLM: 41 of the 49 s to its API server).
PROBE_EVERY_WHILE_STARTING = 5
_FIX_RENDEZVOUS = ('Start every node with the same --nnodes, --master-addr (the head\'s fabric IP, reachable from every '
                   'node) and --master-port, a distinct --node-rank and --headless on ranks > 0; open the master port '
                   'on the head and check the fabric link; start all ranks within the distributed timeout.')
_FIX_NCCL_HANG = ('NCCL connects the ranks over the fabric after the store rendezvous; a silent hang there is usually a '
                  'RoCE mismatch on one node: a wrong or shared literal NCCL_IB_GID_INDEX (use NCCL_IB_GID_AUTO=1 or a '
                  'per-node WORKER_NCCL_IB_GID_INDEX), NCCL_IB_HCA naming the wrong port, or NCCL_SOCKET_IFNAME not '
                  'selecting the fabric interface; rerun with NCCL_DEBUG=INFO to see the stalled connection.')
_FIX_RESTART = ('A restarted rank cannot rejoin a running TP group: find the previous boot\'s error, then restart the '
                'head and all workers together (workers first).')


def make_diag(code, rank, node, cause, fix, evidence, severity='fatal', root_cause=True):
    return {'code': code, 'rank': rank, 'node': node, 'cause': cause, 'fix': fix, 'evidence': evidence,
            'severity': severity, 'root_cause': root_cause}


def _from_failure(failure):
    diag = make_diag(failure['code'], failure.get('rank'), failure.get('node'), failure.get('cause'),
                     failure.get('fix'), failure.get('line'), failure.get('severity', 'fatal'),
                     bool(failure.get('root_cause')))
    for key in FIRST_FAILURE_KEYS:
        if failure.get(key) is not None:
            diag[key] = failure[key]
    return diag


# What the API probe reports after a rank died: the head's HTTP 500, no answer, an empty answer, a wedge.
_PROBE_CONSEQUENCES = ('generation_failed', 'generation_timeout', 'generation_empty', 'wedged')


def mark_consequences(diagnoses, first):
    """Diagnoses found outside the logs (the API probe, restarts) that follow from the first-failed rank."""
    if not first:
        return diagnoses
    out = []
    for diag in diagnoses:
        if diag.get('rank') == first['rank'] or diag.get('rank') is None or 'consequence_of' in diag \
                or diag.get('first_failure'):
            out.append(diag)
            continue
        if not diag.get('root_cause') or diag.get('code') in _PROBE_CONSEQUENCES:
            diag = dict(diag, consequence_of=first['rank'])
        out.append(diag)
    return out


def first_failure_order(diag):
    """Sort key: the first-failed rank's diagnoses, then the other root causes, then the consequences (as found)."""
    consequence = diag.get('consequence_of') is not None
    return (not diag.get('first_failure'), consequence, not diag['root_cause'] and not consequence)


def access_diagnoses(plan, observations, unreachable, streaks):
    """Fatal diagnoses for nodes where docker cannot be used or that stay unreachable.

    observations: node -> parse_inspect() result; unreachable: node -> error
    text for this round; streaks: node -> consecutive unreachable rounds.
    """
    out = []
    for member in plan['members']:
        node = member['node']
        rank = log_key(member)
        if node in unreachable:
            if streaks.get(node, 0) >= UNREACHABLE_ROUNDS:
                out.append(make_diag('node_unreachable', rank, node,
                                     'Rank %d\'s node %s could not be reached in %d polls in a row: %s'
                                     % (rank, node, streaks[node], unreachable[node]),
                                     'Check the node is up and reachable with its inventory connection settings.', None))
            continue
        obs = observations.get(node) or {}
        if obs.get('problem') == 'docker_error':
            message = obs.get('message') or ''
            if 'password is required' in message or 'sudo' in message:
                fix = ('Allow the operator user passwordless sudo on %s (or give the become password), or run the '
                       'check without become and add the user to the docker group.' % node)
            elif 'permission denied' in message.lower():
                fix = 'Add the operator user to the docker group on %s, or run the check with become: true.' % node
            else:
                fix = 'Install and start Docker on %s and make it usable by the operator user.' % node
            out.append(make_diag('docker_unavailable', rank, node,
                                 'docker inspect %s on %s failed: %s' % (member['container'], node, message), fix, message))
    return out


_FIX_SIDECAR = ('Restart the group as one unit (playbooks/serve.yml -e serve_force_restart=true, or dspark-fleet watch does '
                'it); read why it stopped first: docker logs %s on %s.')


def sidecar_diagnoses(plan, sidecars):
    """Fatal diagnoses for a container the engine needs beside it (LMCache's server, serve_lmcache) that is missing,
    stopped or unhealthy: vLLM's KV connector waits on it instead of failing, so its logs alone would not say so.

    sidecars: node -> parse_inspect() result with its ``name``; a node whose docker could not be asked is skipped
    (access_diagnoses names it by the engine's container).
    """
    out = []
    for member in plan['members']:
        node = member['node']
        obs = sidecars.get(node)
        if not obs or obs.get('problem') == 'docker_error':
            continue
        rank, name = log_key(member), obs.get('name')
        if not obs.get('exists'):
            cause = 'The container %s beside rank %d on %s is not there (%s).' % (name, rank, node, obs.get('message'))
            code = 'sidecar_missing'
        elif not obs.get('running'):
            cause = ('The container %s beside rank %d on %s is %s (exit code %s%s).'
                     % (name, rank, node, obs.get('state'), obs.get('exit_code'),
                        ', killed for lack of memory' if obs.get('oom_killed') else ''))
            code = 'sidecar_stopped'
        elif obs.get('health') == 'unhealthy':
            cause = 'The container %s beside rank %d on %s fails its health check.' % (name, rank, node)
            code = 'sidecar_unhealthy'
        else:
            continue
        out.append(make_diag(code, rank, node, cause + " The engine's KV connector needs it.", _FIX_SIDECAR % (name, node),
                             obs.get('error')))
    return out


def restart_diagnoses(plan, observations, baselines, assessment):
    """A container that restarted (restart policy, or a new start while polling) breaks the group."""
    previous = {}
    for warning in assessment.get('warnings') or []:
        if warning.get('previous_boot') and warning.get('root_cause'):
            previous.setdefault(warning.get('rank'), warning)
    out = []
    for member in plan['members']:
        node = member['node']
        obs = observations.get(node) or {}
        if not obs.get('exists'):
            continue
        rank = log_key(member)
        base = baselines.get(node) or {}
        count = as_int(obs.get('restart_count')) or 0
        restarted = count > 0
        if base.get('id') == obs.get('id') and base.get('started_at') and obs.get('started_at') != base['started_at']:
            restarted = True
        if not restarted:
            continue
        cause = ('The container %s of rank %d on %s restarted (RestartCount %d, started %s).'
                 % (member['container'], rank, node, count, obs.get('started_at')))
        evidence = None
        earlier = previous.get(rank)
        if earlier:
            cause += ' Its previous boot failed with %s: %s' % (earlier['code'], earlier['cause'])
            evidence = earlier.get('line')
        out.append(make_diag('container_restarted', rank, node, cause, _FIX_RESTART, evidence))
    return out


def assessment_diagnoses(assessment):
    """assess_group failures as diagnoses, the most useful first.

    Root causes before consequences; the head's store-wait timeout goes after
    another rank's root cause (the head only waited for that rank).
    """
    diags = [_from_failure(f) for f in assessment.get('failures') or [] if f.get('severity') == 'fatal']
    roots = [d for d in diags if d['root_cause']]
    others_root = any(d['rank'] not in (0, None) for d in roots)

    def order(diag):
        demoted = diag['code'] == 'rendezvous_timeout' and diag['rank'] == 0 and others_root
        # "See the stack trace above" lines of the worker -> engine -> API cascade go after what names a cause.
        return first_failure_order(diag) + (diag['code'] in CASCADE_CODES, demoted, diag['rank'] is None,
                                            diag['rank'] if diag['rank'] is not None else 0)
    return sorted(diags, key=order)


def timeout_diagnoses(plan, assessment, judgement, timeout, log_sizes=None):
    """Why the group was not ready when the overall timeout ran out.

    log_sizes: {first rank of node: number of log lines seen} (tells a silent
    container from one that logs but never reached the rendezvous).
    """
    log_sizes = log_sizes or {}
    missing = assessment.get('missing_ranks') or []
    nodes = plan['rank_nodes']
    init_by_rank = dict((i['rank'], i) for i in assessment.get('init_methods') or [])
    warn_by_rank = {}
    for warning in assessment.get('warnings') or []:
        if warning.get('category') in ('rendezvous', 'network', 'fabric') and not warning.get('previous_boot'):
            warn_by_rank.setdefault(warning.get('rank'), warning)
    diags = []
    started = assessment.get('nccl_started')
    if missing and started:
        return _nccl_hang_diagnoses(plan, missing, started, warn_by_rank, timeout)
    if missing:
        # Culprits first: ranks that dial another endpoint than rank 0's store, ranks that never dialled the store,
        # then ranks that dialled it and logged trouble, then ranks that dialled it silently; rank 0 hosts the store
        # and only waits for them.
        store = (init_by_rank.get(0) or {}).get('init_method')
        elsewhere = dict((r, i['init_method']) for r, i in init_by_rank.items()
                         if r != 0 and store and i.get('init_method') and i['init_method'] != store)
        for rank in missing:
            node = nodes.get(rank)
            init = init_by_rank.get(rank)
            warning = warn_by_rank.get(rank) or warn_by_rank.get(rank - rank % plan['ranks_per_node'])
            if rank in elsewhere:
                what = endpoint_difference(elsewhere[rank], store)[0]
                cause = ('Rank %d on %s dialled the rendezvous on %s, but rank 0 on %s hosts the store on %s%s: torch '
                         'retried that endpoint silently for %s s (it would for the whole store timeout, 30 min with '
                         'Gloo, 10 with NCCL) and no rank logged an error.'
                         % (rank, node, elsewhere[rank], nodes.get(0), store, ' (%s)' % what if what else '', timeout))
                diag = make_diag('init_method_mismatch', rank, node, cause,
                                 'Use the same --master-addr and --master-port (MASTER_ADDR/MASTER_PORT: '
                                 'dspark_master_port, the head\'s fabric address) on every node of the group.',
                                 init.get('evidence'))
                diag['_prio'] = -1
                diags.append(diag)
                continue
            if warning:
                cause = ('Rank %d on %s did not join the rendezvous%s within %s s; its log says: %s'
                         % (rank, node, ' on %s' % init['init_method'] if init and init.get('init_method') else '',
                            timeout, warning['cause']))
                evidence, prio = warning.get('line'), 1
            elif init and rank == 0:
                others = [r for r in missing if r != 0]
                cause = ('Rank 0 on %s opened the rendezvous store on %s and waited %s s for %s.'
                         % (node, init.get('init_method'), timeout,
                            'rank(s) %s' % ', '.join(str(r) for r in others) if others else 'the group to complete'))
                if elsewhere:
                    cause += ' These ranks dial another endpoint: %s.' % ', '.join(
                        'rank %d on %s dials %s' % (r, nodes.get(r), elsewhere[r]) for r in sorted(elsewhere))
                evidence, prio = init.get('evidence'), 3
            elif init:
                cause = ('Rank %d on %s dialled the rendezvous on %s but never joined within %s s and logged no '
                         'error (packets dropped on the way to the master port, or the store is not reachable from '
                         'this node).' % (rank, node, init.get('init_method'), timeout))
                evidence, prio = init.get('evidence'), 2
            else:
                silent = log_sizes.get(rank - rank % plan['ranks_per_node']) == 0
                cause = ('Rank %d on %s never reached the rendezvous within %s s: %s (hung, still starting, wrong '
                         '--node-rank, or not started).'
                         % (rank, node, timeout, 'its container printed nothing' if silent else
                            'its log has no "world_size=%d rank=%d" line' % (plan['world_size'], rank)))
                evidence, prio = None, 0
            diag = make_diag('rendezvous_timeout', rank, node, cause, _FIX_RENDEZVOUS, evidence)
            diag['_prio'] = prio
            diags.append(diag)
        diags.sort(key=lambda d: (d['_prio'], d['rank']))
        for diag in diags:
            diag.pop('_prio')
        return diags
    head = plan['head']
    if not judgement.get('models_ok'):
        markers = assessment.get('head_markers') or {}
        progress = [name for name in ('available_kv_cache', 'kv_cache_size', 'init_engine', 'api_server_start',
                                      'startup_complete') if markers.get(name)]
        cause = ('All %d ranks registered, but the API on %s did not list the model within %s s (last probe: %s; '
                 'last start-up step in the head log: %s%s).'
                 % (plan['world_size'], head, timeout, judgement.get('state') or 'none',
                    progress[-1] if progress else 'none after the rank assignment', _kv_pending(assessment)))
        last = None
        for name in ('startup_complete', 'api_server_start', 'init_engine', 'kv_cache_size', 'available_kv_cache'):
            if markers.get(name):
                last = markers[name].get('line')
                break
        return [make_diag('api_not_ready', 0, head, cause,
                          'Model load, profiling and graph capture can take 25 minutes: raise timeout, or read the head\'s '
                          'log for a hang.', last)]
    problems = []
    if not assessment.get('init_method_consistent'):
        problems.append('the ranks\' init methods are not all known or not equal')
    if assessment.get('world_size') != plan['world_size']:
        problems.append('the logs show world size %s, expected %d' % (assessment.get('world_size'), plan['world_size']))
    return [make_diag('registration_incomplete', None, None,
                      'The API serves, but the logs never proved the group: %s.' % ('; '.join(problems) or 'unknown'),
                      'Compare the ranks\' "world_size=... rank=..." lines; every node needs the same --master-addr/'
                      '--master-port and --nnodes.', None)]


def _kv_pending(assessment):
    """'; no KV cache allocated yet in the log of: rank R (node), ...' for the logs without their KV cache line.

    A headless worker prints no "ready" line: its KV cache allocation (GPU "Available KV cache memory", CPU
    "... GiB for KV cache on node N") is the last start-up step it logs, so a log without it names the rank that
    holds the engine back.
    """
    pending = ['rank %s (%s)' % (r['rank'], r['node']) for r in assessment.get('ranks') or []
               if not r.get('kv_cache_ready')]
    return '; no KV cache allocated yet in the log of: %s' % ', '.join(pending) if pending else ''


def _nccl_hang_diagnoses(plan, missing, started, warn_by_rank, timeout):
    """Missing ranks after rank 0 created its NCCL communicator: NCCL setup hangs, the rendezvous did not."""
    nodes = plan['rank_nodes']
    diags = []
    for rank in missing:
        node = nodes.get(rank)
        warning = warn_by_rank.get(rank) or warn_by_rank.get(rank - rank % plan['ranks_per_node'])
        cause = ('Rank %d on %s passed the rendezvous store (rank 0 on %s logged "vLLM is using nccl==%s", which needs '
                 'every rank in the store) but the NCCL communicator setup did not finish within %s s: %s'
                 % (rank, node, started.get('node'), started.get('version'), timeout,
                    'its log says: %s' % warning['cause'] if warning else
                    'no error was logged, NCCL waits for a connection that never completes.'))
        diags.append(make_diag('nccl_init_hang', rank, node, cause, _FIX_NCCL_HANG,
                               warning.get('line') if warning else started.get('line')))
    return diags


def where(diag, group=None):
    if diag.get('rank') is None:
        return 'group %s' % group if group else 'group'
    return 'rank %s on %s' % (diag['rank'], diag.get('node') or 'unknown node')


def failure_message(plan, diagnoses, elapsed, limit=3):
    """One-paragraph reason naming rank, node, cause and fix of the first (root-cause) diagnoses.

    When a rank failed first (its container killed or ended first), its diagnoses lead, the other root causes follow,
    and the other ranks' consequences are summed up in one part per rank ("rank 0 on h: lost its peer rank 1
    (consequence: peer_lost, engine_dead)").
    """
    consequences = [d for d in diagnoses if d.get('consequence_of') is not None]
    if any(d.get('first_failure') for d in diagnoses):
        roots = [d for d in diagnoses if d.get('first_failure')] + [
            d for d in diagnoses if d.get('root_cause') and not d.get('first_failure') and d not in consequences]
    else:
        consequences = []
        roots = [d for d in diagnoses if d.get('root_cause')] or list(diagnoses)
    parts = ['%s: %s: %s Fix: %s' % (where(d, plan['group']), d['code'], d['cause'], d['fix']) for d in roots[:limit]]
    by_rank = {}
    for diag in consequences:
        by_rank.setdefault((diag['rank'], diag.get('node'), diag['consequence_of']), []).append(diag['code'])
    for (rank, node, peer), codes in by_rank.items():
        parts.append('rank %s on %s: lost its peer rank %s (consequence: %s)' % (
            rank, node or 'unknown node', peer, ', '.join(sorted(set(codes), key=codes.index))))
    more = len(diagnoses) - min(len(roots), limit) - len(consequences)
    text = 'TP group %s (%d ranks) is not serving after %.1f s: %s' % (
        plan['group'], plan['world_size'], elapsed, ' | '.join(parts) if parts else 'unknown reason')
    if more > 0:
        text += ' (+%d more in diagnosis)' % more
    return text


def success_message(plan, assessment, judgement, served_model_name, elapsed):
    ranks = ', '.join('rank %d on %s' % (r['rank'], r['node']) for r in assessment['registered_ranks'])
    return ('TP group %s ready after %.1f s: %d/%d ranks registered via %s (%s); /v1/models on %s lists %s; '
            'generation probe answered in %ss.' % (
                plan['group'], elapsed, len(assessment['registered_ranks']), plan['world_size'],
                assessment.get('init_method'), ranks, plan['head'], served_model_name,
                judgement.get('generation_seconds')))


def registration_complete(plan, assessment):
    return (not assessment.get('missing_ranks') and bool(assessment.get('init_method_consistent'))
            and assessment.get('world_size') == plan['world_size'])


def probe_due(plan, assessment, rounds_since_probe):
    """Whether this round probes the API: on the first round (rounds_since_probe None: a serving group is proven in one
    round), every round once every rank registered (readiness is always judged on a fresh probe), and before that every
    PROBE_EVERY_WHILE_STARTING rounds (a broken probe or an API answering too early is still seen)."""
    return (rounds_since_probe is None or rounds_since_probe + 1 >= PROBE_EVERY_WHILE_STARTING
            or registration_complete(plan, assessment))


def _with_stall_evidence(failure, assessment):
    """A wedge diagnosis gains the head log's shared-memory broadcast stall line, when there is one."""
    if failure.get('code') != 'wedged' or failure.get('evidence'):
        return failure
    stalls = [w for w in assessment.get('warnings') or [] if w.get('code') == 'rank_stalled']
    if not stalls:
        return failure
    stall = stalls[0]
    out = dict(failure)
    out['evidence'] = stall.get('line')
    out['cause'] += ' Rank %s\'s log on %s shows: %s' % (stall.get('rank'), stall.get('node'), stall.get('cause'))
    return out


def evaluate_round(plan, assessment, judgement, extra, settle):
    """('ready' | 'failed' | 'waiting', diagnoses) for one poll round.

    extra: diagnoses found outside the logs (access, restarts, probe); settle:
    rounds already spent waiting for the root cause of a secondary failure.
    """
    diags = list(extra) + assessment_diagnoses(assessment)
    if judgement.get('failure'):
        diags.append(_with_stall_evidence(judgement['failure'], assessment))
    diags = mark_consequences(diags, assessment.get('first_failure'))
    fatal = [d for d in diags if d['severity'] == 'fatal']
    if fatal:
        fatal.sort(key=first_failure_order)
        if any(d['root_cause'] for d in fatal) or settle >= SETTLE_ROUNDS:
            return 'failed', fatal
        return 'waiting', fatal
    if registration_complete(plan, assessment) and judgement.get('models_ok') and judgement.get('generation') == 'ok':
        return 'ready', []
    return 'waiting', []


# --------------------------------------------------------------------------- result pieces

def registered_view(plan, assessment):
    init_by_rank = dict((i['rank'], i.get('init_method')) for i in assessment.get('init_methods') or [])
    # The node whose log holds the line (the plan's node unless a --node-rank is wrong).
    return [{'rank': r['rank'], 'node': r.get('node') or plan['rank_nodes'].get(r['rank']),
             'evidence': r.get('evidence'), 'world_size': r.get('world_size'), 'tp_rank': r.get('tp_rank'),
             'init_method': init_by_rank.get(r['rank']), 'via': r.get('via')}
            for r in assessment.get('registered_ranks') or []]


def missing_view(plan, assessment):
    return [{'rank': r, 'node': plan['rank_nodes'].get(r)} for r in assessment.get('missing_ranks') or []]


def public_diagnoses(diagnoses):
    keys = ('code', 'rank', 'node', 'cause', 'fix', 'evidence', 'severity')
    out = []
    for diag in diagnoses:
        item = dict((k, diag.get(k)) for k in keys)
        # The rank that failed first (its container's exit code, killed, when it finished), and which rank's failure
        # another rank's error follows from.
        for key in FIRST_FAILURE_KEYS:
            if diag.get(key) is not None:
                item[key] = diag[key]
        out.append(item)
    return out


def warning_view(assessment, limit=20):
    out = []
    for warning in (assessment.get('warnings') or [])[:limit]:
        out.append({'code': warning.get('code'), 'rank': warning.get('rank'), 'node': warning.get('node'),
                    'cause': warning.get('cause'), 'evidence': warning.get('line')})
    return out
