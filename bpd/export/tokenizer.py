"""Our sentencepiece model as a Hugging Face fast tokenizer (``tokenizer.json``), so that
``AutoTokenizer.from_pretrained(dir)`` on an exported directory encodes text to the ids our models read.

The pieces, their scores and the normalisation rules (sentencepiece's precompiled character map) come from the
model file itself; ``tokenizers`` runs the same unigram segmentation. The id contract is ours: pad 0, BOS 1,
EOS 2, unk 3 (``bpd.data.tokenizer``). Like ``bpd.data.tokenizer.Tokenizer.encode`` the tokenizer adds no
special token to a source: the harness feeds the encoder the bare pieces and starts the decoder with BOS.
"""

from __future__ import annotations

from pathlib import Path


def spm_to_tokenizers(spm_model: str | Path):
    """A ``tokenizers.Tokenizer`` that segments like the sentencepiece unigram model ``spm_model``."""
    from sentencepiece import sentencepiece_model_pb2
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import Unigram

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(Path(spm_model).read_bytes())
    if proto.trainer_spec.model_type != sentencepiece_model_pb2.TrainerSpec.UNIGRAM:
        raise ValueError(f"{spm_model} is not a unigram sentencepiece model; the export converts unigram models "
                         "(the harness trains those).")
    norm = proto.normalizer_spec
    tok = Tokenizer(Unigram([(p.piece, p.score) for p in proto.pieces], proto.trainer_spec.unk_id,
                            proto.trainer_spec.byte_fallback))
    steps = [normalizers.Precompiled(norm.precompiled_charsmap)] if norm.precompiled_charsmap else []
    if norm.remove_extra_whitespaces:  # sentencepiece drops leading/trailing spaces and collapses runs
        steps += [normalizers.Strip(left=True, right=True), normalizers.Replace(Regex(" {2,}"), " ")]
    tok.normalizer = normalizers.Sequence(steps)
    scheme = "always" if norm.add_dummy_prefix else "never"
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme, split=False)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme=scheme, split=False)
    return tok


def special_tokens(spm_model: str | Path) -> dict[str, str]:
    """The pieces of our four special ids, under the names transformers gives them."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    ids = {"pad_token": sp.pad_id(), "bos_token": sp.bos_id(), "eos_token": sp.eos_id(), "unk_token": sp.unk_id()}
    if min(ids.values()) < 0:
        raise ValueError(f"{spm_model} lacks one of pad/bos/eos/unk ({ids}); train it with bpd's Tokenizer.train.")
    return {name: sp.id_to_piece(i) for name, i in ids.items()}


def hf_tokenizer(spm_model: str | Path):
    """A ``PreTrainedTokenizerFast`` of ``spm_model`` with our special tokens."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=spm_to_tokenizers(spm_model), **special_tokens(spm_model))


def save_hf_tokenizer(spm_model: str | Path, out_dir: str | Path) -> None:
    """Write ``tokenizer.json`` and its config to ``out_dir``, and the sentencepiece model beside them (for
    anything that reads one, such as CTranslate2 users who tokenize with sentencepiece)."""
    out = Path(out_dir)
    hf_tokenizer(spm_model).save_pretrained(out)
    (out / "spm.model").write_bytes(Path(spm_model).read_bytes())
