"""Our Transformer's base model as a Hugging Face ``PegasusForConditionalGeneration`` that computes the same
function.

Why Pegasus: of the encoder-decoder classes that both transformers and CTranslate2's converter know, it is
the one whose layout is ours: pre-norm layers with a final layer norm after each stack, embeddings scaled by
sqrt(d_model), sinusoidal positions counted from 0 with our frequencies, one embedding shared by encoder,
decoder and output projection, no embedding layer norm (mBART has one), no position offset (BART/mBART
learned positions start at 2, M2M100's sinusoids use other frequencies and offsets), biases on every
projection but the output one.

The one difference is where the sinusoids sit: ours interleave sin and cos (dims 2i, 2i + 1), Pegasus puts
every sin first and every cos after (dims i, d/2 + i). A Transformer is equivariant under any permutation of
its residual dimensions (layer norms are per-dimension affine maps of permutation-invariant statistics), so
the export permutes the residual stream of every weight that reads or writes it: the exported model's
states are ours with dimensions reordered and its logits equal ours up to float summation order (~1e-6).
Pegasus keeps its own sinusoid table, so no weight of ours stands in for it: CTranslate2 reads the table the
loaded model has.
"""

from __future__ import annotations

from pathlib import Path

import torch

#: The Pegasus keys our weights do not provide: its own sinusoid tables and the output bias (zeros), and the
#: tied copies of the shared embedding.
DERIVED_KEYS = {"model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight", "final_logits_bias",
                "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"}


def check_exportable(model) -> None:
    """Stop with the reason when ``model`` has a base Pegasus cannot express exactly."""
    c = model.cfg
    problems = []
    if c.positions != "sinusoidal":
        problems.append(f"positions={c.positions!r} (Pegasus has sinusoidal positions only)")
    if not c.share_embeddings or (c.n_output or c.vocab_size) != c.vocab_size:
        problems.append("untied embeddings (Pegasus shares one embedding between encoder, decoder and output)")
    if c.d_model % 2:
        problems.append(f"odd d_model={c.d_model} (the sinusoid layouts differ by more than a permutation)")
    if c.aligned_input:
        problems.append("aligned_input (an image model's input path)")
    if not (model.heads.identity_p1 or model.heads.n_learned == 0):
        problems.append("identity_p1=false (p_1 runs through a head layer that is not part of the base)")
    if not c.n_enc_layers or not c.n_dec_layers:
        problems.append("no encoder or decoder layers")
    if problems:
        raise ValueError("this model cannot be exported as a Hugging Face Pegasus model: " + "; ".join(problems)
                         + ". Export a translation model with the default base options.")


def residual_permutation(d: int) -> torch.Tensor:
    """``new[i] = old[perm[i]]``: our interleaved sin/cos dimensions in Pegasus's sin-first, cos-last order."""
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def pegasus_config(model, max_positions: int = 1024):
    """The ``PegasusConfig`` of ``model``'s base. Generation defaults are plain greedy: Pegasus's own
    (forced EOS, decoder start = pad) would decode something other than our greedy."""
    from transformers import PegasusConfig

    c = model.cfg
    return PegasusConfig(
        vocab_size=c.vocab_size, d_model=c.d_model, max_position_embeddings=max(max_positions, c.max_positions or 0),
        encoder_layers=c.n_enc_layers, decoder_layers=c.n_dec_layers,
        encoder_attention_heads=c.n_heads, decoder_attention_heads=c.n_heads,
        encoder_ffn_dim=c.d_ff, decoder_ffn_dim=c.d_ff, activation_function="relu",
        dropout=c.dropout, attention_dropout=0.0, activation_dropout=0.0,
        scale_embedding=True, tie_word_embeddings=True,
        pad_token_id=c.pad_id, bos_token_id=c.bos_id, eos_token_id=c.eos_id,
        decoder_start_token_id=c.bos_id, forced_eos_token_id=None,
        # Not Pegasus's own fields: CTranslate2's converter reads them (its BART loader) to build a pre-norm
        # spec without an embedding layer norm; the hub's Pegasus configs carry the same two.
        normalize_before=True, normalize_embedding=False,
    )


