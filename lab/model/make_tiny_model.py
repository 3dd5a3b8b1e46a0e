# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Make the lab's tiny model: a random-weight Llama that the real engine (lab/engine, vLLM's CPU build) serves.

    python3 make_tiny_model.py OUT [--no-check]

Runs inside the engine image, which has everything it needs (torch, tokenizers, safetensors, transformers):
lab/model/make.sh runs it there with --network none and caches the result under .lab/model/. No download, no hub.

The model (vLLM's CPU attention supports head size 64; tensor-parallel size 2 divides both head counts):
2 layers, hidden 256, 4 attention heads, 2 KV heads (head size 64), intermediate 512, vocabulary 1024, float32,
weights N(0, 0.02) from a seeded torch generator in two safetensors shards with model.safetensors.index.json;
a 1024-token byte-level BPE tokenizer trained here with `tokenizers` on a generated corpus; a ChatML chat template in
tokenizer_config.json. Everything is seeded: the same script and packages give the same bytes.

OUT gets a Hugging Face hub cache (HF_HOME) holding the repo REPO_ID at one pinned revision, as huggingface_hub
lays out a download: hub/models--dspark-lab--tiny-llama/{blobs/<etag>, snapshots/<revision>/<file> -> ../../blobs/<etag>,
refs/main}. Etags are git's blob sha1 for small files and the sha256 for the safetensors shards (LFS files), as
the hub has them. The revision (40 hex, like a commit) is the sha1 of the snapshot's file list with their etags: it
changes exactly when a file does. Beside hub/: `revision` (the 40 hex), `repo_id`, and `model.json` (repo, revision,
every file's size, sha256 and etag, the config, and a greedy completion by transformers for comparison).
"""

import argparse
import hashlib
import json
import os
import random
import sys
import time

REPO_ID = 'dspark-lab/tiny-llama'
SEED = 20261201
VOCAB = 1024
SPECIAL = ['<|pad|>', '<|begin_of_text|>', '<|end_of_text|>', '<|im_start|>', '<|im_end|>']
PAD, BOS, EOS_TEXT, IM_START, IM_END = range(len(SPECIAL))

CONFIG = {
    'architectures': ['LlamaForCausalLM'],
    'model_type': 'llama',
    'vocab_size': VOCAB,
    'hidden_size': 256,
    'intermediate_size': 512,
    'num_hidden_layers': 2,
    'num_attention_heads': 4,
    'num_key_value_heads': 2,
    'head_dim': 64,
    'hidden_act': 'silu',
    'max_position_embeddings': 2048,
    'rms_norm_eps': 1e-05,
    'rope_theta': 10000.0,
    'attention_bias': False,
    'mlp_bias': False,
    'tie_word_embeddings': False,
    'initializer_range': 0.02,
    'torch_dtype': 'float32',
    'use_cache': True,
    'bos_token_id': BOS,
    'eos_token_id': IM_END,
    'pad_token_id': PAD,
}

# ChatML: what a chat completion renders to before the model sees it.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# The greedy completion recorded in model.json (the engine's answer to the same request can be compared with it).
CHECK_MESSAGES = [{'role': 'user', 'content': 'Say hello to the lab.'}]
CHECK_TOKENS = 16

WORDS = '''
the a an of to in on for with from by at as is are was be been has have had do does did not no yes and or but if
then else when while where which who what why how this that these those it its we you they he she our your their
lab node head worker rank group fabric network cluster engine model token tensor parallel pipeline cache memory
disk image container docker server client request response stream chat completion prompt answer question hello world
spark nvidia cpu gpu core thread process port address interface socket gloo nccl torch vllm python debian bookworm
start stop restart ready health check status verify logs error warning info debug timeout retry connect listen serve
load save read write copy move build test run make install update config setting value default option flag argument
one two three four five six seven eight nine ten hundred thousand first second third last next previous every each
small large tiny big fast slow new old good bad high low long short open close up down left right inside outside
time day hour minute week month year today tomorrow yesterday morning evening night always never often sometimes
say tell ask give take send receive keep hold find lose show hide know think want need like use try help work
weight layer attention head size hidden vocabulary embedding norm projection gate shard index revision commit hash
random seed deterministic offline pinned version release package wheel lock file directory path name label env
'''.split()


def corpus(seed=SEED, lines=6000):
    """Sentences of the word list in a seeded order, numbers and chat markup: enough for a 1024-token BPE."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        words = [rng.choice(WORDS) for _word in range(rng.randint(4, 14))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 99999)))
        sentence = ' '.join(words)
        sentence = sentence[0].upper() + sentence[1:] + rng.choice(['.', '.', '?', '!', ':', ','])
        if i % 7 == 0:
            sentence = '<|im_start|>%s\n%s<|im_end|>\n' % (rng.choice(['system', 'user', 'assistant']), sentence)
        out.append(sentence)
    return out


def train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer=trainer)
    if tok.get_vocab_size() != VOCAB:
        raise SystemExit('the tokenizer has %d tokens, not %d: the corpus is too small' % (tok.get_vocab_size(), VOCAB))
    for i, s in enumerate(SPECIAL):
        assert tok.token_to_id(s) == i, s
    return tok


def weights():
    """Every tensor of LlamaForCausalLM, N(0, 0.02) (norms: ones), drawn in a fixed order from one seeded generator."""
    import torch

    c = CONFIG
    hidden, inter, hd = c['hidden_size'], c['intermediate_size'], c['head_dim']
    q, kv = c['num_attention_heads'] * hd, c['num_key_value_heads'] * hd
    gen = torch.Generator().manual_seed(SEED)

    def normal(*shape):
        return torch.empty(*shape, dtype=torch.float32).normal_(0.0, c['initializer_range'], generator=gen)

    shards = [{'model.embed_tokens.weight': normal(VOCAB, hidden)}, {}]
    for layer in range(c['num_hidden_layers']):
        p = 'model.layers.%d.' % layer
        t = shards[0 if layer < c['num_hidden_layers'] // 2 else 1]
        t[p + 'input_layernorm.weight'] = torch.ones(hidden)
        t[p + 'self_attn.q_proj.weight'] = normal(q, hidden)
        t[p + 'self_attn.k_proj.weight'] = normal(kv, hidden)
        t[p + 'self_attn.v_proj.weight'] = normal(kv, hidden)
        t[p + 'self_attn.o_proj.weight'] = normal(hidden, q)
        t[p + 'post_attention_layernorm.weight'] = torch.ones(hidden)
        t[p + 'mlp.gate_proj.weight'] = normal(inter, hidden)
        t[p + 'mlp.up_proj.weight'] = normal(inter, hidden)
        t[p + 'mlp.down_proj.weight'] = normal(hidden, inter)
    shards[1]['model.norm.weight'] = torch.ones(hidden)
    shards[1]['lm_head.weight'] = normal(VOCAB, hidden)
    return shards


def dump(obj):
    return (json.dumps(obj, indent=2, sort_keys=True) + '\n').encode()


def files():
    """{name: bytes} of the snapshot."""
    from safetensors.torch import save

    out = {}
    shards = weights()
    names = ['model-%05d-of-%05d.safetensors' % (i + 1, len(shards)) for i in range(len(shards))]
    weight_map, total = {}, 0
    for name, tensors in zip(names, shards):
        out[name] = save(tensors, metadata={'format': 'pt'})
        for key, t in tensors.items():
            weight_map[key] = name
            total += t.numel() * t.element_size()
    out['model.safetensors.index.json'] = dump({'metadata': {'total_size': total}, 'weight_map': weight_map})
    out['config.json'] = dump(CONFIG)
    out['generation_config.json'] = dump({'bos_token_id': BOS, 'eos_token_id': IM_END, 'pad_token_id': PAD})
    out['tokenizer.json'] = (train_tokenizer().to_str(pretty=True) + '\n').encode()
    out['tokenizer_config.json'] = dump({
        'tokenizer_class': 'PreTrainedTokenizerFast',
        'bos_token': SPECIAL[BOS], 'eos_token': SPECIAL[IM_END], 'pad_token': SPECIAL[PAD], 'unk_token': None,
        'add_bos_token': False, 'add_eos_token': False, 'clean_up_tokenization_spaces': False,
        'model_max_length': CONFIG['max_position_embeddings'], 'chat_template': CHAT_TEMPLATE,
    })
    out['special_tokens_map.json'] = dump({'bos_token': SPECIAL[BOS], 'eos_token': SPECIAL[IM_END], 'pad_token': SPECIAL[PAD]})
    out['README.md'] = ('# %s\n\nA RANDOM-WEIGHT Llama made by dspark.cluster\'s lab/model/make_tiny_model.py for the lab '
                        '(seed %d). Its answers are noise.\n' % (REPO_ID, SEED)).encode()
    return out


def etag(name, data):
    """The hub's ETag: sha256 for LFS files (the shards), git's blob sha1 otherwise."""
    if name.endswith('.safetensors'):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b'blob %d\0' % len(data) + data).hexdigest()


def write_cache(out, content):
    """Lay out OUT/hub/models--ORG--NAME as huggingface_hub does; return (revision, manifest of the files)."""
    tags = {name: etag(name, data) for name, data in content.items()}
    revision = hashlib.sha1(''.join('%s %s\n' % (n, tags[n]) for n in sorted(tags)).encode()).hexdigest()
    repo = os.path.join(out, 'hub', 'models--' + REPO_ID.replace('/', '--'))
    snapshot = os.path.join(repo, 'snapshots', revision)
    os.makedirs(os.path.join(repo, 'blobs'))
    os.makedirs(snapshot)
    os.makedirs(os.path.join(repo, 'refs'))
    manifest = {}
    for name in sorted(content):
        data = content[name]
        with open(os.path.join(repo, 'blobs', tags[name]), 'wb') as f:
            f.write(data)
        os.symlink(os.path.join('..', '..', 'blobs', tags[name]), os.path.join(snapshot, name))
        manifest[name] = {'size': len(data), 'sha256': hashlib.sha256(data).hexdigest(), 'etag': tags[name],
                          'lfs': name.endswith('.safetensors')}
    with open(os.path.join(repo, 'refs', 'main'), 'w') as f:
        f.write(revision)
    return revision, snapshot, manifest


def check(snapshot):
    """Load the snapshot with transformers (as vLLM will read it) and record a greedy completion."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(snapshot)
    model = AutoModelForCausalLM.from_pretrained(snapshot, dtype=torch.float32)
    prompt = tok.apply_chat_template(CHECK_MESSAGES, tokenize=False, add_generation_prompt=True)
    ids = tok(prompt, return_tensors='pt').input_ids
    with torch.no_grad():
        gen = model.generate(ids, max_new_tokens=CHECK_TOKENS, do_sample=False, pad_token_id=PAD)
    new = gen[0, ids.shape[1]:].tolist()
    return {'messages': CHECK_MESSAGES, 'prompt': prompt, 'prompt_tokens': ids.shape[1], 'max_tokens': CHECK_TOKENS,
            'greedy_token_ids': new, 'greedy_text': tok.decode(new, skip_special_tokens=True),
            'parameters': sum(p.numel() for p in model.parameters())}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    p.add_argument('out', help='empty or missing directory: becomes the HF_HOME holding the model')
    p.add_argument('--no-check', dest='check', action='store_false', help='skip loading it with transformers')
    args = p.parse_args(argv)
    # One thread, no parallel tokenizer training: the same bytes on every run.
    os.environ.setdefault('TOKENIZERS_PARALLELISM', 'false')
    t0 = time.monotonic()
    if os.path.exists(args.out) and os.listdir(args.out):
        raise SystemExit('%s is not empty' % args.out)
    os.makedirs(args.out, exist_ok=True)
    import torch
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    content = files()
    revision, snapshot, manifest = write_cache(args.out, content)
    summary = {'repo_id': REPO_ID, 'revision': revision, 'seed': SEED, 'config': CONFIG, 'files': manifest,
               'snapshot': os.path.relpath(snapshot, args.out), 'versions': versions()}
    if args.check:
        summary['transformers_check'] = check(snapshot)
    with open(os.path.join(args.out, 'model.json'), 'wb') as f:
        f.write(dump(summary))
    for name, value in (('revision', revision), ('repo_id', REPO_ID)):
        with open(os.path.join(args.out, name), 'w') as f:
            f.write(value + '\n')
    print(json.dumps({'repo_id': REPO_ID, 'revision': revision, 'snapshot': summary['snapshot'],
                      'seconds': round(time.monotonic() - t0, 1),
                      'greedy_text': summary.get('transformers_check', {}).get('greedy_text')}))
    return 0


def versions():
    import importlib.metadata as md
    return {d: md.version(d) for d in ('torch', 'tokenizers', 'safetensors', 'transformers')} | {
        'python': '%d.%d.%d' % sys.version_info[:3]}


if __name__ == '__main__':
    sys.exit(main())
