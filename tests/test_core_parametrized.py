"""Modules with parametrizations (torch/nn/utils/parametrize.py: ``weight_norm``, ``orthogonal``,
``spectral_norm`` of ``torch.nn.utils.parametrizations``) come back and train on identically.
``_inject_new_class`` gives such a module a class whose ``__getstate__`` raises ("only supported
through state_dict()"), so every wav2vec2-family model of transformers
(``Wav2Vec2PositionalConvEmbedding`` applies ``weight_norm``) was left out of a snapshot. The
older hook API (``torch.nn.utils.spectral_norm``, ``weight_norm``) and ``torch.nn.utils.prune``
come back with their weight's autograd graph. In process."""

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


def _hooked() -> torch.nn.Module:
    """Modules with the older hook API (torch/nn/utils/spectral_norm.py ``SpectralNorm``,
    weight_norm.py ``WeightNorm``): a forward pre-hook sets ``weight`` from ``weight_orig`` (and
    the spectral norm's ``u``, ``v`` after a power iteration), or ``weight_g`` and ``weight_v``."""
    torch.manual_seed(0)
    with pytest.warns(FutureWarning):  # weight_norm of torch.nn.utils is deprecated
        old = torch.nn.utils.weight_norm(torch.nn.Linear(4, 4))
    return torch.nn.Sequential(torch.nn.utils.spectral_norm(torch.nn.Linear(4, 4)), old)


def _backward_through_weights(model: torch.nn.Module) -> list[torch.Tensor]:
    """What a backward through the hooks' weights as they are (no forward first) gives the
    parameters behind them."""
    (model[0].weight.sum() + model[1].weight.sum()).backward()
    return [model[0].weight_orig.grad, model[1].weight_g.grad, model[1].weight_v.grad]


def test_a_hook_weight_comes_back_with_its_graph(tmp_path):
    """A forward without ``backward()`` (a GAN's generator sampled for a look) leaves the hook's
    ``weight`` holding an autograd graph to the parameters. The resume computes it again from
    them: the graph is back, the verdict ``exact`` (it was ``partial``, found by a probe)."""
    model = _hooked()
    model(torch.randn(2, 4))
    root = str(tmp_path / "store")
    kernel_hooks.checkpoint(namespace={"model": model}, store=root, workspace="ws")
    expected_weights = [model[0].weight.detach().clone(), model[1].weight.detach().clone()]
    expected_grads = _backward_through_weights(model)

    restored: dict = {}
    resumed = kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    assert resumed.verdict["level"] == "exact", resumed.verdict
    again = restored["model"]
    assert [type(again[0].weight.grad_fn).__name__, again[1].weight.grad_fn] != ["NoneType", None]
    assert torch.equal(again[0].weight, expected_weights[0])
    assert torch.equal(again[1].weight, expected_weights[1])
    for got, expected in zip(_backward_through_weights(again), expected_grads, strict=True):
        assert torch.equal(got, expected)
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(3, 4, generator=generator)
    assert torch.equal(again(x), model(x))  # the power iteration goes on from the same u, v


def test_a_stale_hook_weight_is_named(tmp_path):
    """A weight the hook would no longer compute (its parameters changed since the forward) is
    carried as it is, and its lost graph named."""
    model = _hooked()
    model(torch.randn(2, 4))
    with torch.no_grad():
        model[0].weight_orig.add_(1.0)
    root = str(tmp_path / "store")
    kernel_hooks.checkpoint(namespace={"model": model}, store=root, workspace="ws")
    restored: dict = {}
    resumed = kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    assert resumed.verdict["level"] == "partial", resumed.verdict
    reasons = str(resumed.verdict["reasons"])
    assert "autograd graph (DivBackward0)" in reasons and "WeightNorm" not in reasons, reasons
    assert torch.equal(restored["model"][0].weight, model[0].weight.detach())


def test_a_pruned_model_not_yet_run_comes_back_with_its_graph(tmp_path):
    """torch/nn/utils/prune.py sets ``weight = weight_mask * weight_orig`` when a pruning is
    applied, a tensor with an autograd graph: the pruning tutorial's model, cut before it ran
    again, came back ``partial`` and its weight a leaf. It comes back computed again, graph and
    all, for one pruning and for two in a row (a ``PruningContainer``)."""
    from torch.nn.utils import prune

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    prune.l1_unstructured(model[0], "weight", amount=0.5)
    prune.random_unstructured(model[0], "weight", amount=0.25)
    prune.ln_structured(model[1], "weight", amount=0.5, n=2, dim=0)
    root = str(tmp_path / "store")
    kernel_hooks.checkpoint(namespace={"model": model}, store=root, workspace="ws")
    restored: dict = {}
    resumed = kernel_hooks.resume(namespace=restored, store=root, workspace="ws")
    assert resumed.verdict["level"] == "exact", resumed.verdict
    again = restored["model"]
    for layer, before in zip(again, model, strict=True):
        assert layer.weight.grad_fn is not None and torch.equal(layer.weight, before.weight)
    (again[0].weight.sum() + again[1].weight.sum()).backward()
    assert torch.equal(again[0].weight_orig.grad, again[0].weight_mask)
    assert torch.equal(again[1].weight_orig.grad, again[1].weight_mask)
    x = torch.randn(3, 4)
    assert torch.equal(again(x), model(x))


def test_a_sparsifier_comes_back_with_what_it_prunes(tmp_path):
    """``torch.ao.pruning``'s sparsifiers pickle ``defaults``, ``state`` and ``groups`` only
    (torch/ao/pruning/sparsifier/base_sparsifier.py ``BaseSparsifier.__getstate__``): the
    model it prunes, its config and ``enable_mask_update`` were gone after a resume, under
    ``exact``, and its next ``step()`` raised. The rest of its ``__dict__`` travels beside that
    state, as an optimizer's does."""
    from fixtures_kernels import resumed_in_process
    from torch.ao.pruning import WeightNormSparsifier

    def pruned(step: bool) -> dict:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 16))
        sparsifier = WeightNormSparsifier(sparsity_level=0.5, sparse_block_shape=(1, 4),
                                          zeros_per_block=2)
        sparsifier.prepare(model, [{"tensor_fqn": "0.weight"}])
        sparsifier.step()
        with torch.no_grad():
            model[0].parametrizations.weight.original.add_(1.0)
        if step:
            sparsifier.step()
            sparsifier.squash_mask()
        return {"model": model, "sparsifier": sparsifier}

    restored = resumed_in_process(pruned(step=False), tmp_path)
    restored["sparsifier"].step()
    restored["sparsifier"].squash_mask()
    assert restored["sparsifier"].model is restored["model"]
    assert torch.equal(restored["model"][0].weight, pruned(step=True)["model"][0].weight)
