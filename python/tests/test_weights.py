"""The weights dict both ways, without a server: zero-copy views of the C++ buffer, the update
borrowed without a copy when its layout allows, and each wrong input's error."""

import numpy as np
import pytest

import fl
from fl import _fl
from conftest import small_weights


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_views_are_read_only_and_one_buffer_in_model_order():
    views, _ = _fl._round_trip(small_weights())
    assert list(views) == ["dense.weight", "dense.bias", "scale"]
    for name, a in small_weights().items():
        assert views[name].dtype == np.float32
        assert views[name].shape == a.shape
        np.testing.assert_array_equal(views[name], a)
        assert not views[name].flags.writeable
    # Tensors back to back in the C++ payload, in spec order: views of one buffer, not copies.
    assert address(views["dense.bias"]) == address(views["dense.weight"]) + 12 * 4
    assert address(views["scale"]) == address(views["dense.bias"]) + 3 * 4
    with pytest.raises(ValueError, match="read-only"):
        views["dense.bias"][0] = 1


def test_an_update_in_one_buffer_is_borrowed_without_a_copy():
    update = fl.copy_weights(small_weights())
    views, borrowed = _fl._round_trip(update)
    assert borrowed
    # The C++ model is the numpy buffer itself: its views point at the update's memory.
    assert address(views["dense.weight"]) == address(update["dense.weight"])
    np.testing.assert_array_equal(views["scale"], update["scale"])


def test_separate_or_non_float32_arrays_are_copied():
    separate = {k: v.copy() for k, v in small_weights().items()}
    views, borrowed = _fl._round_trip(separate)
    assert not borrowed
    assert address(views["dense.weight"]) != address(separate["dense.weight"])
    doubles = {k: v.astype(np.float64) for k, v in small_weights().items()}
    views, borrowed = _fl._round_trip(doubles)
    assert not borrowed
    np.testing.assert_allclose(views["dense.weight"], doubles["dense.weight"], rtol=1e-7)
    # Buffers in another order than the model's are not one payload: copied.
    flat = fl.empty_weights([("b", (3,)), ("a", (2,))])
    reordered = {"a": flat["a"], "b": flat["b"]}
    assert not _fl._round_trip(reordered)[1]


def test_views_outlive_the_call_that_made_them():
    views, _ = _fl._round_trip(fl.copy_weights(small_weights()))
    kept = views["dense.weight"]
    del views
    np.testing.assert_array_equal(kept, small_weights()["dense.weight"])


def test_wrong_weights_are_refused_with_what_was_wrong():
    with pytest.raises(fl.FlError) as e:
        _fl._round_trip([1, 2])
    assert e.value.code == "INVALID_ARGUMENT"
    assert "dict of name to numpy array" in e.value.message
    with pytest.raises(fl.FlError, match="names must be strings"):
        _fl._round_trip({1: np.zeros(2, np.float32)})
    with pytest.raises(fl.FlError, match="dimension"):
        _fl._round_trip({"w": np.zeros((2, 0), np.float32)})


def test_spec_of_lists_names_and_shapes():
    assert _fl.spec_of(small_weights()) == (
        '[{"name":"dense.weight","shape":[3,4]},{"name":"dense.bias","shape":[3]},'
        '{"name":"scale","shape":[]}]'
    )


def test_safetensors_round_trip(tmp_path):
    path = str(tmp_path / "m.safetensors")
    fl.save_safetensors(path, small_weights())
    back = fl.load_safetensors(path)
    assert list(back) == list(small_weights())
    for name, a in small_weights().items():
        np.testing.assert_array_equal(back[name], a)


def test_a_scalar_stays_a_scalar(tmp_path):
    path = str(tmp_path / "s.safetensors")
    fl.save_safetensors(path, {"s": np.array(3.0)})
    assert fl.load_safetensors(path)["s"].shape == ()
    views, _ = _fl._round_trip({"s": np.array(3, dtype=np.int64)})
    assert views["s"].shape == ()
    assert float(views["s"]) == 3.0
