"""tests/ci/role_docs.py: the role README variable tables rendered from meta/argument_specs.yml, and the drift check."""

import importlib.util
import pathlib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("role_docs", ROOT / "tests" / "ci" / "role_docs.py")
role_docs = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(role_docs)

SPECS = {
    "main": {
        "short_description": "Do one thing.",
        "options": {
            "demo_port": {"type": "int", "default": 8080, "description": "Port of C(demo)."},
            "demo_hosts": {"type": "list", "elements": "str", "default": ["a", "b"],
                           "description": ["Hosts,", "one per | line."]},
            "demo_mode": {"type": "str", "default": "fast", "choices": ["fast", "slow"], "description": "Mode."},
            "demo_token": {"type": "str", "default": "", "no_log": True, "description": "Token."},
            "demo_flag": {"type": "bool", "default": False, "description": "A I(flag)."},
        },
    },
}


def make_role(root, name, specs, readme=None):
    role = root / "roles" / name
    (role / "meta").mkdir(parents=True)
    (role / "meta" / "argument_specs.yml").write_text(yaml.safe_dump({"argument_specs": specs}, sort_keys=False), encoding="utf-8")
    if readme is not None:
        (role / "README.md").write_text(readme, encoding="utf-8")
    return role


def test_a_table_row_per_option_in_spec_order_with_type_default_and_description():
    lines = role_docs.render(SPECS).splitlines()
    assert lines[0] == role_docs.BEGIN and lines[-1] == role_docs.END
    assert "| Variable | Type | Default | Description |" in lines
    rows = [line for line in lines if line.startswith("| `")]
    assert rows == [
        "| `demo_port` | int | `8080` | Port of `demo`. |",
        "| `demo_hosts` | list of str | `[\"a\", \"b\"]` | Hosts, one per \\| line. |",
        "| `demo_mode` | str | `\"fast\"` | Mode. Choices: `\"fast\"`, `\"slow\"`. |",
        "| `demo_token` | str | `\"\"` | Token. Secret: never logged. |",
        "| `demo_flag` | bool | `false` | A *flag*. |",
    ]
    # A single main entry point needs no heading of its own.
    assert not any(line.startswith("### ") for line in lines)


def test_required_options_and_further_entry_points():
    specs = {
        "status": {"short_description": "Read it.", "options": {}},
        "drain": {"short_description": "Drain one.",
                  "options": {"demo_target": {"type": "str", "required": True, "description": "Group."}}},
        "main": SPECS["main"],
    }
    text = role_docs.render(specs)
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    assert headings == ["### Entry point `main`", "### Entry point `drain` (`tasks_from: drain`)",
                        "### Entry point `status` (`tasks_from: status`)"]
    assert "| `demo_target` | str | (required) | Group. |" in text
    assert "Read it.\n\nNo variables." in text


def test_check_names_the_role_and_the_fix_then_write_repairs_it(tmp_path, capsys):
    make_role(tmp_path, "demo", SPECS, readme="# demo\n\nHand-written text.\n")
    make_role(tmp_path, "other", SPECS)
    assert role_docs.main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "demo: roles/demo/README.md needs exactly one" in err
    assert "other: roles/other/README.md is missing" in err
    assert err.count("Fix: run python tests/ci/role_docs.py --write") == 2

    assert role_docs.main(["--write", "--root", str(tmp_path)]) == 0
    demo = (tmp_path / "roles" / "demo" / "README.md").read_text(encoding="utf-8")
    assert demo.startswith("# demo\n\nHand-written text.\n\n## Role variables\n\n" + role_docs.BEGIN)
    other = (tmp_path / "roles" / "other" / "README.md").read_text(encoding="utf-8")
    assert other.startswith("# dspark.cluster.other\n\nDo one thing.\n")
    assert role_docs.main(["--root", str(tmp_path)]) == 0


def test_drift_is_found_and_only_the_block_is_rewritten(tmp_path, capsys):
    readme = "# demo\n\nBefore.\n\n%s\n\nAfter.\n" % role_docs.render(SPECS)
    role = make_role(tmp_path, "demo", SPECS, readme=readme)
    assert role_docs.main(["--root", str(tmp_path)]) == 0
    changed = {"main": {"options": dict(SPECS["main"]["options"], demo_port={"type": "int", "default": 9090})}}
    (role / "meta" / "argument_specs.yml").write_text(yaml.safe_dump({"argument_specs": changed}, sort_keys=False), encoding="utf-8")
    assert role_docs.main(["--root", str(tmp_path)]) == 1
    assert "demo: the variable table in roles/demo/README.md differs" in capsys.readouterr().err
    assert role_docs.main(["--write", "--root", str(tmp_path), "demo"]) == 0
    text = (role / "README.md").read_text(encoding="utf-8")
    assert text.startswith("# demo\n\nBefore.\n\n") and text.endswith("\n\nAfter.\n")
    assert "| `demo_port` | int | `9090` |  |" in text


def test_every_role_of_the_collection_is_up_to_date():
    assert role_docs.main(["--check"]) == 0
