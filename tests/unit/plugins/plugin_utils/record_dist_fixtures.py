# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Record real torch c10d / Gloo / NCCL output for the tp_ranks fixtures (fixtures/real/).

Runs on a machine with two GPUs, torch and NCCL (no vLLM needed); every scenario starts its ranks as separate
processes, like vLLM's workers, and keeps each process's stdout+stderr as printed:

    OUT=/tmp/rec python3 tests/unit/plugins/plugin_utils/record_dist_fixtures.py

Writes $OUT/<scenario>.rank<R>.log and $OUT/manifest.json (torch/NCCL versions, host, every scenario's
environment and command line). tests/unit/plugins/plugin_utils/fixtures/real/ holds the files of one such run, each
with a first line naming its origin. NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and friends).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import socket
import subprocess
import sys
import time

# The repository root (commands are recorded relative to it).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
SAFE_ENV = {'NCCL_NVLS_ENABLE': '0', 'TORCH_SYMM_MEM_DISABLE_MULTICAST': '1', 'NVSHMEM_DISABLE_NVLS': '1',
            'PYTHONUNBUFFERED': '1'}
# NCCL over sockets on the loopback, as between two nodes (no P2P/SHM/IB inside one host).
NET_ONLY = {'NCCL_P2P_DISABLE': '1', 'NCCL_SHM_DISABLE': '1', 'NCCL_IB_DISABLE': '1', 'NCCL_SOCKET_IFNAME': 'lo',
            'GLOO_SOCKET_IFNAME': 'lo', 'NCCL_CUMEM_ENABLE': '0'}


def free_port():
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


# ----------------------------------------------------------------------------------------- worker side

def worker(scenario, rank, world, addr, port, timeout):
    import datetime
    import torch
    import torch.distributed as dist

    def say(msg):
        print('[recorder rank %d] %s' % (rank, msg), flush=True)

    backend = 'gloo' if scenario.startswith('gloo') else 'nccl'
    if backend == 'nccl':
        torch.cuda.set_device(rank % max(1, torch.cuda.device_count()))
    say('init_process_group backend=%s init_method=tcp://%s:%d world_size=%d rank=%d timeout=%ds'
        % (backend, addr, port, world, rank, timeout))
    dist.init_process_group(backend, init_method='tcp://%s:%d' % (addr, port), world_size=world, rank=rank,
                            timeout=datetime.timedelta(seconds=timeout))
    say('store rendezvous done')
    if backend == 'nccl':
        dev = torch.device('cuda', torch.cuda.current_device())
        cpu_group = dist.new_group(backend='gloo')
        say('gloo group created')
        if scenario == 'nccl_unique_id_wait' and rank == 0:
            say('alive but never starting NCCL (no collective)')
            time.sleep(timeout + 30)
            os._exit(0)
        data = torch.ones(4, device=dev)
        dist.all_reduce(data)
        torch.cuda.synchronize()
        say('first all_reduce = %s' % data.tolist())
        if scenario in ('nccl_peer_gone', 'nccl_watchdog_timeout'):
            dist.barrier(group=cpu_group)
            if rank == 1:
                if scenario == 'nccl_peer_gone':
                    say('exiting without a word (os._exit)')
                    os._exit(3)
                say('alive but not joining the next collective')
                time.sleep(timeout + 60)
                os._exit(0)
            time.sleep(1)
            for step in range(1000):
                data = torch.ones(1 << 20, device=dev)
                dist.all_reduce(data)
                torch.cuda.synchronize()
                if step == 0:
                    say('second all_reduce returned')
    else:
        data = torch.ones(4)
        dist.all_reduce(data)
        say('gloo all_reduce = %s' % data.tolist())
    dist.destroy_process_group()
    say('done')


def nccl_bootstrap_worker(addr, port):
    """Rank 1 of a 2-rank NCCL communicator whose root (rank 0) never starts: vLLM's pynccl path, via ctypes."""
    import ctypes
    import torch
    torch.cuda.set_device(0)
    torch.zeros(1, device='cuda')
    lib = None
    for cand in ('libnccl.so.2', 'libnccl.so'):
        try:
            lib = ctypes.CDLL(cand)
            break
        except OSError:
            continue
    if lib is None:
        import glob
        for path in glob.glob(os.path.join(os.path.dirname(torch.__file__), '..', 'nvidia', 'nccl', 'lib', 'libnccl.so*')):
            lib = ctypes.CDLL(path)
            break

    class UniqueId(ctypes.Structure):
        _fields_ = [('internal', ctypes.c_byte * 128)]

    version = ctypes.c_int()
    lib.ncclGetVersion(ctypes.byref(version))
    print('[recorder rank 1] libnccl version code %d, NCCL_COMM_ID=%s' % (version.value, os.environ.get('NCCL_COMM_ID')),
          flush=True)
    uid = UniqueId()
    res = lib.ncclGetUniqueId(ctypes.byref(uid))
    print('[recorder rank 1] ncclGetUniqueId -> %d' % res, flush=True)
    comm = ctypes.c_void_p()
    res = lib.ncclCommInitRank(ctypes.byref(comm), 2, uid, 1)
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    lib.ncclGetLastError.restype = ctypes.c_char_p
    print('[recorder rank 1] ncclCommInitRank -> %d (%s); last error: %s'
          % (res, lib.ncclGetErrorString(res).decode(), (lib.ncclGetLastError(None) or b'').decode()), flush=True)


# ----------------------------------------------------------------------------------------- driver side

