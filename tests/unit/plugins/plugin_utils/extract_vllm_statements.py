# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Extract the exact vLLM log statements tp_ranks parses from a released wheel (fixtures/vllm_statements/).

    pip download --no-deps vllm==0.33.0 -d /tmp/w && unzip -q /tmp/w/vllm-0.33.0-*.whl 'vllm/*.py' -d /tmp/w/src
    python3 tests/unit/plugins/plugin_utils/extract_vllm_statements.py /tmp/w/src 0.33.0 /tmp/w/vllm-0.33.0-*.whl

Every statement is found by a marker in a given file and stored as the call's format string (logger.* %-style,
or the f-string of a raise, with each {expression} kept as written), its logging call (level), its line and the
function (for info_once: the scope argument, else the logger's default scope of that version).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import hashlib
import json
import os
import re
import sys

# id -> (file under vllm/, marker that the format string must contain[, the call, when the marker is not unique])
STATEMENTS = {
    'world_size_line': ('distributed/parallel_state.py', 'world_size=%d rank=%d local_rank=%d distributed_init_method',
                        'logger.info'),
    'world_size_line_debug': ('distributed/parallel_state.py',
                              'world_size=%d rank=%d local_rank=%d distributed_init_method', 'logger.debug'),
    'rank_assignment': ('distributed/parallel_state.py', 'is assigned as'),
    'nccl_version': ('distributed/device_communicators/pynccl.py', 'vLLM is using nccl=='),
    'headless_launch': ('entrypoints/cli/serve.py', 'headless multiproc executor'),
    'worker_died': ('v1/executor/multiproc_executor.py', 'died unexpectedly'),
    'workerproc_failed_to_start': ('v1/executor/multiproc_executor.py', 'WorkerProc failed to start.'),
    'workerproc_failed': ('v1/executor/multiproc_executor.py', 'WorkerProc failed.'),
    'engine_core_died': ('v1/utils.py', 'Engine core process'),
    'free_memory_low': ('v1/worker/utils.py', 'is less than desired GPU memory utilization'),
    'free_memory_below_budget': ('v1/worker/utils.py', "is less than the engine's budget"),
    'external_weights_exceed': ('v1/worker/utils.py', 'exceed the desired GPU memory utilization'),
    'nnodes_not_divisor': ('engine/arg_utils.py', 'must evenly divide the total'),
    'node_rank_out_of_range': ('engine/arg_utils.py', 'must be between 0 and'),
    'available_kv_cache': ('v1/worker/gpu_worker.py', 'Available KV cache memory'),
    'gpu_kv_cache_size': ('v1/core/kv_cache_utils.py', 'KV cache size: %s tokens'),
}


def _template(node):
    """The format string of a Str / JoinedStr / implicit concatenation, {expressions} kept as source."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(value.value)
            else:
                parts.append('{' + ast.unparse(value.value) + '}')
        return ''.join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left), _template(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def _calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            yield node


def find(src, path, marker, call_name=None):
    with open(os.path.join(src, 'vllm', path)) as handle:
        text = handle.read()
    tree = ast.parse(text)
    for call in _calls(tree):
        template = _template(call.args[0])
        if template is None or marker not in template:
            continue
        func = ast.unparse(call.func)
        if call_name is not None and func != call_name:
            continue
        scope = None
        for keyword in call.keywords:
            if keyword.arg == 'scope':
                scope = ast.literal_eval(keyword.value)
        return {'file': path, 'lineno': call.lineno, 'call': func, 'scope': scope, 'template': template}
    return None


def default_scope(src):
    with open(os.path.join(src, 'vllm', 'logger.py')) as handle:
        match = re.search(r'def info_once\(self, msg: str, \*args: Hashable(?:, scope: LogScope = "(\w+)")?', handle.read())
    return (match.group(1) or 'none (every process)') if match else None


def main():
    src, version, wheel = sys.argv[1], sys.argv[2], sys.argv[3]
    digest = hashlib.sha256()
    with open(wheel, 'rb') as handle:
        for block in iter(lambda: handle.read(1 << 20), b''):
            digest.update(block)
    out = {'origin': 'extracted by tests/unit/plugins/plugin_utils/extract_vllm_statements.py from %s (sha256 %s)'
                     % (os.path.basename(wheel), digest.hexdigest()),
           'vllm': version, 'info_once_default_scope': default_scope(src), 'statements': {}}
    for name, spec in sorted(STATEMENTS.items()):
        out['statements'][name] = find(src, *spec)
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write('\n')


if __name__ == '__main__':
    main()
