"""The control plane's pins of the wheels it put on the mirrors: kept whole, changed only by it."""

from __future__ import annotations

import threading

import pytest

from llmgw.errors import ConfigError
from llmgw.mirror.names import NameRefused
from llmgw.mirror.pins import load_pins, pin_wheels

A, B = "a" * 64, "b" * 64


def test_no_file_is_no_pins_and_each_wheel_put_is_pinned(tmp_path) -> None:
    f = tmp_path / "pins.json"
    assert load_pins(f).sha256s() == {}
    assert pin_wheels(f, {"x-1.0-py3-none-any.whl": A}) == []
    pin_wheels(f, {"y-1.0-py3-none-any.whl": B})
    assert load_pins(f).sha256s() == {"x-1.0-py3-none-any.whl": A, "y-1.0-py3-none-any.whl": B}


def test_a_wheel_put_again_with_other_bytes_is_said(tmp_path) -> None:
    f = tmp_path / "pins.json"
    pin_wheels(f, {"x-1.0-py3-none-any.whl": A})
    first = load_pins(f).wheels["x-1.0-py3-none-any.whl"].pinned_at
    assert pin_wheels(f, {"x-1.0-py3-none-any.whl": A}) == []
    assert load_pins(f).wheels["x-1.0-py3-none-any.whl"].pinned_at == first
    assert pin_wheels(f, {"x-1.0-py3-none-any.whl": B}) == ["x-1.0-py3-none-any.whl"]
    assert load_pins(f).sha256s() == {"x-1.0-py3-none-any.whl": B}


def test_two_uploads_at_once_both_land(tmp_path) -> None:
    f = tmp_path / "pins.json"
    names = [f"w{i}-1.0-py3-none-any.whl" for i in range(40)]
    threads = [threading.Thread(target=pin_wheels, args=(f, {n: A})) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(load_pins(f).sha256s()) == set(names)


def test_a_name_or_a_digest_that_is_not_one_is_refused(tmp_path) -> None:
    with pytest.raises(NameRefused):
        pin_wheels(tmp_path / "p.json", {"../x.whl": A})
    with pytest.raises(ValueError):
        pin_wheels(tmp_path / "p.json", {"x-1.0-py3-none-any.whl": "nothex"})
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot be read"):
        load_pins(tmp_path / "broken.json")
