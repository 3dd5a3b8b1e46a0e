# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one reading of input values, and its input classes (private).

One integer, boolean, port and number parser for every rule (the inventory contract, the role inputs, the group
model, tp_ranks): an int is an int or a string of digits with an optional sign (never a bool, never '8.5'); a
boolean is what Ansible's ``bool`` accepts (true/false, yes/no, on/off, y/n, t/f, 1/0). The input classes return
``(problem, fix)`` or None, so that every rule words the same mistake the same way. Pure Python, no Ansible imports.
"""

from __future__ import annotations

import re

BOOL_TRUE = frozenset(("y", "yes", "on", "1", "true", "t"))
BOOL_FALSE = frozenset(("n", "no", "off", "0", "false", "f"))
BOOL_STRINGS = BOOL_TRUE | BOOL_FALSE
INT_RE = re.compile(r"^\s*[-+]?[0-9]+\s*$")
FLOAT_RE = re.compile(r"^\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def as_int(value):
    """The integer a value stands for (an int, never a bool, or a string of digits with an optional sign), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and INT_RE.match(value):
        return int(value)
    return None


def as_float(value):
    """The number a value stands for (an int or float, never a bool, or a decimal string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and FLOAT_RE.match(value):
        return float(value)
    return None


def as_bool(value):
    """True or False as Ansible's ``bool`` reads the value (a bool, 0/1, or one of its words), else None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in BOOL_TRUE:
            return True
        if text in BOOL_FALSE:
            return False
    return None


def is_true(value):
    """as_bool, with anything that is not a boolean read as False."""
    return as_bool(value) is True


def as_port(value, low=1, high=65535):
    """The TCP port a value stands for (an integer in low..high), else None."""
    number = as_int(value)
    return number if number is not None and low <= number <= high else None


# -- input classes: (problem, fix) or None --------------------------------------------------------------------------

def _number_text(number):
    return ("%d" % number) if float(number).is_integer() else ("%g" % number)


def range_problem(value, low=None, high=None, low_open=False, example=None, number=as_int):
    """A count, size, timeout or fraction outside its range ([low, high], or (low, high] with low_open).

    None when the value is in range, or when it is no number at all (the type rules report that, once).
    """
    parsed = number(value)
    if parsed is None:
        return None
    too_low = low is not None and (parsed <= low if low_open else parsed < low)
    too_high = high is not None and parsed > high
    if not (too_low or too_high):
        return None
    if low is not None and high is not None:
        wanted = "%s < x <= %s" % (_number_text(low), _number_text(high)) if low_open else \
            "%s to %s" % (_number_text(low), _number_text(high))
    elif low is not None:
        wanted = ("greater than %s" if low_open else "at least %s") % _number_text(low)
    else:
        wanted = "at most %s" % _number_text(high)
    problem = "is outside its range (%s)" % wanted
    return problem, "set a value %s%s" % (wanted, "" if example is None else ", e.g. %s" % example)


def control_problem(value, secret=False):
    """A string (a secret or a value written into a file or a command line) with a control character or a line
    break, or (a secret) white space around it: the copy that reaches the node is not what the operator meant."""
    if not isinstance(value, str):
        return None
    if CONTROL_RE.search(value):
        return ("contains a control character (a line break, tab or escape)%s" % (" - the value is not shown" if secret else ""),
                "remove it (a vault or lookup value often ends with a newline: use | trim)")
    if secret and value != value.strip():
        return ("has white space at its start or end (the value is not shown)",
                "remove it (a vault or lookup value often ends with a newline: use | trim)")
    return None


# The shortest API key accepted (issue #26 point 7): 16 characters, 64 bits of hex at the least; a key that anyone can
# guess opens the model to whoever reaches the port.
API_KEY_MIN = 16


def short_key_problem(value):
    """A non-empty API key shorter than API_KEY_MIN characters (its length is said, never its value)."""
    if not isinstance(value, str) or not value or len(value.strip()) >= API_KEY_MIN:
        return None
    return ("is shorter than %d characters (%d; the value is not shown): a short key can be guessed"
            % (API_KEY_MIN, len(value.strip())),
            "use at least %d random characters, for example the output of `openssl rand -hex 24`" % API_KEY_MIN)


def absolute_path_problem(value, example):
    """A directory or file on a node that must be an absolute path below / (not relative, not / itself)."""
    if not isinstance(value, str):
        return None
    text = value.rstrip("/")
    if not text.startswith("/") or CONTROL_RE.search(value):
        return ("is not an absolute path below / without control characters",
                "write the full path starting with /, e.g. %s" % example)
    return None


def inside(path, parent):
    """Whether ``path`` is ``parent`` or below it (both absolute, trailing slashes ignored)."""
    path, parent = str(path).rstrip("/"), str(parent).rstrip("/")
    return (path + "/").startswith(parent + "/")
