"""Shared inputs of the monitoring tests: the role's defaults and a small fleet (two pairs, a router, a supervisor)."""

import pathlib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "monitoring"


def defaults():
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))


def fleet():
    groups = {"dspark": ["a0", "a1", "b0", "b1"], "pair_a": ["a0", "a1"], "pair_b": ["b0", "b1"],
              "dspark_router": ["router"], "dspark_supervisor": ["ctl"], "dspark_monitor": [], "all": []}
    hostvars = {
        "a0": {"dspark_group": "pair_a", "dspark_rank": 0, "ansible_host": "192.0.2.1", "dspark_fabric_interface": "enp1",
               "dspark_fabric_hca": "rocep1", "dspark_fabric_address": "10.77.77.1", "dspark_model": "org/model",
               "dspark_model_revision": "a" * 40, "dspark_image": "img@sha256:" + "1" * 64},
        "a1": {"dspark_group": "pair_a", "dspark_rank": 1, "ansible_host": "192.0.2.2"},
        "b0": {"dspark_group": "pair_b", "dspark_rank": 0, "ansible_host": "192.0.2.3", "dspark_api_port": 8000},
        "b1": {"dspark_group": "pair_b", "dspark_rank": 1, "ansible_host": "192.0.2.4"},
        "router": {"ansible_host": "192.0.2.9"},
        "ctl": {"ansible_host": "192.0.2.8", "supervisor_max_restarts": 4},
    }
    groups["all"] = sorted(hostvars)
    return groups, hostvars
