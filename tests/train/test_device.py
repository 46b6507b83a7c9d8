"""The trainer's ``device`` setting: the names it takes, what ``auto`` means on this machine, a
GPU asked for where torch sees none refused in one line before any work, and batches following
the model's device."""

from __future__ import annotations

import pytest

from codedance.errors import SettingsError
from codedance.train.config import load_config
from codedance.train.device import check_device, resolve_device, to_model

pytestmark = pytest.mark.tier("unit")


@pytest.mark.parametrize("name", ["auto", "cpu", "cuda", "cuda:0", "cuda:12"])
def test_device_names_taken(name: str) -> None:
    assert check_device(name) == name
    assert load_config(["testbed"], [f"device={name}"]).device == name


@pytest.mark.parametrize("name", ["gpu", "cuda:", "cuda:x", "mps", ""])
def test_other_names_are_refused_when_the_config_is_made(name: str) -> None:
    with pytest.raises(SettingsError, match="is not auto, cpu, cuda or cuda:N"):
        check_device(name)
    with pytest.raises(SettingsError, match="is not auto, cpu, cuda or cuda:N"):
        load_config(["testbed"], [f"device={name}"])


def test_auto_is_the_gpu_only_where_torch_sees_one() -> None:
    torch = pytest.importorskip("torch")
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(SettingsError, match="torch sees no GPU here"):
            resolve_device("cuda")


def test_a_batch_follows_the_model() -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(2, 2)
    batch = to_model({"input_ids": torch.zeros(1, 3, dtype=torch.long), "n": 3}, model)
    assert batch["input_ids"].device == model.weight.device and batch["n"] == 3
