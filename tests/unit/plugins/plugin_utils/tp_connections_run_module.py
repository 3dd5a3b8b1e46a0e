# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs modules through MemberConnections.run_module in a process of its own (a helper of test_tp_connections.py).

Building a module payload needs Ansible's collection loader, which ansible-playbook installs and a plain pytest
process does not: this process installs it the way ansible-test's pytest plugin does, so the test process keeps its
own imports. Reads {"hostvars", "own_host", "delegate_to", "calls": [[host, module, args], ...]} as JSON on stdin,
writes the list of results as JSON.
"""

from __future__ import annotations

import json
import os
import sys

COLLECTIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', '..', 'collections')


def main():
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
    _AnsibleCollectionFinder(paths=[os.path.abspath(COLLECTIONS)])._install()  # pylint: disable=protected-access

    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.play_context import PlayContext
    from ansible.playbook.task import Task
    from ansible.plugins.loader import action_loader
    from ansible.template import Templar
    from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_connections import MemberConnections

    spec = json.load(sys.stdin)
    task = Task()
    task.args = {}
    task.delegate_to = spec.get('delegate_to')
    # The running action (without a connection of its own: every module here runs on a member connection).
    action = action_loader.get('ansible.legacy.normal', task=task, connection=None, play_context=PlayContext(),
                               loader=DataLoader(), templar=Templar(loader=DataLoader()), shared_loader_obj=None)
    members = MemberConnections(action, spec['hostvars'], spec.get('own_host'))
    try:
        results = [members.run_module(host, module, args) for host, module, args in spec['calls']]
    finally:
        members.close()
    facts = dict((host, found['ansible_facts']) for host, found in members._module_vars.items())  # pylint: disable=protected-access
    json.dump({'results': results, 'facts': facts}, sys.stdout, default=str)


if __name__ == '__main__':
    main()
