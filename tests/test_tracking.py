"""The device a row records names the CPU's vector instructions, since a VM's model name may not."""

from __future__ import annotations

import torch

from bpd.tracking import cpu_model

CPUINFO = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu avx2 avx512f {extra}\n"


def test_cpu_model_names_the_vector_instructions(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text(CPUINFO.format(extra="amx_bf16 amx_tile"))
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert cpu_model(info) == "Intel(R) Xeon(R) Processor (AVX512+AMX)"
    info.write_text(CPUINFO.format(extra=""))
    assert cpu_model(info) == "Intel(R) Xeon(R) Processor (AVX512)"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert cpu_model(info) == "Intel(R) Xeon(R) Processor"
    assert cpu_model(tmp_path / "missing")  # no /proc/cpuinfo: the platform's name, never empty


def test_this_machine_reports_what_torch_uses():
    cap = torch.backends.cpu.get_cpu_capability()
    assert cap == "DEFAULT" or f"({cap}" in cpu_model()
