"""Check that tools/dspark-fleet/README.md names every subcommand and every module of dspark-fleet.

The subcommands are the names given to `<subparsers>.add_parser("name", ...)`, found with the ast module in cli.py
and in the package's other modules (`acceptance` and `bundle` add their own parsers, called from cli.py); the modules
are the *.py files of tools/dspark-fleet/dspark_fleet/ but __init__.py and __main__.py. The README must have a table
row for each subcommand (`| `name` |`) under `## Subcommands and options`, and one for each module
(`| `name.py` | what it does |`) under `## Code`. `--check` (the default; `make lint` runs it) exits 1 naming every
one missing and its fix, 2 when a module cannot be parsed, 0 otherwise. Stdlib only.
"""

import argparse
import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = "tools/dspark-fleet"
PACKAGE = TOOL + "/dspark_fleet"
README = TOOL + "/README.md"
SUBCOMMANDS = "## Subcommands and options"
CODE = "## Code"
NOT_MODULES = {"__init__.py", "__main__.py"}


def modules(package):
    """The package's module file names, sorted (__init__.py and __main__.py left out)."""
    return sorted(p.name for p in pathlib.Path(package).glob("*.py") if p.name not in NOT_MODULES)


def add_parser_names(source, filename="<source>"):
    """The string literal first argument of every `X.add_parser(...)` call in one module's source, in order."""
    names = []
    for node in ast.walk(ast.parse(source, filename)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_parser"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.append((node.lineno, node.args[0].value))
    return [name for dummy, name in sorted(names)]


def subcommands(package):
    """{subcommand: the module file that adds it}, cli.py first, then the other modules by name."""
    package = pathlib.Path(package)
    found = {}
    for name in ["cli.py"] + [m for m in modules(package) if m != "cli.py"]:
        path = package / name
        if not path.exists():
            continue
        for sub in add_parser_names(path.read_text(encoding="utf-8"), str(path)):
            found.setdefault(sub, name)
    return found


def section(text, heading):
    """The lines of a README section: from `heading` to the next heading of the same level (None when absent)."""
    lines = text.splitlines()
    if heading not in lines:
        return None
    start = lines.index(heading) + 1
    level = heading.split(" ", 1)[0] + " "
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(level)), len(lines))
    return lines[start:end]


def has_row(lines, name):
    return any(line.startswith("| `%s` |" % name) for line in lines)


def check(readme, subs, mods):
    """Problems of the README (empty list when it names everything)."""
    if readme is None:
        return ["%s is missing. Fix: write it, with a row per subcommand under %r and per module under %r"
                % (README, SUBCOMMANDS, CODE)]
    problems = []
    table = section(readme, SUBCOMMANDS)
    if table is None:
        problems.append("%s has no %r section. Fix: add it, with a table row per subcommand (%s)"
                        % (README, SUBCOMMANDS, ", ".join(sorted(subs))))
    else:
        for sub, where in sorted(subs.items()):
            if not has_row(table, sub):
                problems.append("subcommand %s (add_parser in %s/%s) has no row under %r in %s. Fix: add "
                                "| `%s` | what it runs | result per group |"
                                % (sub, PACKAGE, where, SUBCOMMANDS, README, sub))
    code = section(readme, CODE)
    if code is None:
        problems.append("%s has no %r section. Fix: add it, with a table row per module (%s)"
                        % (README, CODE, ", ".join(mods)))
    else:
        for mod in mods:
            if not has_row(code, mod):
                problems.append("module %s/%s has no row under %r in %s. Fix: add | `%s` | one line on what it "
                                "does (its docstring) |" % (PACKAGE, mod, CODE, README, mod))
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a subcommand or module is missing (default)")
    parser.add_argument("--root", default=str(ROOT), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root = pathlib.Path(args.root)
    try:
        subs = subcommands(root / PACKAGE)
    except SyntaxError as err:
        print("fleet_readme: cannot parse %s: %s" % (err.filename, err), file=sys.stderr)
        return 2
    path = root / README
    readme = path.read_text(encoding="utf-8") if path.exists() else None
    problems = check(readme, subs, modules(root / PACKAGE))
    for problem in problems:
        print("fleet_readme: %s" % problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
