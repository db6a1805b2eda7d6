"""Small random Llamas with a locally trained tokenizer, for running vLLM without downloads.

`tiny`: two layers, hidden size 256, a 512-token context; it loads in vLLM in a few seconds
on a CPU and produces noise, which is all that scheduling tests and overhead measurements
need. `small`: four layers, hidden size 512, grouped-query attention, a 1024-token context;
about ten times the compute per token, so that on a CPU the engine, not the HTTP front end,
is what saturates first under load, as on a GPU server. Both use a byte-level BPE vocabulary
of about 1,000 tokens and a chat template. Building one takes 1 to 8 s and needs
`transformers`, `tokenizers` and `torch` (all installed with vLLM).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VOCAB_SIZE = 1024


@dataclass(frozen=True)
class ModelSize:
    """The shape of a generated model."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_length: int  # tokens: max_position_embeddings and the tokenizer's limit


SIZES = {
    "tiny": ModelSize(256, 512, 2, 4, 4, 512),
    "small": ModelSize(512, 1408, 4, 8, 4, 1024),
}
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
_WORD_LIST = (
    "the a an slo token batch prefill decode request latency deadline time queue chunk budget "
    "window server model cache block first between schedule iteration user premium tier "
    "goodput rate fast slow wait run done start end one two three four five six seven eight "
    "nine ten hello world please answer question"
)
WORDS = _WORD_LIST.split()  # the corpus's vocabulary


def make_tiny_llama(out_dir: Path, seed: int = 0, size: str = "tiny") -> Path:
    """Write a random Llama of `size` (a key of `SIZES`) and its tokenizer to `out_dir`
    (created if needed), in the layout `save_pretrained` uses, and return `out_dir`. The same
    seed and size give the same files."""
    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}; known: {', '.join(SIZES)}")
    shape = SIZES[size]
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    tokenizer = _train_tokenizer(seed, shape.max_length)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        max_position_embeddings=shape.max_length,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def _train_tokenizer(seed: int, max_length: int) -> Any:
    """A byte-level BPE tokenizer trained on a made-up corpus, wrapped for `transformers`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(seed), trainer=trainer)
    bos = ("<s>", tokenizer.token_to_id("<s>"))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[bos]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=max_length,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _corpus(seed: int, lines: int = 2000) -> list[str]:
    """Sentences of 4 to 14 words, mostly from `WORDS`, some random letter strings."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"

    def word() -> str:
        if rng.random() < 0.8:
            return rng.choice(WORDS)
        return "".join(rng.choices(letters, k=rng.randint(2, 7)))

    sentences = []
    for _ in range(lines):
        words = [word() for _ in range(rng.randint(4, 14))]
        sentences.append(" ".join(words) + rng.choice(".?!,"))
    return sentences
