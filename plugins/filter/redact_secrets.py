# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# The work is done by plugins/plugin_utils/redact.py (shared with tp_ranks).

from __future__ import annotations

DOCUMENTATION = r"""
---
name: redact_secrets
short_description: Replace API keys, tokens and URL passwords in log text by [REDACTED]
version_added: 0.1.0
description:
  - >-
    Replaces every given secret, wherever it occurs, and every value shaped like a secret whatever its value (vLLM's
    C(non-default args) entry C('api_key': [...]), an C(--api-key) argument, C(VLLM_API_KEY=...), C(HF_TOKEN=...) and
    the other key/token variables, C(Authorization: Bearer ...), Hugging Face tokens C(hf_...) and the password of
    a C(scheme://user:password@) URL) by C([REDACTED]).
  - The same redaction as the one M(dspark.cluster.tp_ranks) applies to the log lines it keeps.
author:
  - dspark.cluster contributors (@dspark)
positional: secrets
options:
  _input:
    description: The text (a log).
    type: str
    required: true
  secrets:
    description: Known secrets (the group's API keys); values shorter than 4 characters are only redacted where shaped.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Save a rank's log without its API keys
  ansible.builtin.copy:
    dest: /tmp/rank0.log
    content: "{{ docker_logs.stdout | dspark.cluster.redact_secrets(serve_api_keys) }}"
    mode: "0640"
"""

RETURN = r"""
_value:
  description: The text with every secret replaced by C([REDACTED]).
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text


# The logic is imported when the filter runs, not when this file loads: to find a collection's filter, Ansible loads
# every filter file that sorts before it, in every forked worker (docs/design-fleet.md, controller cost).
def redact_secrets(text, secrets=None):
    from ansible_collections.dspark.cluster.plugins.plugin_utils.redact import redact
    if text is None:
        return ''
    if secrets is None:
        secrets = []
    elif isinstance(secrets, str):
        secrets = [secrets]
    elif not isinstance(secrets, (list, tuple)):
        raise AnsibleFilterError('redact_secrets: secrets must be a list of strings, got %s' % type(secrets).__name__)
    return redact(to_text(text, errors='surrogate_or_strict'), [to_text(s) for s in secrets if s is not None])


class FilterModule(object):
    def filters(self):
        return {'redact_secrets': redact_secrets}