def scenarios(addr_port):
    """name -> (list of (rank, extra env, argv tail)), notes."""
    out = {}

    def ranks(name, world, which, env, timeout=20, addr='127.0.0.1', port=None):
        port = port or addr_port()
        out[name] = [(r, env, ['worker', name, str(r), str(world), addr, str(port), str(timeout)]) for r in which]
        return port

    ranks('healthy_nccl', 2, [0, 1], dict(NET_ONLY, NCCL_DEBUG='INFO'))
    ranks('healthy_nccl_default', 2, [0, 1], {})
    ranks('client_never_joins', 2, [0], {}, timeout=15)
    ranks('master_refused', 2, [1], {}, timeout=15)
    ranks('master_unroutable', 2, [1], {}, timeout=15, addr='192.0.2.1')
    ranks('master_wrong_name', 2, [1], {}, timeout=15, addr='head-does-not-resolve.invalid')
    out['port_in_use'] = None       # filled by the driver (needs a held port)
    ranks('nccl_wrong_iface', 2, [0, 1], {'NCCL_SOCKET_IFNAME': 'nosuchif0', 'NCCL_DEBUG': 'WARN'})
    ranks('nccl_wrong_iface_default', 2, [0, 1], {'NCCL_SOCKET_IFNAME': 'nosuchif0'})
    ranks('gloo_wrong_iface', 2, [0, 1], {'GLOO_SOCKET_IFNAME': 'nosuchif0'})
    ranks('nccl_peer_gone', 2, [0, 1], dict(NET_ONLY, NCCL_DEBUG='WARN'), timeout=30)
    ranks('nccl_watchdog_timeout', 2, [0, 1], dict(NET_ONLY, NCCL_DEBUG='WARN'), timeout=15)
    ranks('nccl_unique_id_wait', 2, [0, 1], {}, timeout=15)
    return out


def main():
    outdir = os.environ.get('OUT') or '/tmp/dist-fixtures'
    os.makedirs(outdir, exist_ok=True)
    used = set()

    def addr_port():
        while True:
            port = free_port()
            if port not in used:
                used.add(port)
                return port

    table = scenarios(addr_port)
    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
    held.bind(('0.0.0.0', 0))
    held.listen(1)
    held_port = held.getsockname()[1]
    table['port_in_use'] = [(0, {}, ['worker', 'port_in_use', '0', '2', '127.0.0.1', str(held_port), '15'])]
    boot_port = addr_port()
    table['nccl_bootstrap_refused'] = [(1, {'NCCL_COMM_ID': '127.0.0.1:%d' % boot_port, 'NCCL_DEBUG': 'WARN',
                                            'NCCL_SOCKET_IFNAME': 'lo'}, ['nccl_bootstrap', '127.0.0.1', str(boot_port)])]
    boot_port = addr_port()
    table['nccl_bootstrap_refused_info'] = [(1, {'NCCL_COMM_ID': '127.0.0.1:%d' % boot_port, 'NCCL_DEBUG': 'INFO',
                                                 'NCCL_SOCKET_IFNAME': 'lo', 'NCCL_SOCKET_RETRY_CNT': '4'},
                                             ['nccl_bootstrap', '127.0.0.1', str(boot_port)])]
    boot_port = addr_port()
    table['nccl_bootstrap_unroutable'] = [(1, {'NCCL_COMM_ID': '192.0.2.1:%d' % boot_port, 'NCCL_DEBUG': 'WARN',
                                               'NCCL_SOCKET_RETRY_CNT': '4'},
                                           ['nccl_bootstrap', '192.0.2.1', str(boot_port)])]
    only = set(sys.argv[1:])

    import torch
    manifest = {'host': socket.gethostname(), 'python': sys.version.split()[0], 'torch': torch.__version__,
                'nccl': '.'.join(str(x) for x in torch.cuda.nccl.version()) if torch.cuda.is_available() else None,
                'gpus': [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
                'interfaces': [name for _i, name in socket.if_nameindex()],
                'started': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), 'scenarios': {}}
    procs = []
    for name, plan in sorted(table.items()):
        if only and name not in only:
            continue
        for rank, extra, argv in plan:
            env = dict(os.environ)
            env.update(SAFE_ENV)
            env.update(extra)
            cmd = [sys.executable, os.path.abspath(__file__)] + argv
            path = os.path.join(outdir, '%s.rank%d.log' % (name, rank))
            handle = open(path, 'wb')
            proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env)
            shown_env = dict(SAFE_ENV)
            shown_env.update(extra)
            manifest['scenarios'].setdefault(name, []).append({
                'rank': rank, 'env': shown_env, 'command': ' '.join(['python3', os.path.relpath(os.path.abspath(__file__), ROOT)] + argv),
                'log': os.path.basename(path)})
            procs.append((name, rank, proc, handle, time.time()))
            time.sleep(0.2)
    limit = float(os.environ.get('RECORD_LIMIT', '150'))
    for name, rank, proc, handle, started in procs:
        try:
            proc.wait(timeout=max(1, limit - (time.time() - started)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        handle.close()
        for item in manifest['scenarios'][name]:
            if item['rank'] == rank:
                item['exit_code'] = proc.returncode
                item['seconds'] = round(time.time() - started, 1)
    held.close()
    with open(os.path.join(outdir, 'manifest.json'), 'w') as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
    print(json.dumps(manifest, indent=1, sort_keys=True))


if __name__ == '__main__':
    if len(sys.argv) > 1 and sys.argv[1] == 'worker':
        name, rank, world, addr, port, timeout = sys.argv[2:8]
        worker(name, int(rank), int(world), addr, int(port), int(timeout))
    elif len(sys.argv) > 1 and sys.argv[1] == 'nccl_bootstrap':
        nccl_bootstrap_worker(sys.argv[2], int(sys.argv[3]))
    else:
        main()
