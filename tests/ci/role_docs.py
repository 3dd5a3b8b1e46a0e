"""Generate the variable table of every role's README from its meta/argument_specs.yml.

Each roles/ROLE/README.md holds, between `<!-- BEGIN generated variables -->` and
`<!-- END generated variables -->`, one table per entry point (name, type, default, description) rendered from
roles/ROLE/meta/argument_specs.yml. `--check` (the default; `make lint` runs it) fails, naming the role and the
fix, when a README is missing, lacks the markers or differs from what would be generated; `--write` rewrites the
tables (appending a "Role variables" section to a README without the markers, creating a stub README when there
is none).
"""

import argparse
import json
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
BEGIN = "<!-- BEGIN generated variables -->"
END = "<!-- END generated variables -->"
NOTE = "<!-- Generated from meta/argument_specs.yml by tests/ci/role_docs.py --write; do not edit by hand. -->"
FIX = "run python tests/ci/role_docs.py --write"
BLOCK = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
# Ansible's documentation markup: C(code), I(italic), B(bold), V(value), O(option), U(url), L(text,url).
MARKUP = [
    (re.compile(r"\b[CVO]\(([^)]*)\)"), r"`\1`"),
    (re.compile(r"\bI\(([^)]*)\)"), r"*\1*"),
    (re.compile(r"\bB\(([^)]*)\)"), r"**\1**"),
    (re.compile(r"\bU\(([^)]*)\)"), r"\1"),
    (re.compile(r"\bL\(([^,)]*),\s*([^)]*)\)"), r"[\1](\2)"),
]


def load_specs(role_dir):
    """The argument_specs mapping (entry point -> spec) of a role; empty when it has none."""
    path = pathlib.Path(role_dir) / "meta" / "argument_specs.yml"
    if not path.exists():
        return {}
    with open(path, encoding="utf-8") as handle:
        return (yaml.safe_load(handle) or {}).get("argument_specs") or {}


def text(value):
    """A description (string or list of paragraphs) as one line of Markdown."""
    if isinstance(value, list):
        value = " ".join(str(part) for part in value)
    value = " ".join(str(value or "").split())
    for pattern, replacement in MARKUP:
        value = pattern.sub(replacement, value)
    return value


def cell(value):
    return value.replace("|", "\\|")


def kind(spec):
    name = spec.get("type", "str")
    if name == "list" and spec.get("elements"):
        return "list of %s" % spec["elements"]
    return name


def default(spec):
    if spec.get("required"):
        return "(required)"
    if "default" not in spec or spec["default"] is None:
        return ""
    return "`%s`" % json.dumps(spec["default"])


def describe(spec):
    parts = [text(spec.get("description", ""))]
    if spec.get("choices"):
        parts.append("Choices: %s." % ", ".join("`%s`" % json.dumps(c) for c in spec["choices"]))
    if spec.get("no_log"):
        parts.append("Secret: never logged.")
    return " ".join(p for p in parts if p)


def table(options):
    rows = ["| Variable | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for name, spec in options.items():
        spec = spec or {}
        rows.append("| `%s` | %s | %s | %s |" % (name, cell(kind(spec)), cell(default(spec)), cell(describe(spec))))
    return "\n".join(rows)


def render(specs):
    """The generated block (markers included) for a role's argument_specs mapping."""
    parts = [BEGIN, NOTE]
    entries = sorted(specs, key=lambda name: (name != "main", name))
    for entry in entries:
        spec = specs[entry] or {}
        options = spec.get("options") or {}
        if len(entries) > 1 or entry != "main":
            title = "Entry point `%s`" % entry
            if entry != "main":
                title += " (`tasks_from: %s`)" % entry
            parts.append("\n### %s\n" % title)
            if spec.get("short_description"):
                parts.append(text(spec["short_description"]) + "\n")
        parts.append(table(options) if options else "No variables.")
    parts.append(END)
    return "\n".join(parts)


def stub(role, specs):
    main = specs.get("main") or {}
    summary = text(main.get("short_description", "")) or "See meta/argument_specs.yml."
    return "# dspark.cluster.%s\n\n%s\n\n## Role variables\n\n%s\n" % (role, summary, render(specs))


def update(role, readme, specs):
    """The README text with its generated block replaced (or appended when the markers are missing)."""
    block = render(specs)
    if readme is None:
        return stub(role, specs)
    if BLOCK.search(readme):
        return BLOCK.sub(lambda match: block, readme, count=1)
    return readme.rstrip("\n") + "\n\n## Role variables\n\n" + block + "\n"


def check(role, readme, specs):
    """Problems of one role's README (empty list when it is up to date)."""
    where = "roles/%s/README.md" % role
    if readme is None:
        return ["%s: %s is missing. Fix: %s" % (role, where, FIX)]
    if readme.count(BEGIN) != 1 or readme.count(END) != 1:
        return ["%s: %s needs exactly one %s ... %s block. Fix: %s" % (role, where, BEGIN, END, FIX)]
    if update(role, readme, specs) != readme:
        return ["%s: the variable table in %s differs from meta/argument_specs.yml. Fix: %s" % (role, where, FIX)]
    return []


def roles(root):
    return sorted(p for p in (pathlib.Path(root) / "roles").iterdir() if (p / "meta" / "argument_specs.yml").exists())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="fail when a README table is missing or out of date (default)")
    mode.add_argument("--write", action="store_true", help="rewrite the README tables")
    parser.add_argument("--root", default=str(ROOT), help=argparse.SUPPRESS)
    parser.add_argument("role", nargs="*", help="only these roles (default: every role with meta/argument_specs.yml)")
    args = parser.parse_args(argv)
    problems = []
    selected = [d for d in roles(args.root) if not args.role or d.name in args.role]
    for name in sorted(set(args.role) - {d.name for d in selected}):
        problems.append("%s: no roles/%s/meta/argument_specs.yml" % (name, name))
    for role_dir in selected:
        specs = load_specs(role_dir)
        path = role_dir / "README.md"
        readme = path.read_text(encoding="utf-8") if path.exists() else None
        if args.write:
            wanted = update(role_dir.name, readme, specs)
            if wanted != readme:
                path.write_text(wanted, encoding="utf-8")
                print("wrote %s" % path.relative_to(args.root))
        else:
            problems.extend(check(role_dir.name, readme, specs))
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
