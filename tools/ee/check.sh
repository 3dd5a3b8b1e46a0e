#!/usr/bin/env bash
# Smoke check of the execution environment, every command inside the image (tools/ee/build.sh builds it).
# Usage: tools/ee/check.sh [IMAGE]     (default dspark-ee:latest)
# What it proves, in order:
#   1. ansible-core and ansible-runner are the pinned versions and run (python, entrypoint, user 1000 as in AWX);
#   2. dspark.cluster (the tarball of this checkout) and the four collections it depends on are installed in
#      /usr/share/ansible/collections, and ansible-doc reads tp_ranks' documentation from there;
#   3. site.yml and playbooks/status.yml pass --syntax-check from the installed collection (outside any checkout:
#      every role, plugin and collection they name resolves from the image alone) and from the checkout, mounted
#      read-only where AWX puts a project (/runner/project, its ansible.cfg in effect, ANSIBLE_COLLECTIONS_PATH as
#      AWX sets it);
#   4. ansible-runner (process isolation off, as AWX runs it inside the EE) runs playbooks/preflight.yml from that
#      project against inventories/example with preflight_check_reachability false and no stdin: the inventory
#      validation runs on the controller, needs no node and no prompt; status "successful", rc 0, job events and the
#      preflight_inventory result (the fleet's groups) in the runner artifacts;
#   5. the same run started from this machine by the venv's ansible-runner with --process-isolation (docker, the image
#      as its container image; ansible-navigator runs playbooks the same way): status "successful", rc 0.
# What it does not prove: SSH to a node, a machine credential, a vault, AWX itself (docs/awx.md).
# Containers are named dspark-ee-check-<pid> and removed; nothing is pulled.
set -euo pipefail

image=${1:-dspark-ee:latest}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
core=$(sed -n 's/^ansible-core==//p' "$repo/requirements.txt")
runner=$(sed -n 's/^ansible-runner==//p' "$repo/requirements.txt")
coll=/usr/share/ansible/collections/ansible_collections/dspark/cluster
n=0

log() { printf 'ee-check: %s\n' "$*"; }
die() { printf 'ee-check: FAILED: %s\n' "$*" >&2; exit 1; }

# The project the EE's user (1000, as in AWX) reads: the checkout's tracked and untracked (not ignored) files in a
# directory of its own that others may enter. The checkout itself may sit below a directory only root can enter
# (a clean clone into mktemp -d does), which the image's user could not read.
project=$(mktemp -d)
trap 'rm -rf "$project"' EXIT
(cd "$repo" && git ls-files -co --exclude-standard -z | rsync -a --from0 --files-from=- ./ "$project/")
chmod -R a+rX "$project"

# in_ee CMD...: run CMD in a fresh container (the project read-only at /runner/project, like an AWX project).
in_ee() {
  n=$((n + 1))
  docker run --rm -i --name "dspark-ee-check-$$-$n" --network none \
    -v "$project:/runner/project:ro" -w /tmp "$image" "$@" </dev/null
}

docker image inspect "$image" >/dev/null 2>&1 || die "no image $image (tools/ee/build.sh)"
start=$SECONDS

log "1. versions"
out=$(in_ee ansible-playbook --version)
grep -q "core $core\]" <<<"$out" || die "ansible-playbook is not core $core: $(head -1 <<<"$out")"
log "   $(head -1 <<<"$out"), $(grep 'python version' <<<"$out" | sed 's/^ *//; s/ (.*//')"
out=$(in_ee ansible-runner --version)
[[ $out == "$runner" ]] || die "ansible-runner is $out, not $runner"
log "   ansible-runner $out; user $(in_ee id -u)"

log "2. collections"
out=$(in_ee ansible-galaxy collection list)
for c in dspark.cluster community.docker ansible.posix ansible.utils community.general; do
  grep -q "^$c " <<<"$out" || die "collection $c is not installed"
done
log "   $(grep -E '^(dspark|community|ansible)\.[a-z]' <<<"$out" | awk '{ printf "%s %s, ", $1, $2 }' | sed 's/, $//')"
out=$(in_ee ansible-doc dspark.cluster.tp_ranks) || die "ansible-doc dspark.cluster.tp_ranks"
grep -q "tp_ranks" <<<"$out" || die "ansible-doc dspark.cluster.tp_ranks shows no documentation"
log "   ansible-doc dspark.cluster.tp_ranks: ok"

log "3. syntax checks"
in_ee ansible-playbook --syntax-check -i "$coll/inventories/example/hosts.yml" "$coll/site.yml" >/dev/null \
  || die "site.yml from the collection"