def pegasus_state_dict(model) -> dict[str, torch.Tensor]:
    """Our base weights under Pegasus's names, residual dimensions permuted (module docstring)."""
    check_exportable(model)
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    perm = residual_permutation(model.cfg.d_model)
    out: dict[str, torch.Tensor] = {"model.shared.weight": sd["tgt_embed.weight"][:, perm]}

    def reads(name: str, ours: str) -> None:  # a linear map from the residual stream (its input columns)
        out[f"{name}.weight"], out[f"{name}.bias"] = sd[f"{ours}.weight"][:, perm], sd[f"{ours}.bias"]

    def writes(name: str, ours: str) -> None:  # a linear map into the residual stream (its output rows)
        out[f"{name}.weight"], out[f"{name}.bias"] = sd[f"{ours}.weight"][perm], sd[f"{ours}.bias"][perm]

    def norm(name: str, ours: str) -> None:
        out[f"{name}.weight"], out[f"{name}.bias"] = sd[f"{ours}.weight"][perm], sd[f"{ours}.bias"][perm]

    def attention(name: str, ours: str, d: int) -> None:
        reads(f"{name}.q_proj", f"{ours}.q")
        kv_w, kv_b = sd[f"{ours}.kv.weight"][:, perm], sd[f"{ours}.kv.bias"]  # fused: keys, then values
        out[f"{name}.k_proj.weight"], out[f"{name}.v_proj.weight"] = kv_w[:d], kv_w[d:]
        out[f"{name}.k_proj.bias"], out[f"{name}.v_proj.bias"] = kv_b[:d], kv_b[d:]
        writes(f"{name}.out_proj", f"{ours}.o")

    d = model.cfg.d_model
    for i in range(model.cfg.n_enc_layers):
        p, q = f"model.encoder.layers.{i}", f"enc_layers.{i}"
        norm(f"{p}.self_attn_layer_norm", f"{q}.ln1")
        attention(f"{p}.self_attn", f"{q}.attn", d)
        norm(f"{p}.final_layer_norm", f"{q}.ln2")
        reads(f"{p}.fc1", f"{q}.ff.fc1")
        writes(f"{p}.fc2", f"{q}.ff.fc2")
    for i in range(model.cfg.n_dec_layers):
        p, q = f"model.decoder.layers.{i}", f"dec_layers.{i}"
        norm(f"{p}.self_attn_layer_norm", f"{q}.ln1")
        attention(f"{p}.self_attn", f"{q}.self_attn", d)
        norm(f"{p}.encoder_attn_layer_norm", f"{q}.ln2")
        attention(f"{p}.encoder_attn", f"{q}.cross_attn", d)
        norm(f"{p}.final_layer_norm", f"{q}.ln3")
        reads(f"{p}.fc1", f"{q}.ff.fc1")
        writes(f"{p}.fc2", f"{q}.ff.fc2")
    norm("model.encoder.layer_norm", "enc_ln")
    norm("model.decoder.layer_norm", "dec_ln")
    return out


def to_pegasus(model, max_positions: int = 1024):
    """A ``PegasusForConditionalGeneration`` (eval mode, float32) with ``model``'s base weights."""
    from transformers import GenerationConfig, PegasusForConditionalGeneration

    hf = PegasusForConditionalGeneration(pegasus_config(model, max_positions)).eval()
    missing, unexpected = hf.load_state_dict(pegasus_state_dict(model), strict=False)
    if unexpected or set(missing) - DERIVED_KEYS:
        raise RuntimeError(f"the Pegasus layout changed under us: missing {sorted(set(missing) - DERIVED_KEYS)}, "
                           f"unexpected {sorted(unexpected)}; pin transformers to the version the export extra names.")
    if hf.lm_head.weight.data_ptr() != hf.model.shared.weight.data_ptr():
        raise RuntimeError("the exported model's output projection is not tied to its embedding.")
    c = model.cfg
    hf.generation_config = GenerationConfig(
        decoder_start_token_id=c.bos_id, bos_token_id=c.bos_id, eos_token_id=c.eos_id, pad_token_id=c.pad_id,
        forced_eos_token_id=None, num_beams=1, do_sample=False, max_length=None,
        max_new_tokens=generation_cap(hf.config.max_position_embeddings, model.k))
    return hf


def generation_cap(positions: int, k: int) -> int:
    """The exported generation config's ``max_new_tokens``: as many tokens as the positions hold once a blockwise
    round's k proposals past the last one fit too. Without it the library's plain ``generate`` stops at its default
    of 20 tokens while the exported blockwise one runs on, so the two would differ; both stop at EOS before it."""
    return positions - 1 - k


def export_hf(model, spm_model: str | Path, out_dir: str | Path, max_positions: int = 1024) -> Path:
    """Write ``model``'s base and its tokenizer to ``out_dir`` (``from_pretrained`` reads both back), and its
    proposal heads with the code that decodes blockwise in ``generate`` where it has heads (``bpd.export.heads``)."""
    from bpd.export.heads import export_heads
    from bpd.export.tokenizer import save_hf_tokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    to_pegasus(model, max_positions).save_pretrained(out)
    save_hf_tokenizer(spm_model, out)
    export_heads(model, out)
    return out
