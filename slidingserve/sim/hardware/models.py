"""The shape of a served model, as far as latency and memory need it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Architecture of a decoder-only transformer, as far as latency and memory need it."""

    name: str  # catalog key, e.g. "llama-3-8b", or the path of its config.json
    num_layers: int
    num_heads: int  # query heads
    num_kv_heads: int  # key/value heads (fewer than query heads under GQA)
    head_dim: int  # elements per head
    hidden_size: int  # elements per token in the residual stream
    intermediate_size: int  # elements per token inside the MLP
    vocab_size: int
    num_params: int  # parameters, embeddings included
    max_model_len: int  # tokens: prompt plus output
    dtype_bytes: int = 2  # bytes per weight and per KV element (bf16/fp16)
    hf_name: str = ""  # Hugging Face repository, where known

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V one token occupies in the cache, over all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights (one copy, before tensor parallelism splits them)."""
        return self.num_params * self.dtype_bytes
