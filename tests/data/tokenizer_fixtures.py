"""Tokenizers trained in process by Hugging Face `tokenizers` (no hub), and the text they are checked on.

Four shapes, as the published checkpoints ship them in tokenizer.json:
  gpt2    byte-level BPE, ByteLevel pre-tokenizer with GPT-2's regex, <|endoftext|> special
  llama3  byte-level BPE behind a Split with Llama 3's regex, ignore_merges, <|begin_of_text|> ...
  llama2  SentencePiece-style BPE: Prepend("▁") + Replace(" ", "▁") normalizers, no pre-tokenizer,
          byte_fallback with <0x00>..<0xFF> in the vocabulary, <unk> <s> </s>
  mistral the same model behind a Metaspace pre-tokenizer (prepend_scheme first, split false), and
          an NFC normalizer (combining marks compose before the merges)
generated_text(n_bytes, seed) is deterministic: prose, code, CJK, emoji (with ZWJ sequences and
variation selectors), combining marks, digit runs, whitespace runs (spaces, tabs, CR, LF, NBSP) and
the shapes' special tokens written literally into the text.
"""
import json
import random

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = {
    "gpt2": ["<|endoftext|>"],
    "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
    "llama2": ["<unk>", "<s>", "</s>"],
    "mistral": ["<unk>", "<s>", "</s>"],
}
SHAPES = list(SPECIALS)

_WORDS = ("the of and to in is was for on that with as by at from it an be this are which or has had "
          "tokenizer training model data shard gradient optimizer don't we'll I'M You're it's THEY'VE "
          "naïve café résumé Straße façade coöperate żółć Ελληνικά русский язык العربية עברית हिन्दी").split()
_CJK = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴切举类标投节价"
_HIRAGANA = "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんアイウエオカキクケコ한국어조선말"
_EMOJI = ["😀", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇩🇪", "🤖", "🧪", "✨", "🔥", "☕"]
_COMBINING = ["e\u0301", "a\u0300", "n\u0303", "o\u0308", "u\u0304\u0301", "i\u0307", "A\u030a", "\u1100\u1161\u11a8"]
_SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n", "\u00a0", "\u3000", "    \n  ", "\u2003", "\u200b"]
_PUNCT = list(".,;:!?()[]{}<>\"'`~@#$%^&*-_=+/\\|") + ["...", "--", "->", "=>", "::", "'s", "'LL", "''"]


def _piece(rng, shape):
    r = rng.random()
    if r < 0.40:
        w = rng.choice(_WORDS)
        return w.capitalize() if rng.random() < 0.15 else w
    if r < 0.52:
        return "".join(rng.choice(_CJK) for _ in range(rng.randint(1, 8)))
    if r < 0.56:
        return "".join(rng.choice(_HIRAGANA) for _ in range(rng.randint(1, 6)))
    if r < 0.61:
        return str(rng.randint(0, 10 ** rng.randint(1, 12)))
    if r < 0.66:
        return rng.choice(_EMOJI) * rng.randint(1, 2)
    if r < 0.70:
        return rng.choice(_WORDS[:20]) + rng.choice(_COMBINING)
    if r < 0.78:
        return rng.choice(_PUNCT)
    if r < 0.795:
        return rng.choice(SPECIALS[shape])
    if r < 0.80:
        return chr(rng.randint(0x20, 0x2FFF))  # rare code points: byte fallback / unknown merges
    return rng.choice(_SPACES)


def generated_text(n_bytes, seed, shape="gpt2"):
    """Deterministic text of at least n_bytes UTF-8 bytes, words separated mostly by single spaces."""
    rng = random.Random(seed)
    parts, size = [], 0
    while size < n_bytes:
        p = _piece(rng, shape)
        sep = " " if rng.random() < 0.75 else ""
        parts.append(p + sep)
        size += len((p + sep).encode())
    return "".join(parts)


def generated_documents(n_bytes, seed, shape="gpt2"):
    """The generated text cut into documents of 1..4000 bytes (some begin or end in whitespace)."""
    text = generated_text(n_bytes, seed, shape)
    rng = random.Random(seed + 1)
    docs, i = [], 0
    while i < len(text):
        n = rng.randint(1, 1500)
        docs.append(text[i:i + n])
        i += n
    return docs


def _byte_tokens():
    return [f"<0x{b:02X}>" for b in range(256)]


def train_tokenizer(shape, vocab_size=2000, seed=0):
    """A tokenizer of `shape` trained on 300 KB of generated text; returns a tokenizers.Tokenizer."""
    corpus = generated_documents(300_000, seed + 100, shape)
    specials = SPECIALS[shape]
    if shape in ("gpt2", "llama3"):
        tok = Tokenizer(models.BPE(ignore_merges=(shape == "llama3")))
        if shape == "gpt2":
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        else:
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(corpus, trainer)
        return tok
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if shape == "llama2":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    else:
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials + _byte_tokens(),
                                  limit_alphabet=300, show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    # As in Llama 2's file: the <0xXX> pieces are vocabulary entries, not added tokens matched in text.
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] in specials]
    return Tokenizer.from_str(json.dumps(spec))


def write_tokenizer(shape, path, vocab_size=2000, seed=0):
    train_tokenizer(shape, vocab_size, seed).save(str(path))
    return path
