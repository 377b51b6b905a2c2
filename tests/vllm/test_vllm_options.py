"""The vLLM engines' init and update infos refuse what no option means with a weightport.Error
naming it, with the bounds the Publisher, the Subscriber and the CLI use (weightport._options),
before any worker hears of them: never a built-in exception or a value that fails later."""
import math

import pytest

pytest.importorskip("vllm")
import weightport  # noqa: E402
from weightport.vllm.trainer import WeightportTrainerInitInfo  # noqa: E402
from weightport.vllm.worker import WeightportInitInfo, WeightportUpdateInfo  # noqa: E402

HOSTILE = [-1, math.nan, math.inf, 1e308, 2**64, "abc", None]
CASES = ([(WeightportTrainerInitInfo, {"rank": 0}, o) for o in ("world_size", "chunk_bytes", "timeout",
                                                                 "keep_versions")]
         + [(WeightportTrainerInitInfo, {}, "rank")]
         + [(WeightportInitInfo, {}, o) for o in ("timeout", "keep_versions")]
         + [(WeightportUpdateInfo, {"version": 1}, "timeout"), (WeightportUpdateInfo, {}, "version")])


@pytest.mark.parametrize("cls,base,option", CASES, ids=[f"{c.__name__}-{o}" for c, _, o in CASES])
@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_every_option_refuses_what_it_cannot_mean(cls, base, option, value):
    with pytest.raises(weightport.Error, match=option):
        cls(**{**base, option: value})


def test_values_in_bounds_are_kept():
    info = WeightportTrainerInitInfo(rank=1, world_size=2, chunk_bytes=0, timeout=30, keep_versions=2)
    assert (info.rank, info.world_size, info.chunk_bytes, info.timeout, info.keep_versions) == (1, 2, 0, 30.0, 2)
    assert WeightportUpdateInfo(version=3, timeout=0).version == 3
    with pytest.raises(weightport.InvalidArgument, match="rank 2 is outside"):
        WeightportTrainerInitInfo(rank=2, world_size=2)
    with pytest.raises(weightport.InvalidArgument, match="port"):
        WeightportTrainerInitInfo(rank=0, coordinator="127.0.0.1:99999")
