# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/plugin_utils/_tp_docker.py: the docker commands tp_ranks runs on a member and how it reads `docker inspect`."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import shlex
import subprocess

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _tp_docker as tp_docker


# --------------------------------------------------------------------------- commands

def test_docker_commands_quote():
    cmd = tp_docker.inspect_command('dspark-vllm')
    argv = shlex.split(cmd)
    assert argv[:5] == ['docker', 'inspect', '--type', 'container', '--format']
    assert argv[5] == tp_docker.INSPECT_FORMAT and argv[6] == 'dspark-vllm'
    # Plain commands: become is the member connection's (_tp_connections), never a prefix written here.
    assert shlex.split(tp_docker.logs_command('c 1', 400, None)) == [
        'docker', 'logs', '--timestamps', '--tail', '400', 'c 1', '2>&1']
    assert shlex.split(tp_docker.logs_command('c', 40, '2026-11-29T18:40:01.5Z')) == [
        'docker', 'logs', '--timestamps', '--since', '2026-11-29T18:40:01.5Z', '--tail', '40', 'c', '2>&1']
    key = shlex.split(tp_docker.key_lines_command('c'))
    assert key[:6] == ['docker', 'logs', '--timestamps', 'c', '2>&1', '|']
    assert key[-4:] == ['|', 'tail', '-n', str(tp_docker.KEY_LINES_MAX)]
    assert [key[i + 1] for i, tok in enumerate(key) if tok == '-e'] == list(tp_docker.KEY_LINE_NEEDLES)


def test_key_lines_command_runs_in_a_real_shell(tmp_path):
    # A stand-in `docker` proves the pipeline and its quoting work in sh.
    fake = tmp_path / 'docker'
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "T1 world_size=2 rank=0 x" "T2 noise" "T3 Application startup complete."\n')
    fake.chmod(0o755)
    out = subprocess.run(['sh', '-c', tp_docker.key_lines_command('dspark-vllm')], capture_output=True, text=True,
                         env={'PATH': '%s:/usr/bin:/bin' % tmp_path}, check=True).stdout
    assert out.splitlines() == ['T1 world_size=2 rank=0 x', 'T3 Application startup complete.']


# --------------------------------------------------------------------------- parse_inspect

RUNNING_STATE = {'Status': 'running', 'Running': True, 'Paused': False, 'Restarting': False, 'OOMKilled': False,
                 'Dead': False, 'Pid': 4242, 'ExitCode': 0, 'Error': '',
                 'StartedAt': '2026-11-29T18:39:48.5Z', 'FinishedAt': '0001-01-01T00:00:00Z'}


def test_parse_inspect_formatted_output():
    text = json.dumps({'Id': 'abc', 'Name': '/dspark-vllm', 'RestartCount': 0, 'Image': 'img:1',
                       'State': RUNNING_STATE}) + '\n'
    obs = tp_docker.parse_inspect(0, text)
    assert obs['exists'] and obs['running'] and obs['state'] == 'running'
    assert (obs['id'], obs['name'], obs['image'], obs['restart_count'], obs['exit_code']) == (
        'abc', 'dspark-vllm', 'img:1', 0, 0)
    assert obs['started_at'] == '2026-11-29T18:39:48.5Z' and obs['problem'] is None


def test_parse_inspect_full_docker_inspect_list():
    full = [{'Id': 'f' * 64, 'Created': '2026-11-29T18:39:47Z', 'Path': 'vllm', 'Args': ['serve'],
             'State': dict(RUNNING_STATE, Status='exited', Running=False, ExitCode=137, OOMKilled=True, Pid=0),
             'Image': 'sha256:' + 'e' * 64, 'Name': '/dspark-vllm', 'RestartCount': 2,
             'Config': {'Image': 'ghcr.io/anemll/dspark-vllm-gx10:0.1.1', 'Env': ['HF_TOKEN=secret']}}]
    obs = tp_docker.parse_inspect(0, json.dumps(full, indent=4))
    assert obs['state'] == 'exited' and not obs['running'] and obs['exit_code'] == 137
    assert obs['oom_killed'] is True and obs['restart_count'] == 2
    assert obs['image'] == 'ghcr.io/anemll/dspark-vllm-gx10:0.1.1'
    assert 'secret' not in json.dumps(obs)


@pytest.mark.parametrize('rc, out, err, problem, state', [
    (1, '', 'Error: No such container: dspark-vllm', 'missing', 'missing'),
    (1, '', 'Error: No such object: dspark-vllm', 'missing', 'missing'),
    (0, '[]', '', 'missing', 'missing'),
    (1, '', 'permission denied while trying to connect to the Docker daemon socket', 'docker_error', None),
    (127, '', 'sh: 1: docker: not found', 'docker_error', None),
    (1, '', 'sudo: a password is required', 'docker_error', None),
    (0, 'garbage', '', 'docker_error', None),
])
def test_parse_inspect_problems(rc, out, err, problem, state):
    obs = tp_docker.parse_inspect(rc, out, err)
    assert obs['exists'] is False and obs['problem'] == problem and obs['state'] == state
    assert obs['message']
