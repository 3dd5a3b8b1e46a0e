"""tests/ci/fleet_readme.py: tools/dspark-fleet/README.md names every subcommand and every module of dspark-fleet."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("fleet_readme", ROOT / "tests" / "ci" / "fleet_readme.py")
fleet_readme = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(fleet_readme)

CLI = '''"""A fake cli.py."""
import argparse

from . import extra


def build_parser():
    parser = argparse.ArgumentParser(prog="dspark-fleet")
    sub = parser.add_subparsers(dest="subcommand")
    sub.add_parser("plan", help="what would change")
    rep = sub.add_parser("reprovision", help="converge")
    rep.add_argument("--rolling", action="store_true")
    extra.add_parser(sub)
    return parser
'''
EXTRA = '''"""A module that adds its own subcommand, as acceptance.py and bundle.py do."""


def add_parser(sub):
    return sub.add_parser("extra", help="more")
'''


def readme(subs, mods):
    rows = "".join("| `%s` | runs it | ok |\n" % name for name in subs)
    code = "".join("| `%s` | does it |\n" % name for name in mods)
    return ("# dspark-fleet\n\n## Subcommands and options\n\n| Subcommand | Runs | Result per group |\n"
            "| --- | --- | --- |\n%s\n### Order\n\nText naming `watch` and `locks.py` outside the tables.\n\n"
            "## Code\n\n| Module | Does |\n| --- | --- |\n%s\nTests: `tests/unit/fleet/`.\n" % (rows, code))


def make_tool(root, text):
    package = root / "tools" / "dspark-fleet" / "dspark_fleet"
    package.mkdir(parents=True)
    for name, source in {"__init__.py": '"""pkg."""\n', "__main__.py": "", "cli.py": CLI, "extra.py": EXTRA,
                         "locks.py": '"""locks."""\n'}.items():
        (package / name).write_text(source, encoding="utf-8")
    if text is not None:
        (root / "tools" / "dspark-fleet" / "README.md").write_text(text, encoding="utf-8")
    return root


def test_subcommands_from_add_parser_calls_and_modules_from_the_listing(tmp_path):
    package = make_tool(tmp_path, None) / "tools" / "dspark-fleet" / "dspark_fleet"
    assert fleet_readme.subcommands(package) == {"plan": "cli.py", "reprovision": "cli.py", "extra": "extra.py"}
    assert fleet_readme.modules(package) == ["cli.py", "extra.py", "locks.py"]


def test_a_complete_readme_passes(tmp_path, capsys):
    make_tool(tmp_path, readme(["plan", "reprovision", "extra"], ["cli.py", "extra.py", "locks.py"]))
    assert fleet_readme.main(["--check", "--root", str(tmp_path)]) == 0
    assert capsys.readouterr().err == ""


def test_a_missing_subcommand_and_a_missing_module_are_both_named_with_the_fix(tmp_path, capsys):
    # `watch` and `locks.py` appear outside the tables: that does not count.
    make_tool(tmp_path, readme(["plan", "reprovision"], ["cli.py", "extra.py"]))
    assert fleet_readme.main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert err[0].startswith("fleet_readme: subcommand extra (add_parser in tools/dspark-fleet/dspark_fleet/extra.py) "
                             "has no row under '## Subcommands and options'")
    assert err[0].endswith("Fix: add | `extra` | what it runs | result per group |")
    assert err[1].startswith("fleet_readme: module tools/dspark-fleet/dspark_fleet/locks.py has no row under '## Code'")
    assert "Fix: add | `locks.py` |" in err[1]


def test_missing_sections_and_a_missing_readme_are_reported(tmp_path, capsys):
    make_tool(tmp_path, "# dspark-fleet\n\nNothing here.\n")
    assert fleet_readme.main(["--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "has no '## Subcommands and options' section. Fix: add it, with a table row per subcommand (extra, plan, " \
           "reprovision)" in err
    assert "has no '## Code' section. Fix: add it, with a table row per module (cli.py, extra.py, locks.py)" in err
    (tmp_path / "tools" / "dspark-fleet" / "README.md").unlink()
    assert fleet_readme.main(["--root", str(tmp_path)]) == 1
    assert "tools/dspark-fleet/README.md is missing. Fix: write it" in capsys.readouterr().err


def test_the_collections_fleet_readme_names_everything():
    assert fleet_readme.main(["--check"]) == 0
