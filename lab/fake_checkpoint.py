# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Generate a small fake checkpoint in the Hugging Face cache layout, for the lab and the tests.

    python3 lab/fake_checkpoint.py --cache DIR [--model ORG/NAME] [--revision HEX40] [--shards N]
        [--shard-size SIZE] [--sparse-size SIZE] [--all-sparse] [--blobs] [--seed N]

Writes <DIR>/hub/models--ORG--NAME/{refs/main, snapshots/<rev>/...}: N safetensors shards (each
a valid safetensors file holding one U8 tensor), config.json, tokenizer files, and
model.safetensors.index.json whose weight_map names every shard. The last shard is a SPARSE file of
--sparse-size apparent bytes (2G by default; 0 disables it): a header and some data at both ends,
a hole in between, so it costs almost no disk. --all-sparse makes every shard sparse (benchmarks).
With --blobs, snapshot entries are relative symlinks into ../../blobs/<id> as in a real cache
(blob ids are derived from the seed, not from the content, so generating stays fast).
The content depends only on the arguments (seeded), never on time. Stdlib only.
Prints a JSON summary (snapshot, revision, apparent and allocated bytes).
"""

import argparse
import hashlib
import json
import os
import re
import struct
import sys

MIB = 1024 * 1024
UNITS = {'': 1, 'K': 1024, 'M': MIB, 'G': 1024 * MIB, 'T': 1024 * 1024 * MIB}
# Real data kept at each end of a sparse shard; the rest is a hole.
SPARSE_DATA = 1 * MIB


def parse_size(text):
    """'4M', '3.75G', '1024' (binary units, optional 'iB'/'B' suffix) -> bytes."""
    m = re.match(r'^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:i?B)?\s*$', str(text), re.I)
    if not m:
        raise argparse.ArgumentTypeError('bad size %r (examples: 4M, 3.75G, 1048576)' % text)
    return int(float(m.group(1)) * UNITS[m.group(2).upper()])


def stream(seed, name, size):
    """Deterministic pseudo-random bytes for (seed, name), in 1 MiB pieces."""
    for i in range(0, size, MIB):
        n = min(MIB, size - i)
        yield hashlib.shake_256(('%s:%s:%d' % (seed, name, i)).encode()).digest(n)


def write_stream(f, seed, name, size):
    for piece in stream(seed, name, size):
        f.write(piece)


def safetensors_header(tensor, nbytes):
    """safetensors framing: u64 little-endian header length, JSON header padded to 8 bytes."""
    header = json.dumps({'__metadata__': {'format': 'pt'},
                         tensor: {'dtype': 'U8', 'shape': [nbytes], 'data_offsets': [0, nbytes]}},
                        separators=(',', ':')).encode()
    header += b' ' * (-len(header) % 8)
    return struct.pack('<Q', len(header)) + header


def write_shard(path, seed, name, tensor, size, sparse):
    """A shard of exactly `size` bytes: header, then tensor data (a hole in the middle if sparse)."""
    header = safetensors_header(tensor, 0)
    while True:  # the header names the body length, which depends on the header length
        again = safetensors_header(tensor, max(0, size - len(header)))
        if len(again) == len(header):
            header = again
            break
        header = again
    body = size - len(header)
    if body < 0:
        raise SystemExit('shard size %d is smaller than its safetensors header (%d bytes)' % (size, len(header)))
    with open(path, 'wb') as f:
        f.write(header)
        if not sparse or body <= 2 * SPARSE_DATA:
            write_stream(f, seed, name, body)
            return
        write_stream(f, seed, name + ':head', SPARSE_DATA)
        f.seek(size - SPARSE_DATA)  # the gap before this offset stays a hole
        write_stream(f, seed, name + ':tail', SPARSE_DATA)


def fake_revision(seed, model):
    return hashlib.sha1(('%s:%s' % (seed, model)).encode()).hexdigest()


def generate(cache, model='dspark-lab/Fake-V4-Flash', revision=None, shards=4, shard_size=4 * MIB,
             sparse_size=2 * 1024 * MIB, all_sparse=False, blobs=False, seed=0, write_ref=True):
    """Create the fake checkpoint and return a summary dict (see the module docstring)."""
    revision = revision or fake_revision(seed, model)
    if not re.match(r'^[0-9a-f]{40}$', revision):
        raise SystemExit('revision must be 40 lowercase hex digits, got %r' % revision)
    repo = os.path.join(cache, 'hub', 'models--' + model.replace('/', '--'))
    snapshot = os.path.join(repo, 'snapshots', revision)
    os.makedirs(snapshot, exist_ok=True)
    os.makedirs(os.path.join(repo, 'refs'), exist_ok=True)
    if blobs:
        os.makedirs(os.path.join(repo, 'blobs'), exist_ok=True)

    def place(rel):
        """Path to write `rel` to: the snapshot itself, or a blob the snapshot links to."""
        dest = os.path.join(snapshot, rel)
        if not blobs:
            return dest
        blob = os.path.join(repo, 'blobs', hashlib.sha256(('%s:%s:%s' % (seed, revision, rel)).encode()).hexdigest())
        if os.path.lexists(dest):
            os.unlink(dest)
        os.symlink(os.path.relpath(blob, os.path.dirname(dest)), dest)
        return blob

    names = ['model-%05d-of-%05d.safetensors' % (i + 1, shards) for i in range(shards)]
    weight_map, total = {}, 0
    for i, name in enumerate(names):
        last_sparse = sparse_size > 0 and i == shards - 1
        size = sparse_size if last_sparse else shard_size
        sparse = all_sparse or last_sparse
        tensor = 'model.layers.%d.weight' % i
        write_shard(place(name), seed, name, tensor, size, sparse)
        weight_map[tensor] = name
        total += size
    small = {
        'config.json': {'architectures': ['DeepseekV4ForCausalLM'], 'model_type': 'deepseek_v4',
                        'num_hidden_layers': shards, 'torch_dtype': 'bfloat16', 'fake': True},
        'generation_config.json': {'do_sample': True, 'temperature': 0.6},
        'tokenizer_config.json': {'model_max_length': 131072, 'tokenizer_class': 'PreTrainedTokenizerFast'},
        'tokenizer.json': {'version': '1.0', 'model': {'type': 'BPE', 'seed': seed}},
        'model.safetensors.index.json': {'metadata': {'total_size': total}, 'weight_map': weight_map},
    }
    for rel, content in sorted(small.items()):
        with open(place(rel), 'w') as f:
            f.write(json.dumps(content, indent=2, sort_keys=True) + '\n')
    if write_ref:
        with open(os.path.join(repo, 'refs', 'main'), 'w') as f:
            f.write(revision)  # huggingface_hub writes the bare id, no newline

    apparent = allocated = 0
    for dirpath, _dirs, files in os.walk(snapshot):
        for name in files:
            st = os.stat(os.path.join(dirpath, name))
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return {'model': model, 'revision': revision, 'repo_dir': repo, 'snapshot': snapshot, 'shards': names,
            'files': len(names) + len(small), 'apparent_bytes': apparent, 'allocated_bytes': allocated}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--cache', required=True, help='HF_HOME-like directory; hub/ is created under it')
    p.add_argument('--model', default='dspark-lab/Fake-V4-Flash', help='ORG/NAME')
    p.add_argument('--revision', help='40-hex commit id (default: derived from --seed and --model)')
    p.add_argument('--shards', type=int, default=4)
    p.add_argument('--shard-size', type=parse_size, default=4 * MIB, help='size of each dense shard (default 4M)')
    p.add_argument('--sparse-size', type=parse_size, default=2 * 1024 * MIB,
                   help='apparent size of the last, sparse shard (default 2G; 0 = no sparse shard)')
    p.add_argument('--all-sparse', action='store_true', help='write every shard sparse')
    p.add_argument('--blobs', action='store_true', help='blobs + relative symlinks, like a real HF cache')
    p.add_argument('--no-ref', dest='write_ref', action='store_false', help='do not write refs/main')
    p.add_argument('--seed', type=int, default=0)
    a = p.parse_args(argv)
    summary = generate(a.cache, model=a.model, revision=a.revision, shards=a.shards, shard_size=a.shard_size,
                       sparse_size=a.sparse_size, all_sparse=a.all_sparse, blobs=a.blobs, seed=a.seed,
                       write_ref=a.write_ref)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == '__main__':
    sys.exit(main())
