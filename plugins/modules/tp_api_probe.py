#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: tp_api_probe
short_description: Look once at the vLLM API on the host's own loopback (health, models, one optional generation)
version_added: 0.1.0
description:
  - Calls C(GET /health) and C(GET /v1/models) on C(http://127.0.0.1:<port>) of the target host and returns what each
    answered (HTTP status, error, whether it timed out, seconds) and the model ids C(/v1/models) lists.
  - With O(generate), and only when C(/v1/models) lists O(model), sends one C(POST /v1/chat/completions) of
    O(max_tokens) tokens and returns its status, number of choices and the first choice's content. When that request
    times out, C(/health) is asked once more (a wedged tensor-parallel group still answers it).
  - Never fails on an API answer (refused, HTTP errors, timeouts are results); the caller judges them. The
    C(dspark.cluster.tp_ranks) action runs it on a serving group's head every poll round.
author:
  - dspark.cluster contributors (@dspark)
options:
  port:
    description: Port of the API on the host's loopback.
    type: int
    required: true
  model:
    description: The served model name the generation request asks for (C(--served-model-name)).
    type: str
    required: true
  generate:
    description: Send the one generation request when C(/v1/models) lists O(model).
    type: bool
    default: false
  generation_timeout:
    description: Seconds the generation request may take.
    type: float
    default: 60
  max_tokens:
    description: Tokens the generation request asks for.
    type: int
    default: 16
  prompt:
    description: The user message of the generation request.
    type: str
    default: Reply with OK.
  health_timeout:
    description: Seconds C(GET /health) may take.
    type: float
    default: 5
  models_timeout:
    description: Seconds C(GET /v1/models) may take.
    type: float
    default: 10
  api_key:
    description: API key of the server (C(--api-key)), sent as a bearer token; never returned.
    type: str
extends_documentation_fragment:
  - dspark.cluster.read_only
attributes:
  platform:
    support: full
    platforms: posix
    description: The host running the API server (a serving group's head).
notes:
  - The generation request makes the model generate O(max_tokens) tokens but changes no state; the module runs the
    same way in check mode.
  - Proxies are ignored; only the loopback is called.
"""

EXAMPLES = r"""
- name: Is the API up and does it list the model?
  dspark.cluster.tp_api_probe:
    port: 8888
    model: deepseek-v4-flash-0731
  register: api

- name: One real generation request, with the server's API key
  dspark.cluster.tp_api_probe:
    port: 8888
    model: deepseek-v4-flash-0731
    generate: true
    generation_timeout: 60
    api_key: "{{ vault_dspark_api_key }}"
  register: api_generation
"""

RETURN = r"""
health:
  description: What C(GET /health) answered.
  returned: always
  type: dict
  contains:
    status:
      description: HTTP status, null when there was no answer.
      type: int
    error:
      description: Why there was no answer (exception and reason), else null.
      type: str
    timed_out:
      description: The call ran into its timeout.
      type: bool
    seconds:
      description: Seconds the call took.
      type: float
  sample: {"status": 200, "error": null, "timed_out": false, "seconds": 0.002}
models:
  description: What C(GET /v1/models) answered, as RV(health) plus C(ids) (the listed model ids, null without a model
    list) and C(text) (the start of an unexpected answer).
  returned: always
  type: dict
  sample: {"status": 200, "error": null, "timed_out": false, "seconds": 0.003, "ids": ["deepseek-v4-flash-0731"]}
chat:
  description: What the generation request answered, as RV(health) plus C(choices) (their number, null without a
    list), C(content) and C(finish_reason) of the first choice, C(text) (the start of an answer without choices).
  returned: when O(generate) is true and RV(models) lists O(model)
  type: dict
  sample: {"status": 200, "error": null, "timed_out": false, "seconds": 0.41, "choices": 1, "content": "OK",
           "finish_reason": "stop"}
health_after:
  description: C(GET /health) once more after a generation request that timed out, as RV(health).
  returned: when the generation request timed out
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dspark.cluster.plugins.module_utils.tp_api_probe import probe

ARGUMENT_SPEC = dict(
    port=dict(type='int', required=True),
    model=dict(type='str', required=True),
    generate=dict(type='bool', default=False),
    generation_timeout=dict(type='float', default=60),
    max_tokens=dict(type='int', default=16, no_log=False),
    prompt=dict(type='str', default='Reply with OK.'),
    health_timeout=dict(type='float', default=5),
    models_timeout=dict(type='float', default=10),
    api_key=dict(type='str', no_log=True),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    if not 0 < module.params['port'] < 65536:
        module.fail_json(msg='port=%d is not a TCP port' % module.params['port'])
    result = probe(module.params)
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()
