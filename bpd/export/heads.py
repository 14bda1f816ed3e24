"""The proposal heads of a trained model written beside its exported Pegasus base, with the ``custom_generate`` code
that runs blockwise decoding in transformers' ``generate`` (``bpd.export.hf_blockwise``).

What an export with heads holds beside the Pegasus files: ``proposal_heads.safetensors`` (the heads' weights in our
residual order, and the proposal vocabulary when one is set), ``proposal_heads.json`` (architecture, trained k,
tied slots, attention heads) and ``custom_generate/generate.py``. transformers reads none of them unless asked
(``custom_generate=<folder>``, or ``trust_remote_code=True`` when loading): the folder stays a plain Pegasus model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bpd.export import hf_blockwise

FORMAT = 1
#: The head architectures ``hf_blockwise.ProposalHeads`` computes.
EXPORTABLE_ARCHS = ("paper", "blockdiag", "medusa", "recurrent", "attend")


def heads_config(model) -> dict:
    heads = model.heads
    return {"format": FORMAT, "arch": heads.arch, "k": heads.k, "tie_slots": bool(heads.tie_slots),
            "n_heads": model.cfg.n_heads, "d_model": model.cfg.d_model,
            "proposal_vocab": None if heads.proposal_ids is None else int(len(heads.proposal_ids))}


def export_heads(model, out_dir: str | Path) -> bool:
    """Write ``model``'s proposal heads and the ``custom_generate`` code into the exported folder ``out_dir``;
    False (nothing written) for a model without heads."""
    from safetensors.torch import save_file

    heads = model.heads
    if heads.n_learned == 0:
        return False
    if heads.arch not in EXPORTABLE_ARCHS:
        raise ValueError(f"heads.arch={heads.arch} has no transformers implementation in bpd/export/hf_blockwise.py; "
                         f"export heads of {', '.join(EXPORTABLE_ARCHS)}.")
    out = Path(out_dir)
    # One contiguous copy per name: safetensors refuses tensors that share memory (tied slots share none here).
    weights = {name: t.detach().float().clone().contiguous() for name, t in heads.state_dict().items()}
    if heads.proposal_ids is not None:
        weights["proposal_ids"] = heads.proposal_ids.detach().long().clone().contiguous()
    save_file(weights, str(out / hf_blockwise.HEADS_WEIGHTS))
    (out / hf_blockwise.HEADS_CONFIG).write_text(json.dumps(heads_config(model), indent=1) + "\n")
    code = out / "custom_generate"
    code.mkdir(exist_ok=True)
    shutil.copyfile(hf_blockwise.__file__, code / "generate.py")
    return True
