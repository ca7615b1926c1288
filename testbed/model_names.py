"""The real model architectures the testbed knows, by name, and the published parameter
counts their definitions are held to: readable without importing torch (a config's model
name is checked, and the tests are collected, without it; :mod:`testbed.models` builds
them)."""

from __future__ import annotations

MODEL_NAMES = ("resnet50", "vgg16", "vgg11", "wide_resnet101", "bert_base", "gpt2")
"""The architectures :func:`testbed.models.build_model` knows."""

PUBLISHED_PARAMETERS = {
    "resnet50": 25_557_032,
    "vgg16": 138_357_544,
    "vgg11": 132_863_336,
    "wide_resnet101": 126_886_696,
}
"""torchvision's published parameter counts (its model documentation) for the vision models."""


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.model_names")
