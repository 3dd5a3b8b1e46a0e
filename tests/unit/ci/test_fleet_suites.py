"""make fleettest runs the fleet-lab suites in an explicit order (FLEET_SUITES): every tests/fleet/test_*.py is in it,
and the bundle's killed rank comes after the suites that need an untouched fleet."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[3]


def fleet_suites():
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    match = re.search(r"^FLEET_SUITES \?= (.*)$", text, re.MULTILINE)
    return match.group(1).split()


def test_every_fleet_suite_runs_once():
    suites = fleet_suites()
    on_disk = sorted("tests/fleet/" + p.name for p in (ROOT / "tests" / "fleet").glob("test_*.py"))
    assert sorted(suites) == on_disk and len(set(suites)) == len(suites)


def test_the_fleet_is_converged_first_and_the_bundle_runs_after_the_router():
    suites = fleet_suites()
    assert suites[0] == "tests/fleet/test_fleet.py"
    assert suites.index("tests/fleet/test_bundle.py") > suites.index("tests/fleet/test_router.py")
    assert suites.index("tests/fleet/test_bundle.py") < suites.index("tests/fleet/test_supervisor.py")
