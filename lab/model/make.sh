#!/usr/bin/env bash
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Make the lab's tiny model (make_tiny_model.py) inside the engine image, offline, and cache it under .lab/model/:
#   .lab/model/hf/            an HF_HOME: hub/models--dspark-lab--tiny-llama/{blobs,refs/main,snapshots/<revision>}
#   .lab/model/revision       the pinned revision (40 hex, from the content); .lab/model/repo_id: dspark-lab/tiny-llama
#   .lab/model/model.json     files (size, sha256, etag), config, versions, a greedy completion by transformers
#   bash lab/model/make.sh    # builds the engine image first (a no-op when current); a no-op when the model is current
# The model is made again only when make_tiny_model.py or the engine image's recipe changed (the key in
# .lab/model/key). The image has torch, tokenizers, safetensors and transformers: nothing is installed on this machine.
# Env: IMAGE (the engine image, default dspark-lab/vllm-cpu:0.32.0), MODEL_DIR (default .lab/model).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
IMAGE=${IMAGE:-dspark-lab/vllm-cpu:0.32.0}
OUT=${MODEL_DIR:-$REPO/.lab/model}

IMAGE=$IMAGE bash "$REPO/lab/engine/build.sh" >&2
recipe=$(docker image inspect -f '{{ index .Config.Labels "dspark.lab.engine.recipe" }}' "$IMAGE")
key=$( (sha256sum <"$HERE/make_tiny_model.py"; echo "$recipe") | sha256sum | cut -c1-16)
if [[ $(cat "$OUT/key" 2>/dev/null) == "$key" && -s $OUT/revision && -d $OUT/hf/hub ]]; then
  echo "make.sh: current $OUT ($(cat "$OUT/repo_id" 2>/dev/null) @ $(cat "$OUT/revision"))"
  exit 0
fi
# Models by key, shared by every checkout on this host: a clean clone copies the one an earlier checkout made (7 MB)
# instead of starting torch to make it again.
# shellcheck source=lab/host_cache.sh
source "$REPO/lab/host_cache.sh"
cache="$(host_cache_dir model)/$key"
mkdir -p "$OUT"
work=$(mktemp -d "$OUT/.make.XXXXXX")
trap 'rm -rf "$work"' EXIT
t0=$SECONDS
if [[ -s $cache/revision && -d $cache/hf/hub ]] && cp -a "$cache/hf" "$work/hf" &&
  cp "$cache/revision" "$cache/repo_id" "$cache/model.json" "$work/"; then
  printf '{"copied_from": "%s"}\n' "$cache" >"$work/summary.json"
else
  rm -rf "$work/hf"
  # --network none: proof that nothing is downloaded. One core's worth of threads keeps it deterministic and polite.
  docker run --rm --network none -e OMP_NUM_THREADS=1 -v "$HERE:/src:ro" -v "$work:/out" "$IMAGE" \
    python3 /src/make_tiny_model.py /out/hf >"$work/summary.json"
  for f in revision repo_id model.json; do mv -f "$work/hf/$f" "$work/$f"; done
  # Kept for the next checkout, the models of other keys dropped; a failure only costs that checkout the making.
  { rm -rf "$cache.tmp" && mkdir -p "$cache.tmp" && cp -a "$work/hf" "$cache.tmp/hf" &&
    cp "$work/revision" "$work/repo_id" "$work/model.json" "$cache.tmp/" &&
    host_cache_keep_only "$(dirname "$cache")" "$key.tmp" &&
    mv "$cache.tmp" "$cache"; } 2>/dev/null || echo "make.sh: could not keep the model in $cache" >&2
fi
# Replaced by rename, the cache first and the key last: a reader sees the old model or the new one, and an
# interrupted run leaves no key (the next run makes it again).
rm -f "$OUT/key"
[[ -d $OUT/hf ]] && mv "$OUT/hf" "$work/old-hf"
mv "$work/hf" "$OUT/hf"
for f in revision repo_id model.json; do mv -f "$work/$f" "$OUT/$f"; done
echo "$key" >"$OUT/key"
echo "make.sh: made $OUT ($(cat "$OUT/repo_id") @ $(cat "$OUT/revision")) in $((SECONDS - t0))s: $(cat "$work/summary.json")"
