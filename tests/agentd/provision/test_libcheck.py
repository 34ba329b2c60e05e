"""ldd's output in plain words: recorded outputs, and ldd run on the real llama-server."""

from __future__ import annotations

import shutil

from agentd.provision.libcheck import LibraryProblem, check_binary, describe, parse_ldd
from tests.agentd.provision.conftest import wheel_bin_dir

# A CUDA build of llama.cpp on a node with the driver but no CUDA runtime.
CUDA_BUILD_WITHOUT_RUNTIME = """\
\tlinux-vdso.so.1 (0x00007ffd5a3f2000)
\tlibllama.so => /opt/llmgw/engines/llama.cpp/b4500-cuda-12.4/build/bin/libllama.so (0x00007f1c2a000000)
\tlibggml.so => /opt/llmgw/engines/llama.cpp/b4500-cuda-12.4/build/bin/libggml.so (0x00007f1c29e00000)
\tlibcudart.so.12 => not found
\tlibcublas.so.12 => not found
\tlibcuda.so.1 => /lib/x86_64-linux-gnu/libcuda.so.1 (0x00007f1c27c00000)
\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f1c27800000)
\tlibcudart.so.12 => not found
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f1c27400000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f1c2a400000)
"""

# An Ubuntu 24.04 build on Ubuntu 20.04 (libstdc++ of GCC 10, glibc 2.31).
NEW_BUILD_ON_AN_OLD_DISTRIBUTION = """\
./llama-server: /lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.29' not found (required by ./llama-server)
./llama-server: /lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.30' not found (required by ./llama-server)
./llama-server: /lib/x86_64-linux-gnu/libstdc++.so.6: version `CXXABI_1.3.13' not found (required by /opt/llmgw/engines/llama.cpp/b4500-cpu/build/bin/libllama.so)
./llama-server: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not found (required by ./llama-server)
./llama-server: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.32' not found (required by /opt/llmgw/engines/llama.cpp/b4500-cpu/build/bin/libggml-base.so)
\tlinux-vdso.so.1 (0x00007ffe0b1c5000)
\tlibllama.so => /opt/llmgw/engines/llama.cpp/b4500-cpu/build/bin/libllama.so (0x00007f0e8e600000)
\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f0e8e3e0000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0e8e1ee000)
"""

STATIC = "\tnot a dynamic executable\n"


def test_missing_libraries_are_named_once_each():
    problems = parse_ldd(CUDA_BUILD_WITHOUT_RUNTIME)

    assert problems == [
        LibraryProblem("libcudart.so.12", missing=True),
        LibraryProblem("libcublas.so.12", missing=True),
    ]
    assert describe(problems) == "libcudart.so.12 is missing; libcublas.so.12 is missing"
    assert "CUDA runtime" in problems[0].hint


def test_a_library_too_old_says_the_newest_version_it_needs():
    problems = parse_ldd(NEW_BUILD_ON_AN_OLD_DISTRIBUTION)

    assert [p.words for p in problems] == [
        "libstdc++.so.6 is too old (needs GLIBCXX_3.4.30, CXXABI_1.3.13)",
        "libc.so.6 is too old (needs GLIBC_2.34)",
    ]
    assert problems[0].required_by == ("llama-server", "libllama.so")
    assert "older distribution" in problems[0].hint


def test_a_single_glibcxx_line_reads_as_the_operator_expects():
    line = (
        "/opt/llmgw/engines/llama.cpp/b4500-cpu/build/bin/llama-server: "
        "/usr/lib64/libstdc++.so.6: version `GLIBCXX_3.4.30' not found "
        "(required by /opt/llmgw/engines/llama.cpp/b4500-cpu/build/bin/llama-server)\n"
    )
    assert describe(parse_ldd(line)) == "libstdc++.so.6 is too old (needs GLIBCXX_3.4.30)"


def test_a_static_binary_and_a_healthy_one_have_no_problems():
    assert parse_ldd(STATIC) == []
    healthy = "\n".join(
        ln for ln in CUDA_BUILD_WITHOUT_RUNTIME.splitlines() if "not found" not in ln
    )
    assert parse_ldd(healthy) == []


async def test_the_real_llama_server_from_the_wheel_has_every_library_here():
    assert await check_binary(wheel_bin_dir() / "llama-server") == []


async def test_the_real_llama_server_without_its_libraries_is_missing_them(tmp_path):
    lonely = tmp_path / "llama-server"
    shutil.copy(wheel_bin_dir() / "llama-server", lonely)

    problems = await check_binary(lonely, env={"PATH": "/usr/bin:/bin"})

    assert describe(problems) == "libllama-server-impl.so is missing"