in_ee ansible-playbook --syntax-check -i "$coll/inventories/example/hosts.yml" dspark.cluster.status >/dev/null \
  || die "dspark.cluster.status"
log "   installed collection: site.yml and dspark.cluster.status (playbooks/status.yml): ok"
in_ee sh -c 'cd /runner/project &&
  ANSIBLE_COLLECTIONS_PATH=/runner/requirements_collections:./collections:~/.ansible/collections:/usr/share/ansible/collections \
  ansible-playbook --syntax-check -i inventories/example/hosts.yml site.yml playbooks/status.yml' >/dev/null \
  || die "site.yml and playbooks/status.yml from the checkout"
log "   checkout at /runner/project: site.yml and playbooks/status.yml: ok"

log "4. ansible-runner run playbooks/preflight.yml (process isolation off) against inventories/example"
# shellcheck disable=SC2016 # expanded in the container
in_ee sh -c '
  set -e
  pd=/runner   # the private data directory as AWX lays it out: project/ (the mount), env/, inventory/, artifacts/
  mkdir -p $pd/env $pd/inventory
  cp -r /runner/project/inventories/example/. $pd/inventory/
  # The example inventory reads the API key from a vault variable: an extra var stands in for the vault here.
  printf "%s\n" "{\"preflight_check_reachability\": false, \"vault_dspark_api_key\": \"ee-check-not-a-secret-key\"}" \
    >$pd/env/extravars
  printf "%s\n" "{\"ANSIBLE_COLLECTIONS_PATH\": \"/runner/requirements_collections:./collections:/usr/share/ansible/collections\"}" \
    >$pd/env/envvars
  ansible-runner run $pd -p playbooks/preflight.yml --ident ee-check >/tmp/stdout.txt 2>&1 || {
    tail -40 /tmp/stdout.txt; exit 1; }
  python3 - $pd/artifacts/ee-check <<PY
import json, pathlib, sys
a = pathlib.Path(sys.argv[1])
status, rc = (a / "status").read_text(), (a / "rc").read_text()
events = [json.loads(p.read_text()) for p in sorted(a.glob("job_events/*.json"))]
print(f"status={status} rc={rc} job events={len(events)}")
assert status == "successful" and rc == "0", (status, rc)
# The validation result is in the job events (where AWX and dspark-fleet read results): the groups of the fleet.
ok = [e["event_data"] for e in events if e.get("event") == "runner_on_ok"
      and e["event_data"].get("task") == "Validate the serving groups of the inventory"]
assert ok, "no result of the inventory validation in the job events"
print("validated groups:", sorted(ok[0]["res"].get("groups", {})))
recap = [e["event_data"] for e in events if e.get("event") == "playbook_on_stats"][0]
print("recap:", {k: sorted(v) for k, v in recap.items() if k in ("ok", "failures", "dark") and v})
PY
' | sed 's/^/   /' || die "ansible-runner run of playbooks/preflight.yml"

log "5. ansible-runner --process-isolation from this machine (the venv's runner starts a container of the image)"
runner_bin=$repo/.venv/bin/ansible-runner
if [[ -x $runner_bin ]]; then
  pd=$(mktemp -d /tmp/dspark-ee-check.XXXXXX)
  trap 'rm -rf "$pd" "$project"' EXIT
  mkdir -p "$pd/env" "$pd/inventory" "$pd/project"
  # The committed project (the checkout holds .venv and .lab: too much to mount), the example inventory.
  git -C "$repo" archive HEAD | tar -x -C "$pd/project"
  cp -r "$repo/inventories/example/." "$pd/inventory/"
  printf '%s\n' '{"preflight_check_reachability": false, "vault_dspark_api_key": "ee-check-not-a-secret-key"}' >"$pd/env/extravars"
  "$runner_bin" run "$pd" -p playbooks/preflight.yml --ident ee-check --process-isolation \
    --process-isolation-executable docker --container-image "$image" \
    --container-option="--name=dspark-ee-check-$$-runner" --container-option=--network=none >"$pd/stdout.txt" 2>&1 \
    || { tail -30 "$pd/stdout.txt"; die "ansible-runner --process-isolation"; }
  [[ $(cat "$pd/artifacts/ee-check/status") == successful && $(cat "$pd/artifacts/ee-check/rc") == 0 ]] \
    || die "ansible-runner --process-isolation: $(cat "$pd/artifacts/ee-check/status")"
  log "   status=successful rc=0 job events=$(find "$pd/artifacts/ee-check/job_events" -name '*.json' | wc -l), in $image"
else
  log "   skipped: no $runner_bin (make venv)"
fi

log "PASSED in $((SECONDS - start)) s ($image, $(docker image inspect -f '{{ .Size }}' "$image" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
