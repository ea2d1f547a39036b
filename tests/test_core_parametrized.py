"""Modules with parametrizations (torch/nn/utils/parametrize.py: ``weight_norm``, ``orthogonal``,
``spectral_norm`` of ``torch.nn.utils.parametrizations``) come back and train on identically.
``_inject_new_class`` gives such a module a class whose ``__getstate__`` raises ("only supported
through state_dict()"), so every wav2vec2-family model of transformers
(``Wav2Vec2PositionalConvEmbedding`` applies ``weight_norm``) was left out of a snapshot. In
process."""

from __future__ import annotations

import pytest
import torch
from torch.nn.utils import parametrizations, parametrize

import kernel_hooks


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        parametrizations.weight_norm(torch.nn.Conv1d(4, 4, 3, padding=1), name="weight", dim=2),
        torch.nn.ReLU(),
        parametrizations.orthogonal(torch.nn.Linear(4, 4)),
    )
    parametrize.register_parametrization(model[2], "bias", _Scale())
    return model


class _Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * x


def _train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> list[float]:
    losses = []
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(2, 4, 4, generator=generator)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_parametrized_modules_come_back_and_train_on(tmp_path):
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    _train(model, optimizer, 2)
    namespace = {"model": model, "optimizer": optimizer, "conv": model[0]}
    root = str(tmp_path / "store")
    result = kernel_hooks.checkpoint(namespace=namespace, store=root, workspace="ws")
    assert not result.skipped, result.skipped
    expected = _train(model, optimizer, 3)

    restored: dict = {}
    resumed = kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    assert resumed.verdict["level"] == "exact", resumed.verdict
    again = restored["model"]
    assert restored["conv"] is again[0]
    assert parametrize.is_parametrized(again[0], "weight")
    assert parametrize.is_parametrized(again[2], "weight") and parametrize.is_parametrized(again[2], "bias")
    assert type(again[0]).__name__ == "ParametrizedConv1d" and isinstance(again[0], torch.nn.Conv1d)
    assert set(dict(again.named_parameters())) == set(dict(model.named_parameters()))
    assert _train(again, restored["optimizer"], 3) == expected


@pytest.fixture
def module_class_as_found():
    """transformers' ``PreTrainedModel.initialize_weights`` (modeling_utils.py) sets
    ``torch.nn.Module.smart_apply`` the first time a model is built: a real patch of one library by
    another, which the patch-finding tests of this same process must not see."""
    before = set(vars(torch.nn.Module))
    yield
    for name in set(vars(torch.nn.Module)) - before:
        delattr(torch.nn.Module, name)


def test_a_wav2vec2_model_comes_back(tmp_path, module_class_as_found):
    """transformers' Wav2Vec2 (models/wav2vec2/modeling_wav2vec2.py,
    ``Wav2Vec2PositionalConvEmbedding``: ``weight_norm(self.conv, name="weight", dim=2)``), tiny."""
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    torch.manual_seed(0)
    config = Wav2Vec2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=37, conv_dim=(8, 8), conv_stride=(5, 2),
                            conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                            num_conv_pos_embedding_groups=2)
    model = Wav2Vec2Model(config).eval()
    audio = torch.randn(1, 800)
    with torch.no_grad():
        expected = model(audio).last_hidden_state
    root = str(tmp_path / "store")
    assert not kernel_hooks.checkpoint(namespace={"model": model}, store=root,
                                       workspace="ws").skipped
    restored: dict = {}
    kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    with torch.no_grad():
        assert torch.equal(restored["model"](audio).last_hidden_state, expected)
