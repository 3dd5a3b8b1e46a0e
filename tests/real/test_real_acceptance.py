"""`dspark-fleet acceptance` end to end on the real-engine pair (issue #43 part 2): the full qualification, site.yml
with its proof, a short streamed load test through the head's API edge (the key read from the inventory), then the
bundle. Its numbers are recorded in the report; every hardware expectation is not applicable here (no GPU, no RDMA:
the nodes are containers). --kill-rank is left out (a real restart costs minutes on 2 cores; test_real_lmcache.py's
killed worker proves `watch`'s restart).

Run before test_real_engine.py (its killed-worker and stop tests change the group). By hand, on a converged lab:
`DSPARK_LAB_REQUIRED=1 .venv/bin/pytest -q -s tests/real/test_real_acceptance.py`.
"""

import json
import tarfile
import time

from reallab import GROUP, GROUP_VARS, INVENTORY, KEYS, MODEL_NAME, TOKEN_FILE, fleet

from dspark_fleet import acceptance

REQUESTS, CONCURRENCY, MAX_TOKENS = 6, 2, 8


def test_acceptance_on_the_real_pair(tmp_path):
    out = tmp_path / "acceptance"
    started = time.monotonic()
    rc, console = fleet("acceptance", "-i", INVENTORY, "--groups", GROUP, "--output", out, "--state-dir",
                        tmp_path / "state", "--requests", REQUESTS, "--concurrency", CONCURRENCY, "--max-tokens",
                        MAX_TOKENS, "--plain", "--json", timeout=1800)
    took = time.monotonic() - started
    print("\ndspark-fleet acceptance on %s: %.1f s, exit %d" % (GROUP, took, rc))
    doc = json.loads((out / "acceptance.json").read_text())
    steps = dict((s["name"], s) for s in doc["steps"])
    for step in doc["steps"]:
        print("  %-10s %-15s %6.1f s  %s" % (step["name"], step["result"], step["duration_s"], step["summary"]))
    assert [s["name"] for s in doc["steps"]] == list(acceptance.STEPS)
    for name in ("qualify", "site", "load"):
        assert steps[name]["result"] == acceptance.PASSED, (name, steps[name], console[-3000:])
    assert steps["kill_rank"]["result"] == acceptance.SKIPPED

    # The full qualification says what the lab cannot measure, with the qualify role's reason.
    missing = dict((i["what"], i["reason"]) for i in steps["qualify"]["not_applicable"])
    assert "RoCE not checked" in missing["ib_write_bw between every pair of nodes"], missing
    assert steps["qualify"]["verdicts"] == {GROUP: "qualified"}
    assert steps["site"]["proofs"][GROUP]["world_size"] == 2 and steps["site"]["proofs"][GROUP]["result"] == "converged"

    # The load test: every request answered, its numbers recorded.
    target = doc["load"]["targets"][0]
    summary = target["summary"]
    assert target["url"] == "http://10.233.0.11:%d" % GROUP_VARS["dspark_api_port"] and target["model"] == MODEL_NAME
    assert summary["requests"] == REQUESTS and summary["failed"] == 0, summary
    assert summary["ttft_s"]["p50"] > 0 and summary["ttft_s"]["p99"] >= summary["ttft_s"]["p50"]
    assert summary["decode_tokens_per_s"]["p50"] > 0 and summary["output_tokens"] == REQUESTS * MAX_TOKENS, summary

    # Every hardware expectation is not applicable here; the lab's own numbers are still in the table.
    rows = dict((r["id"], r) for r in doc["numbers"])
    for exp in acceptance.EXPECTATIONS:
        if exp["hardware"]:
            assert rows[exp["id"]]["verdict"] == acceptance.NA == "not applicable", rows[exp["id"]]
            assert rows[exp["id"]]["reason"] == acceptance.LAB_NA
    assert rows["decode_tokens_per_s_p50"]["measured"] == summary["decode_tokens_per_s"]["p50"]
    assert rows["failed_requests"]["verdict"] == acceptance.PASS
    assert doc["hardware"]["gpu"] is False and doc["hardware"]["rdma"] is False

    # The bundle: written, every section there, and no secret of the lab inventory in any of its files. realtest
    # converges the real pair only (--limit real_pair): the lab's router runs no HAProxy then, so its view is the one
    # section that may fail, named in the manifest, and the run says so (exit 1); with the whole lab converged
    # (`make lab-real site-real`) every section is there and the run exits 0.
    bundles = steps["bundle"]["bundles"]
    assert [b["group"] for b in bundles] == [GROUP], (bundles, steps["bundle"])
    # The lab's Hugging Face token too (inventories/lab-real reads it as checkpoint_hf_token).
    secrets = list(KEYS) + [TOKEN_FILE.read_text().strip()]
    with tarfile.open(bundles[0]["path"]) as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        files = dict((m.name.split("/", 1)[-1], tar.extractfile(m).read()) for m in members)
    leaked = [name for name, data in files.items() for secret in secrets if secret.encode() in data]
    assert not leaked, leaked
    manifest = json.loads(files["manifest.json"])
    sections = dict((section["name"], section) for section in manifest["sections"])
    assert {"versions", "fabric", "status", "router"} <= set(sections), sorted(sections)
    failed = sorted(name for name, section in sections.items() if not section["ok"])
    assert failed in ([], ["router"]), [sections[name] for name in failed]
    # The bundle carries this run's full qualification (step 1's own report, passed with --qualification).
    qualification = json.loads(files["qualify.json"])
    assert qualification["report"] == str(out / "qualify" / "report.json"), qualification.get("report")
    assert qualification["qualify"]["verdict"] == "qualified" and sections["qualification"]["state"] == "ok"
    if failed:
        assert "HAProxy" in sections["router"]["error"], sections["router"]
        assert steps["bundle"]["result"] == acceptance.FAILED and rc == doc["exit_code"] == 1, steps["bundle"]
    else:
        assert steps["bundle"]["result"] == acceptance.PASSED and rc == doc["exit_code"] == 0, steps["bundle"]

    # No key in the report, the Markdown, the records or any step's log.
    texts = [p.read_text(errors="replace") for p in out.rglob("*") if p.is_file() and p.suffix in (
        ".json", ".md", ".log", "")]
    assert len(texts) > 5
    assert not [k for k in KEYS for t in texts + [console] if k in t]
    assert "| decode tokens/s per request, p50 (" in (out / "acceptance.md").read_text()
