# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/plugin_utils/_tp_signatures.py: failure signatures on fixture logs and single lines, the recipe's hotfix lines,
and the hand-assembled fixtures' torch text against the recordings."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_signatures as tp_signatures

from tp_fixtures import CPU_HEAD, CPU_WORKER, fixture  # noqa: E402


def codes(diagnoses):
    return [(d['code'], d['signature']) for d in diagnoses]


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
    # Recorded in the real-engine lab (vLLM 0.32.0 CPU build, the head of a group with LMCache, issue #45).
    ("  Value error, KV connector LMCacheMPConnector is incompatible with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
     "unless enable_cumem_allocator is also enabled. PyTorch's CUDA VMM allocator can remap KV cache virtual addresses "
     "to different physical pages. [type=value_error, input_value=ArgsKwargs((), {'model_co... 'shutdown_timeout': 0}), "
     "input_type=ArgsKwargs]", 'bad_arguments', 'fatal',
     {'detail': "KV connector LMCacheMPConnector is incompatible with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                "unless enable_cumem_allocator is also enabled. PyTorch's CUDA VMM allocator can remap KV cache "
                "virtual addresses to different physical pages."}),
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
