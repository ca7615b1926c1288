"""Real model architectures by name, randomly initialised and built offline (no weights are
downloaded), plus a synthetic batch and loss for one training step.

* ``resnet50``, ``bert_base``, ``gpt2`` come from Hugging Face ``transformers``
  (``ResNetForImageClassification(ResNetConfig(num_labels=1000))``,
  ``BertForMaskedLM(BertConfig())``, ``GPT2LMHeadModel(GPT2Config())``).
* ``vgg16``, ``vgg11``, ``wide_resnet101`` are plain ``torch.nn`` definitions of the
  published layouts (Simonyan & Zisserman 2015, configurations D and A with a 4096-4096-1000
  classifier; Zagoruyko & Komodakis 2016, ResNet-101 bottlenecks twice as wide), written
  here because torchvision's wheels do not import with our CPU torch; a test holds their
  parameter counts to torchvision's published numbers.

``parameter_sizes(name)`` builds the model on the meta device (no memory, well under a
second, plus ``transformers``' import time) and lists every parameter tensor in
registration order, which is the order DDP buckets from (in reverse).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from testbed.model_names import MODEL_NAMES

DEFAULT_SEQ_LEN = 128
"""Tokens per sequence of the language models' synthetic batch."""

IMAGE_SIDE = 224
"""Height and width (pixels) of the vision models' synthetic images."""

NUM_CLASSES = 1000

LossFn = Callable[[nn.Module, dict[str, torch.Tensor]], torch.Tensor]

_VGG_LAYOUTS: dict[str, tuple[int | str, ...]] = {
    # output channels of each 3x3 convolution; "M" is a 2x2 max-pool
    "vgg11": (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    "vgg16": (
        64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
        512, 512, 512, "M", 512, 512, 512, "M",
    ),
}  # fmt: skip


class ModelError(ValueError):
    """An unknown model name or a bad argument; ``field`` names the argument."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class VGG(nn.Module):
    """VGG: stacks of 3x3 convolutions (with bias) and ReLU, max-pooled between stages,
    adaptively pooled to 7x7, then a three-layer classifier with dropout."""

    def __init__(self, layout: tuple[int | str, ...], num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        stages: list[nn.Module] = []
        channels = 3
        for item in layout:
            if item == "M":
                stages.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                assert isinstance(item, int)
                stages += [nn.Conv2d(channels, item, 3, padding=1), nn.ReLU(inplace=True)]
                channels = item
        self.features = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        hidden = 4096
        self.classifier = nn.Sequential(
            nn.Linear(channels * 7 * 7, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(hidden, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class WideBottleneck(nn.Module):
    """Residual bottleneck: 1x1 reduce to ``width``, 3x3 (carrying the stride), 1x1 expand
    to ``out_channels``, each followed by batch norm; a 1x1 projection on the shortcut when
    the shape changes."""

    def __init__(self, in_channels: int, width: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        skip = x if self.shortcut is None else self.shortcut(x)
        return self.relu(y + skip)


class WideResNet(nn.Module):
    """ResNet with bottleneck blocks ``blocks`` per stage whose inner width is
    ``width_factor`` times ResNet's (64, 128, 256, 512 x factor), outputs 4x the base."""

    def __init__(
        self, blocks: tuple[int, ...], width_factor: int, num_classes: int = NUM_CLASSES
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
        )
        stages: list[nn.Module] = []
        channels = 64
        for i, count in enumerate(blocks):
            base = 64 * 2**i
            layers: list[nn.Module] = []
            for j in range(count):
                stride = 2 if (i > 0 and j == 0) else 1
                layers.append(WideBottleneck(channels, base * width_factor, base * 4, stride))
                channels = base * 4
            stages.append(nn.Sequential(*layers))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.stages(self.stem(x))), 1))


def build_model(name: str) -> nn.Module:
    """The architecture ``name`` (one of :data:`MODEL_NAMES`), randomly initialised on the
    current default device (``with torch.device("meta"):`` for a shape-only model)."""
    if name in _VGG_LAYOUTS:
        return VGG(_VGG_LAYOUTS[name])
    if name == "wide_resnet101":
        return WideResNet((3, 4, 23, 3), width_factor=2)
    if name == "resnet50":
        from transformers import ResNetConfig, ResNetForImageClassification

        return ResNetForImageClassification(ResNetConfig(num_labels=NUM_CLASSES))
    if name == "bert_base":
        from transformers import BertConfig, BertForMaskedLM

        return BertForMaskedLM(BertConfig())
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        return GPT2LMHeadModel(GPT2Config())
    raise ModelError("model", f"one of {', '.join(MODEL_NAMES)}, got {name!r}")


def is_language_model(name: str) -> bool:
    """Whether ``name`` takes token ids (else 3x224x224 images)."""
    return name in ("bert_base", "gpt2")


def parameter_sizes(name: str) -> list[tuple[str, int]]:
    """``(parameter name, elements)`` of every parameter tensor of ``name`` in registration
    order (shared tensors once), from a meta-device build (no memory allocated)."""
    with torch.device("meta"):
        model = build_model(name)
    return [(pname, p.numel()) for pname, p in model.named_parameters()]


def parameter_count(name: str) -> int:
    """Total parameters (elements) of ``name``; float32 gradient bytes are 4x this."""
    return sum(n for _, n in parameter_sizes(name))


def input_description(name: str, seq_len: int = DEFAULT_SEQ_LEN) -> str:
    """Human-readable shape of one sample of :func:`example_batch`."""
    if is_language_model(name):
        return f"{seq_len} token ids"
    return f"3x{IMAGE_SIDE}x{IMAGE_SIDE} float32 image, 1 of {NUM_CLASSES} labels"


def example_batch(
    name: str,
    batch: int,
    seq_len: int = DEFAULT_SEQ_LEN,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> tuple[dict[str, torch.Tensor], LossFn]:
    """A synthetic batch of ``batch`` samples for ``name`` and the loss of one step:
    ``loss = loss_fn(model, inputs)`` (a scalar tensor to call ``backward()`` on).

    Vision models: random images and class labels, cross-entropy of the logits.  Language
    models: random token ids of ``seq_len`` tokens used as their own labels (masked-LM for
    BERT, next-token for GPT-2; the model computes the loss)."""
    if name not in MODEL_NAMES:
        raise ModelError("model", f"one of {', '.join(MODEL_NAMES)}, got {name!r}")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ModelError("batch", f"a positive integer, got {batch!r}")
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 2:
        raise ModelError("seq_len", f"an integer >= 2, got {seq_len!r}")
    gen = torch.Generator().manual_seed(seed)
    if is_language_model(name):
        vocab = 30522 if name == "bert_base" else 50257
        ids = torch.randint(0, vocab, (batch, seq_len), generator=gen).to(device)
        return {"input_ids": ids, "labels": ids.clone()}, _language_loss
    images = torch.randn(batch, 3, IMAGE_SIDE, IMAGE_SIDE, generator=gen).to(device)
    labels = torch.randint(0, NUM_CLASSES, (batch,), generator=gen).to(device)
    return {"x": images, "y": labels}, _vision_loss


def _vision_loss(model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    out: Any = model(inputs["x"])
    logits = out if isinstance(out, torch.Tensor) else out.logits
    return nn.functional.cross_entropy(logits, inputs["y"])


def _language_loss(model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    return model(input_ids=inputs["input_ids"], labels=inputs["labels"]).loss


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.models")
