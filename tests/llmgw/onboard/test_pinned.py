"""What node add installs from a mirror: the files pip fetched, each held to the control plane's pin."""

from __future__ import annotations

import pytest

from llmgw.onboard.events import OnboardError
from llmgw.onboard.pinned import (
    hash_mismatch,
    parse_sums,
    pinned_requirements,
    wheel_requirement,
)

A, B, C = "a" * 64, "b" * 64, "c" * 64
OWN = ("llmgw-0.1.0-py3-none-any.whl", C)
URL = "https://10.0.0.5:7080"


def test_sha256sum_lines_are_read_by_file_name() -> None:
    said = f"{A}  /tmp/s/mirror-wheels/six-1.16.0-py2.py3-none-any.whl\n{B}  /x/y.whl\nnoise\n"
    assert parse_sums(said) == {"six-1.16.0-py2.py3-none-any.whl": A, "y.whl": B}


def test_every_wheel_fetched_is_a_line_with_its_pin() -> None:
    found = {"six-1.16.0-py2.py3-none-any.whl": A, "argon2_cffi-25.1.0-py3-none-any.whl": B}
    found[OWN[0]] = C
    text = pinned_requirements(URL, found, {n: s for n, s in found.items() if n != OWN[0]}, OWN)
    assert text.splitlines() == [
        f"argon2_cffi==25.1.0 --hash=sha256:{B}",
        f"llmgw==0.1.0 --hash=sha256:{C}",
        f"six==1.16.0 --hash=sha256:{A}",
    ]
    assert wheel_requirement(*OWN) == f"llmgw==0.1.0 --hash=sha256:{C}"


def test_a_wheel_replaced_on_the_mirror_is_named_with_both_digests() -> None:
    found = {"six-1.16.0-py2.py3-none-any.whl": B, OWN[0]: C}
    with pytest.raises(OnboardError) as e:
        pinned_requirements(URL, found, {"six-1.16.0-py2.py3-none-any.whl": A}, OWN)
    assert "six-1.16.0-py2.py3-none-any.whl" in e.value.message and URL in e.value.message
    assert "replaced on the mirror" in e.value.message and A in e.value.message
    assert B in e.value.message


def test_a_wheel_nobody_pinned_is_not_installed() -> None:
    found = {"evil-1.0-py3-none-any.whl": A, OWN[0]: C}
    with pytest.raises(OnboardError) as e:
        pinned_requirements(URL, found, {}, OWN)
    assert "pins no sha256 for evil-1.0-py3-none-any.whl" in e.value.message
    assert "llmgw ctl mirror add DIR --wheels" in e.value.hint


def test_the_llmgw_wheel_is_held_to_the_control_plane_s_own_build() -> None:
    with pytest.raises(OnboardError, match="llmgw-0.1.0"):
        pinned_requirements(URL, {OWN[0]: A}, {}, OWN)


def test_pip_s_hash_refusal_names_the_files() -> None:
    # pip 23's words (checked on Debian 12's python3 -m venv).
    said = (
        "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have "
        "updated the package versions, please update the hashes. Otherwise, examine the package "
        "contents carefully; someone may have tampered with them.\n"
        "    pyyaml==6.0.4 from file:///tmp/s/mirror-wheels/pyyaml-6.0.4-cp311-cp311-"
        "manylinux2014_x86_64.whl (from -r req.txt (line 57)):\n"
        f"        Expected sha256 {A}\n             Got        {B}\n"
    )
    assert hash_mismatch(said) == ["pyyaml-6.0.4-cp311-cp311-manylinux2014_x86_64.whl"]
    assert hash_mismatch("ERROR: No matching distribution found for x") == []
