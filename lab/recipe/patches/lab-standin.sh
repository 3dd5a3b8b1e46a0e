#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# LAB STAND-IN, NOT A HOTFIX: every file of this tree calls this helper instead of patching vLLM.
#   lab-standin.sh NAME [ARGS...]
# Appends "NAME ARGS" to $DSPARK_LAB_HOTFIX_LOG (default /tmp/dspark-lab-hotfixes.log), the marker the
# simulator (DSPARK_SIM_REQUIRE_HOTFIXES) and the serve scenario read; exits 1 without a marker when
# DSPARK_LAB_HOTFIX_FAIL names NAME, so a failing hotfix can be injected.
set -eu
name=$1
shift
if [ "${DSPARK_LAB_HOTFIX_FAIL:-}" = "$name" ]; then
    echo "$name: LAB STAND-IN failing on purpose (DSPARK_LAB_HOTFIX_FAIL)" >&2
    exit 1
fi
echo "$name${*:+ $*}" >> "${DSPARK_LAB_HOTFIX_LOG:-/tmp/dspark-lab-hotfixes.log}"
