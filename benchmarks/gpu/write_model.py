"""Write a model directory shaped like Llama-3.1-8B for vLLM's ``--load-format dummy``.

The configuration matches the calibration's model (../../../shared/calibration/README.md, "Model"): 32 layers,
hidden 4096, MLP 14336, 32 query / 8 KV heads of 128, vocabulary 128256, rope theta 500000, bf16, untied
embeddings. Weights are never written: vLLM fills them with random values, so compute equals the real model's.
The tokenizer is a word-level one over the names ``t0`` … ``t128255`` split on whitespace, so the server can
detokenize what it generates; the load generator sends token-id prompts, whose lengths are exact.

Usage: python3 write_model.py DIR [--tiny]
(--tiny: 2 layers, hidden 128, for a CPU rehearsal of the scripts)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB = 128_256
BOS, EOS = 128_000, 128_001

CONFIG: dict[str, object] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "torch_dtype": "bfloat16",
    "vocab_size": VOCAB,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5,
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "initializer_range": 0.02,
    "use_cache": True,
    "bos_token_id": BOS,
    "eos_token_id": EOS,
}


TINY: dict[str, object] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
}


def write(directory: Path, tiny: bool = False) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    directory.mkdir(parents=True, exist_ok=True)
    config = {**CONFIG, **TINY} if tiny else CONFIG
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    names = {f"t{index}": index for index in range(VOCAB)}
    tokenizer = Tokenizer(models.WordLevel(vocab=names, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(directory / "tokenizer.json"))
    special = {"bos_token": f"t{BOS}", "eos_token": f"t{EOS}", "unk_token": "t0"}
    (directory / "special_tokens_map.json").write_text(json.dumps(special, indent=2))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
        **special,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))


if __name__ == "__main__":
    positional = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    target = Path(positional[0] if positional else "/tmp/llama8b-dummy")
    write(target, tiny="--tiny" in sys.argv)
    print(f"model directory written: {target}")
