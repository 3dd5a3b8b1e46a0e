# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A become plugin for tests only (ANSIBLE_BECOME_PLUGINS or become_loader.add_directory): it runs the command under
``env DSPARK_FAKE_BECAME=<become_user>``, so a command shows whose become wrapped it, without sudo on the machine."""

from __future__ import annotations

from ansible.plugins.become import BecomeBase

DOCUMENTATION = """
name: fake_root
short_description: test only
description: Marks the command with the become user instead of changing user.
author: dspark.cluster contributors (@dspark)
options:
  become_user:
    description: The user the command is marked with.
    default: root
    ini:
      - section: privilege_escalation
        key: become_user
    vars:
      - name: ansible_become_user
    keyword:
      - name: become_user
"""


class BecomeModule(BecomeBase):
    name = "fake_root"

    def build_become_command(self, cmd, shell):
        super().build_become_command(cmd, shell)
        if not cmd:
            return cmd
        return "env DSPARK_FAKE_BECAME=%s %s" % (self.get_option("become_user"), self._build_success_command(cmd, shell))
