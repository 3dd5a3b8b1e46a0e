# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Sourced by lock.sh and build.sh: the pip tags of the engine image's interpreter, Debian bookworm's CPython 3.11 on
# glibc 2.36, x86_64; wheels only (no compiler in the image). pip does not expand a manylinux_2_X platform to the older
# ones a glibc 2.36 also runs, so every one is listed (and the legacy manylinux2014/2010/1 names).
# shellcheck shell=bash
TARGET_PIP_ARGS=(--only-binary=:all: --implementation cp --python-version 3.11 --abi cp311)
for _glibc in $(seq 36 -1 5); do TARGET_PIP_ARGS+=(--platform "manylinux_2_${_glibc}_x86_64"); done
TARGET_PIP_ARGS+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
unset _glibc
