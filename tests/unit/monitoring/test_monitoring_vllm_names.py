"""Every vLLM metric name the monitoring role uses exists in vLLM 0.32.0 (the real-engine lab's version), at the file
and line _monitoring_plan.VLLM_METRICS cites: the installed source is re-read. Skipped when no vLLM 0.32.0 source is
found (set DSPARK_VLLM_SRC to its package directory)."""

import glob
import os
import pathlib
import re

import pytest

from ansible_collections.dspark.cluster.plugins.plugin_utils import _monitoring_plan as mp


def _source():
    candidates = [os.environ.get("DSPARK_VLLM_SRC", "")] + sorted(glob.glob("/tmp/tv/lib/python3*/site-packages/vllm"))
    for candidate in candidates:
        if candidate and (pathlib.Path(candidate) / "v1" / "metrics" / "loggers.py").is_file():
            return pathlib.Path(candidate)
    return None


SRC = _source()
pytestmark = pytest.mark.skipif(SRC is None, reason="no vLLM source found (the real-engine lab's venv /tmp/tv, or "
                                                    "DSPARK_VLLM_SRC=<site-packages>/vllm)")


def _version():
    for name in ("_version.py", "version.py"):
        path = SRC / name
        if path.is_file():
            found = re.search(r"""(?:__version__|version)\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", path.read_text())
            if found:
                return found.group(1)
    dist = sorted(glob.glob(str(SRC.parent / "vllm-*.dist-info")))
    return dist[0].rsplit("vllm-", 1)[1].split(".dist-info")[0] if dist else None


def test_the_source_is_vllm_0_32_0():
    assert (_version() or "").startswith(mp.VLLM_VERSION), _version()


@pytest.mark.parametrize("exposed", sorted(mp.VLLM_METRICS))
def test_each_name_is_registered_at_the_cited_line(exposed):
    path, line, registered, kind = mp.VLLM_METRICS[exposed]
    lines = (SRC / path).read_text(encoding="utf-8").splitlines()
    assert 'name="%s"' % registered in lines[line - 1], (path, line, lines[line - 1])
    # The class a few lines above: _gauge_cls, _counter_cls or _histogram_cls.
    block = "\n".join(lines[max(0, line - 3):line])
    assert "_%s_cls(" % kind in block, block
    # prometheus_client exposes a counter with _total appended.
    assert exposed == (registered + "_total" if kind == "counter" else registered)


def test_the_labels_are_model_name_and_engine():
    text = (SRC / "v1" / "metrics" / "loggers.py").read_text(encoding="utf-8")
    assert 'labelnames = ["model_name", "engine"]' in text
    assert mp.VLLM_LABELS == ("model_name", "engine")


def test_the_ttft_buckets_are_vllms_and_the_default_threshold_is_one_of_them():
    text = (SRC / "v1" / "metrics" / "buckets.py").read_text(encoding="utf-8")
    block = text.split("TIME_TO_FIRST_TOKEN_BUCKETS", 1)[1].split(")", 1)[0]
    assert tuple(float(x) for x in re.findall(r"[0-9.]+", block.split("(", 1)[1])) == mp.VLLM_TTFT_BUCKETS
    import yaml
    defaults = yaml.safe_load((pathlib.Path(__file__).resolve().parents[3] / "roles" / "monitoring" / "defaults"
                               / "main.yml").read_text())
    assert float(defaults["monitoring_alert_ttft_p95_seconds"]) in mp.VLLM_TTFT_BUCKETS


def test_metrics_needs_no_api_key():
    """/metrics is outside vLLM's guarded prefixes: the monitor scrapes it without a key."""
    text = (SRC / "entrypoints" / "serve" / "middleware" / "authenticate.py").read_text(encoding="utf-8")
    assert 'GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")' in text
