"""plugin_utils/redact.py: known secrets and secret-shaped values leave every log excerpt."""

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils.redact import MARK, redact, redact_lines

KEY = 'sk-lab-0123456789'


def test_vllm_non_default_args_line_keeps_its_other_args():
    line = ("(APIServer pid=1) INFO 11-30 19:00:00 [api_utils.py:273] non-default args: {'model_tag': 'm', "
            "'api_key': ['k-one-aaaa', 'k-two-bbbb'], 'port': 8000}")
    out = redact(line)
    assert 'k-one' not in out and 'k-two' not in out
    assert "'api_key': ['%s']" % MARK in out
    assert "'model_tag': 'm'" in out and "'port': 8000}" in out and 'non-default args: {' in out


@pytest.mark.parametrize('text, leaked', [
    ('exec vllm serve m --api-key k1-aaaa k2-bbbb --port 8000', ['k1-aaaa', 'k2-bbbb']),
    ('exec vllm serve m --api-key=k1-aaaa', ['k1-aaaa']),
    ('VLLM_API_KEY=abcdef123 other', ['abcdef123']),
    ('DSPARK_API_KEYS="a-key-1 a-key-2"', ['a-key-1', 'a-key-2']),
    ('HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz12', ['hf_abcdefghijklmnopqrstuvwxyz12']),
    ('Namespace(api_key=[\'zz-secret\'], port=1)', ['zz-secret']),
    ('{"api_key": "json-secret"}', ['json-secret']),
    ('Authorization: Bearer tok-123456', ['tok-123456']),
    ('using hf_ABCDEFGHIJKLMNOPQRSTUVWX for the hub', ['hf_ABCDEFGHIJKLMNOPQRSTUVWX']),
    ('proxy http://user:p%40ss@proxy:3128 failed', ['p%40ss']),
])
def test_secret_shaped_values(text, leaked):
    out = redact(text)
    assert MARK in out
    for secret in leaked:
        assert secret not in out


def test_known_secrets_anywhere_and_none_kept():
    out = redact('got key %s in a header and %s again' % (KEY, KEY), [KEY, 'ab'])
    assert KEY not in out and out.count(MARK) == 2
    assert redact("'api_key': None", [KEY]) == "'api_key': None"
    # Too short to redact blindly (only in the places above).
    assert redact('abc tables', ['ab']) == 'abc tables'


def test_plain_log_lines_are_unchanged():
    lines = ['INFO 11-30 [parallel_state.py:1402] world_size=2 rank=1 local_rank=0 distributed_init_method=tcp://10.0.0.1:29501',
             'GPU KV cache size: 1,000 tokens', 'max_num_batched_tokens=8192', '']
    assert redact_lines(lines, [KEY]) == lines
    assert redact(None) is None and redact('') == ''


def test_log_buffer_keeps_only_redacted_lines():
    from ansible_collections.dspark.cluster.plugins.plugin_utils._tp_logbuffer import LogBuffer
    buf = LogBuffer(secrets=[KEY])
    chunk = ("2026-11-30T19:00:00.1Z non-default args: {'api_key': ['%s']}\n"
             "2026-11-30T19:00:01.2Z got %s\n" % (KEY, KEY))
    assert buf.add(chunk) == 2
    # The same chunk again (the next poll's overlap) adds nothing: redaction is deterministic.
    assert buf.add(chunk.encode()) == 0
    assert KEY not in buf.text() and KEY not in ''.join(buf.tail())
    assert redact(redact(chunk, [KEY]), [KEY]) == redact(chunk, [KEY])


def test_no_catastrophic_backtracking_on_an_unclosed_list():
    import time
    text = "'api_key': [" + 'a' * 5000 + ' b' * 2000
    start = time.monotonic()
    redact(text * 3)
    assert time.monotonic() - start < 1.0
