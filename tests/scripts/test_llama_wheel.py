"""scripts/llama-wheel.sh chooses the instruction set from what the kernel lists in /proc/cpuinfo
(never -march=native), so an advertised-but-disabled feature (AMX on these VMs) is never used."""

import platform
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "llama-wheel.sh"
AVX512_HOST = "fpu sse sse2 avx avx2 fma f16c bmi2 avx512f avx512cd avx512vl avx512dq avx512bw avx512vbmi avx512_vnni avx512_bf16 avx_vnni"

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the flags are x86-64 ones")


def choice(tmp_path: Path, flags: str | None, force: str | None = None) -> tuple[str, str]:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\n" + (f"flags\t\t: {flags}\n" if flags is not None else ""))
    env = {"CPC_LSP_CPUINFO": str(cpuinfo), "PATH": "/usr/bin:/bin"}
    if force:
        env["CPC_LSP_LLAMA_ISA"] = force
    out = subprocess.run([str(SCRIPT), "--flags"], env=env, capture_output=True, text=True, check=True).stdout.split()
    return out[0], " ".join(out[1:])


def test_an_avx512_cpu_gets_its_vector_extensions_and_never_amx(tmp_path):
    level, flags = choice(tmp_path, AVX512_HOST)
    assert level == "avx512" and "-DGGML_NATIVE=OFF" in flags
    for on in ("AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AVX_VNNI", "AVX2", "FMA"):
        assert f"-DGGML_{on}=ON" in flags
    assert "-DGGML_AMX_TILE=OFF" in flags and "-DGGML_AMX_INT8=OFF" in flags


def test_amx_stays_off_even_when_listed(tmp_path):
    _, flags = choice(tmp_path, AVX512_HOST + " amx_tile amx_int8 amx_bf16")
    assert "AMX_TILE=ON" not in flags and "AMX_INT8=ON" not in flags


def test_an_extension_the_kernel_does_not_list_is_off(tmp_path):
    _, flags = choice(tmp_path, AVX512_HOST.replace(" avx512_bf16", ""))
    assert "-DGGML_AVX512_BF16=OFF" in flags and "-DGGML_AVX512_VNNI=ON" in flags


def test_a_cpu_without_avx512_gets_the_avx2_build(tmp_path):
    level, flags = choice(tmp_path, "fpu sse sse2 avx avx2 fma f16c bmi2 avx512f")  # incomplete AVX-512
    assert level == "avx2" and "-DGGML_AVX2=ON" in flags and "AVX512" not in flags


def test_no_avx2_or_no_flags_at_all_gets_a_baseline_build(tmp_path):
    assert choice(tmp_path, "fpu sse sse2 avx")[0] == "baseline"
    level, flags = choice(tmp_path, None)
    assert level == "baseline" and "-DGGML_AVX2=OFF" in flags


def test_the_avx2_build_can_be_forced(tmp_path):
    level, flags = choice(tmp_path, AVX512_HOST, force="avx2")
    assert level == "avx2" and "AVX512" not in flags


def test_this_machine_gets_a_choice(tmp_path):
    out = subprocess.run([str(SCRIPT), "--flags"], capture_output=True, text=True, check=True).stdout
    assert out.split()[0] in ("avx512", "avx2", "baseline")
