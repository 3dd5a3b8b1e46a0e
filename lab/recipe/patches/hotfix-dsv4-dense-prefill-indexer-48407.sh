#!/usr/bin/env bash
# LAB STAND-IN for the DSpark recipe's hotfix of the same name (NOT the hotfix): records that it ran.
exec bash "$(dirname "$0")/lab-standin.sh" "$(basename "$0")" "$@"
