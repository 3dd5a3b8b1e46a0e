"""Keep every role's defaults, meta/argument_specs.yml and README variable table in step.

Checks, for each role: the same variable names in defaults/main.yml and argument_specs (entry point
main), the same default values, every name prefixed with the role name, and a README table between
`<!-- vars:ROLE -->` and `<!-- /vars:ROLE -->` (in README.md or roles/ROLE/README.md), where one exists, equal to
the one generated from argument_specs. The role READMEs' own tables are tests/ci/role_docs.py's (required there).
`--fix` rewrites the README tables instead of failing on them.
"""

import argparse
import json
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def cell(value):
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(options):
    rows = ["| Variable | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for name, spec in sorted(options.items()):
        default = spec.get("default", "(required)" if spec.get("required") else "")
        default = "`%s`" % json.dumps(default) if default not in ("", "(required)") else default
        description = spec.get("description", "")
        if isinstance(description, list):
            description = " ".join(description)
        kind = spec.get("type", "str")
        if kind == "list" and spec.get("elements"):
            kind = "list of %s" % spec["elements"]
        rows.append("| `%s` | %s | %s | %s |" % (name, kind, cell(default), cell(description)))
    return "\n".join(rows)


def check_role(role_dir, readme, problems, required=True, where="README.md"):
    role = role_dir.name
    specs = load(role_dir / "meta" / "argument_specs.yml").get("argument_specs", {})
    options = (specs.get("main") or {}).get("options") or {}
    defaults_path = role_dir / "defaults" / "main.yml"
    defaults = load(defaults_path) if defaults_path.exists() else {}
    for name in sorted(set(defaults) - set(options)):
        problems.append("%s: %s is in defaults/main.yml but not in meta/argument_specs.yml" % (role, name))
    for name, spec in sorted(options.items()):
        if not name.startswith(role + "_"):
            problems.append("%s: option %s lacks the role prefix %s_" % (role, name, role))
        if name not in defaults:
            if not spec.get("required"):
                problems.append("%s: %s is in argument_specs but has no default in defaults/main.yml" % (role, name))
        elif spec.get("default") != defaults[name]:
            problems.append("%s: default of %s differs: argument_specs %r, defaults/main.yml %r"
                            % (role, name, spec.get("default"), defaults[name]))
    start, end = "<!-- vars:%s -->" % role, "<!-- /vars:%s -->" % role
    wanted = "%s\n%s\n%s" % (start, table(options), end)
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(readme):
        if required:
            problems.append("%s: no variable table for role %s (add %s ... %s, then run with --fix)" % (where, role, start, end))
        return readme
    return pattern.sub(lambda m: wanted, readme)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fix", action="store_true", help="rewrite the README tables")
    args = parser.parse_args()
    readme_path = ROOT / "README.md"
    readme = readme_path.read_text(encoding="utf-8")
    problems = []
    updated = readme
    for role_dir in sorted(p for p in (ROOT / "roles").iterdir() if (p / "meta" / "argument_specs.yml").exists()):
        updated = check_role(role_dir, updated, problems, required=False)
        role_readme_path = role_dir / "README.md"
        if role_readme_path.exists():
            role_readme = role_readme_path.read_text(encoding="utf-8")
            role_problems = []
            role_updated = check_role(role_dir, role_readme, role_problems, required=False,
                                      where=str(role_readme_path.relative_to(ROOT)))
            if role_updated != role_readme:
                if args.fix:
                    role_readme_path.write_text(role_updated, encoding="utf-8")
                else:
                    problems.append("%s: the variable table is out of date (run tests/ci/check_argument_specs.py --fix)"
                                    % role_readme_path.relative_to(ROOT))
    if updated != readme:
        if args.fix:
            readme_path.write_text(updated, encoding="utf-8")
        else:
            problems.append("README.md: a role variable table is out of date (run tests/ci/check_argument_specs.py --fix)")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
