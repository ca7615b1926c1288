"""testbed.models: the architectures' parameter counts against the published numbers, and a
real training step of a small model on the CPU."""

from __future__ import annotations

import pytest
from conftest import require_module

from testbed.model_names import PUBLISHED_PARAMETERS


@pytest.fixture(autouse=True)
def torch():
    """torch (and transformers) at test time, not at collection: every pytest process
    collects this file, and importing them took ~4 s of each."""
    require_module("transformers", "the testbed extra")
    return require_module("torch", "the testbed extra")


@pytest.fixture
def models():
    from testbed import models

    return models


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMETERS))
def test_vision_parameter_counts_match_torchvision(models, name: str) -> None:
    assert models.parameter_count(name) == PUBLISHED_PARAMETERS[name]


def test_vision_tensor_counts(models) -> None:
    # conv+bias pairs and linear layers (VGG); conv + batch-norm (2 tensors) per layer plus
    # the classifier (ResNets): these fix the number of gradient tensors DDP buckets
    assert len(models.parameter_sizes("vgg16")) == 2 * (13 + 3)
    assert len(models.parameter_sizes("vgg11")) == 2 * (8 + 3)
    assert len(models.parameter_sizes("resnet50")) == 3 * 53 + 2
    assert len(models.parameter_sizes("wide_resnet101")) == 3 * 104 + 2


def test_language_models_are_the_transformers_defaults(models) -> None:
    # BERT-base with its masked-LM head (decoder tied to the word embeddings) and GPT-2 small
    # (LM head tied to wte): tied tensors are listed once, as DDP sees them
    assert models.parameter_count("bert_base") == 109_514_298
    assert models.parameter_count("gpt2") == 124_439_808
    names = [n for n, _ in models.parameter_sizes("gpt2")]
    assert names[0] == "transformer.wte.weight" and len(names) == len(set(names))


def test_parameter_sizes_is_registration_order(models) -> None:
    sizes = models.parameter_sizes("vgg11")
    assert sizes[0] == ("features.0.weight", 64 * 3 * 3 * 3)
    assert sizes[1] == ("features.0.bias", 64)
    assert sizes[-2] == ("classifier.6.weight", 4096 * 1000)


def test_unknown_model_and_bad_batch_name_the_field(models) -> None:
    with pytest.raises(models.ModelError, match="^model: one of"):
        models.build_model("alexnet")
    with pytest.raises(models.ModelError, match="^batch:"):
        models.example_batch("vgg11", 0)


def test_real_training_step_on_cpu_changes_the_weights(models, torch) -> None:
    torch.manual_seed(0)
    model = models.build_model("resnet50")
    inputs, loss_fn = models.example_batch("resnet50", 2)
    assert inputs["x"].shape == (2, 3, 224, 224)
    before = model.classifier[1].weight.detach().clone()
    loss = loss_fn(model, inputs)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert not torch.equal(before, model.classifier[1].weight)


def test_language_batch_shapes(models) -> None:
    inputs, _ = models.example_batch("gpt2", 3, seq_len=16)
    assert inputs["input_ids"].shape == (3, 16)
    assert int(inputs["input_ids"].max()) < 50257
