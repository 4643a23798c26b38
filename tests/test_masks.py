import numpy as np
import pytest

from bertscope.base.errors import MaskSpecError
from bertscope.model.masks import HeadMask, check_ablation


def test_spec_with_heads_and_whole_layers():
    mask = HeadMask.parse("0:3, 2:*", num_layers=4, num_heads=4)
    assert mask.off == {(0, 3), (2, 0), (2, 1), (2, 2), (2, 3)}
    assert mask.spec() == "0:3,2:*"
    gates = mask.gates()
    assert gates.shape == (4, 4) and gates.dtype == np.float32
    assert gates[0, 3] == 0 and gates[2].sum() == 0 and gates.sum() == 16 - 5


@pytest.mark.parametrize("spec", [None, "", " , "])
def test_empty_spec_masks_nothing(spec):
    assert len(HeadMask.parse(spec, 2, 2)) == 0


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("3", "is not LAYER:HEAD"),
        ("a:1", "not a number"),
        ("1:-1", "head -1 in mask item '1:-1' is negative: layers and heads count from 0 \\(this model: 0-11\\)"),
        ("-1:0", "layer -1 .* is negative: layers and heads count from 0"),
        ("1:3_0", "not a number"),
        ("6:0", "layer 6"),
        ("0:12", "head 12"),
        ("1:2:3", "not a number"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec, fragment):
    with pytest.raises(MaskSpecError, match=fragment) as caught:
        HeadMask.parse(spec, num_layers=6, num_heads=12)
    assert "\n" not in str(caught.value)


def test_toggles_return_new_masks():
    mask = HeadMask.none(2, 3)
    one = mask.toggled(1, 2)
    assert one.is_masked(1, 2) and not mask.is_masked(1, 2)
    assert not one.toggled(1, 2).is_masked(1, 2)
    layer_off = one.layer_toggled(0)
    assert layer_off.spec() == "0:*,1:2"
    assert layer_off.layer_toggled(0).spec() == "1:2"


def test_from_gates_round_trip():
    mask = HeadMask.parse("1:0,0:2", 2, 3)
    assert HeadMask.from_gates(mask.gates()) == mask


def test_unknown_ablation():
    assert check_ablation("uniform") == "uniform"
    with pytest.raises(MaskSpecError, match="zero, uniform"):
        check_ablation("mean")
