"""A rolling reprovision of the REAL group through the lab's router under load (issue #24): the real-engine lab's
whole inventory (real_pair, the simulated sim_pair beside it and the router spark-rrouter) converged, then
`dspark-fleet reprovision --rolling --groups real_pair`, qualification before the drain included (the fleet lab's roll
skips it). In `make realtest`, after the whole lab's converge and before test_real_engine.py (whose last test stops
the group).
"""

import json

import loadclient
import rollcheck
from reallab import GROUP, INVENTORY, KEYS, MODEL_NAME, ROUTER_URL, SIM_GROUP, fleet

# Through the router during the roll: about one request a second, half streamed, 16 tokens each (the real engine
# answers in under a second; the simulated group in about one).
ROLL_RATE = 1.0


def test_rolling_reprovision_through_the_router_loses_no_request(tmp_path):
    """The real group and the simulated one behind the lab's router, under a steady load with the real key:
    `dspark-fleet reprovision --rolling --groups real_pair` (restart forced) drains the real group, restarts it (a
    real engine start), proves it and puts it back while the simulated group serves. Zero failed requests, every
    answer and stream complete, none sent to the real group while it was out, both groups answered; the report has
    its time out of rotation. (Rolling the simulated group too costs 150 s more and is the fleet suite's test.)"""
    load = loadclient.Load(ROUTER_URL, count=int(ROLL_RATE * 1800), rate=ROLL_RATE, model=MODEL_NAME, api_key=KEYS[0],
                           max_tokens=16, expect=None)
    (rc, out), records = rollcheck.under_load(load, lambda: fleet(
        "reprovision", "-i", INVENTORY, "--rolling", "--groups", GROUP, "--plain", "--artifacts", tmp_path / "roll",
        "-e", '{"serve_force_restart": true}'))
    assert rc == 0, out[-4000:]
    doc = json.loads((tmp_path / "roll" / "report.json").read_text())
    # Qualified before it was drained (the fleet suite's roll skips this step: it is proven here).
    assert doc["groups"][GROUP]["qualify"]["verdict"] == "qualified", doc["groups"][GROUP].get("qualify")
    summary, out_of_rotation = rollcheck.assert_rolled(doc, records, [GROUP], min_sent=30, serving=[GROUP, SIM_GROUP])
    print("\nrolling reprovision through the router: %d requests, 0 failed; out of rotation (s): %s"
          % (summary["sent"], out_of_rotation))
    for secret in KEYS:
        assert secret not in out, "a key in dspark-fleet's output"
