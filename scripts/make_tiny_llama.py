"""Writes a tiny Hugging Face Llama folder and a jsonl corpus to fine-tune it on, with no download:
transformers builds a random LlamaForCausalLM (grouped-query attention, rope_theta 500000, untied
head) and tokenizers trains a Llama-2-style tokenizer (SentencePiece-style BPE with byte fallback)
on the generated corpus. config_templates/finetune_llama.yaml reads what this writes:

    scripts/python scripts/make_tiny_llama.py runs/tiny_llama
    accel launch config_templates/finetune_llama.yaml

OUT/model/ holds config.json, model.safetensors (sharded when --max-shard-size is given),
tokenizer.json and tokenizer_config.json; OUT/corpus.jsonl one {"text": ...} document per line.
"""
import argparse
import json
import os
import random

WORDS = ("the a of and to in is was for on that with as by at from it an be this are which or has had we "
         "model data shard gradient optimizer train step loss layer weight token batch machine rank "
         "learning rate warm up cosine memory offload parameter state checkpoint resume fine tune").split()


def documents(n, seed):
    rng = random.Random(seed)
    for _ in range(n):
        sentences = []
        for _ in range(rng.randint(1, 6)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(4, 16))]
            sentences.append(" ".join(words).capitalize() + rng.choice([".", ".", "!", "?"]))
        yield " ".join(sentences)


def train_tokenizer(corpus, vocab_size):
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers
    specials = ["<unk>", "<s>", "</s>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    byte_pieces = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials + byte_pieces, show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    # As in Llama 2's file: the <0xXX> pieces are vocabulary entries, not added tokens matched in text.
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] in specials]
    return Tokenizer.from_str(json.dumps(spec))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the folder to write (model/ and corpus.jsonl inside)")
    ap.add_argument("--documents", type=int, default=4000)
    ap.add_argument("--vocab-size", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--max-shard-size", default=None, help="e.g. 100KB: save the weights in shards")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    model_dir = os.path.join(args.out, "model")
    os.makedirs(model_dir, exist_ok=True)
    docs = list(documents(args.documents, args.seed))
    with open(os.path.join(args.out, "corpus.jsonl"), "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")

    tok = train_tokenizer(docs, args.vocab_size)
    tok.save(os.path.join(model_dir, "tokenizer.json"))
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, f, indent=2)

    torch.manual_seed(args.seed)
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=args.hidden,
                         intermediate_size=args.hidden * 11 // 4, num_hidden_layers=args.layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                         bos_token_id=tok.token_to_id("<s>"), eos_token_id=tok.token_to_id("</s>"))
    model = LlamaForCausalLM(config)
    kwargs = {"max_shard_size": args.max_shard_size} if args.max_shard_size else {}
    model.save_pretrained(model_dir, safe_serialization=True, **kwargs)
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {model_dir} (LlamaForCausalLM, {n} parameters, vocab {config.vocab_size}) and "
          f"{os.path.join(args.out, 'corpus.jsonl')} ({len(docs)} documents)")


if __name__ == "__main__":
    main()
