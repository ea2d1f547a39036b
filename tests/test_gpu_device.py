"""GPU tests on a real driver and device: skipped cleanly where there is none (``gpu`` marker).

Run on a GPU machine with ``.venv/bin/pytest -m gpu tests/test_gpu_device.py``. The kernel tests
need torch with CUDA in the kernel's environment; the CuPy test needs CuPy.
"""

from __future__ import annotations

import hashlib
import os

import pytest
from fixtures_kernels import MAPPED_FILE

from jupyter_gkeresume.errors import InvalidInputError

pytestmark = pytest.mark.gpu


def _torch_has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


# The kernel tests put torch tensors on the GPU: they need a CUDA build of torch, which the fake
# driver of a dry run (scripts/gpu_check.sh) does not give.
needs_torch_cuda = pytest.mark.skipif(not _torch_has_cuda(), reason="torch without CUDA here")


@pytest.fixture(scope="module")
def engine():
    from kernel_hooks.cuda_engine import get_engine

    engine = get_engine()
    assert engine is not None  # the gpu marker already skipped machines without a GPU
    return engine


def test_engine_round_trip_on_the_device(engine):
    nbytes = (300 << 20) + 12345  # several chunks and a ragged tail
    data = os.urandom(nbytes)
    allocation = engine.allocate(nbytes, 0)
    engine.host_to_device(data, allocation.ptr, 0)
    digest = hashlib.sha256()
    sizes = []
    for chunk in engine.device_to_host_chunks(allocation.ptr, nbytes, 0):
        digest.update(chunk)
        sizes.append(len(chunk))
    assert digest.digest() == hashlib.sha256(data).digest()
    assert max(sizes) <= engine.chunk_bytes and sum(sizes) == nbytes


def test_engine_refuses_bad_ranges_on_the_device(engine):
    allocation = engine.allocate(4096, 0)
    with pytest.raises(InvalidInputError, match="not CUDA device memory"):
        engine.device_to_host_chunks(id(object()), 16, 0)
    with pytest.raises(InvalidInputError):
        engine.device_to_host_chunks(allocation.ptr, 4096, engine.device_count)
    assert engine.memory_info(0)[0] > 0


def test_engine_reads_torch_tensors_and_waits_for_their_kernels(engine):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    a = torch.randn(4096, 4096, device="cuda:0")
    b = a @ a  # queued on torch's stream
    engine.synchronize_all()
    assert torch.cuda.current_stream().query()
    storage = b.untyped_storage()
    host = b"".join(bytes(c) for c in engine.device_to_host_chunks(
        storage.data_ptr(), storage.nbytes(), 0))
    assert host == b.cpu().numpy().tobytes()


def test_cupy_array_through_the_interface(engine):
    cupy = pytest.importorskip("cupy")
    from kernel_hooks.cuda_arrays import (
        CudaArrayInfo,
        cuda_array_on_cpu,
        cuda_array_on_device,
        describe_cuda_array,
    )

    source = cupy.arange(6 * 7 * 5, dtype=cupy.float16).reshape(6, 7, 5)[::-1, 1:6:2]
    info = describe_cuda_array(source)
    assert info.module == "cupy" and info.strides is not None
    span = b"".join(bytes(c) for c in engine.device_to_host_chunks(info.span_ptr, info.nbytes, 0))
    record = CudaArrayInfo.from_dict(info.to_dict())
    memory = engine.allocate(record.nbytes, 0)
    engine.host_to_device(span, memory.ptr, 0)
    rebuilt = cuda_array_on_device(record, memory)
    assert isinstance(rebuilt, cupy.ndarray)
    assert cupy.array_equal(rebuilt, source)
    assert (cuda_array_on_cpu(record, bytearray(span)) == cupy.asnumpy(source)).all()


MODEL_CELL = """
import hashlib, json, torch
torch.use_deterministic_algorithms(True, warn_only=True)
torch.manual_seed(0)

class Net(torch.nn.Module):
    def __init__(self, vocab=32000, d=4096, layers=40):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(layers))
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight  # tied weights

    def forward(self, x):
        h = self.emb(x)
        for layer in self.layers:
            h = torch.relu(layer(h)) / 8
        return self.head(h)

with torch.device("cuda"):
    model = Net().half()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-4)
batch = torch.randint(0, 32000, (4, 64), device="cuda")

def train_step():
    loss = torch.nn.functional.cross_entropy(model(batch).float().flatten(0, 1), batch.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()

def state_digest():
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().numpy().tobytes())
    for s in opt.state.values():
        for v in s.values():
            h.update(v.detach().cpu().numpy().tobytes() if torch.is_tensor(v) else repr(v).encode())
    return h.hexdigest()

train_step()
gib = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**30
print(json.dumps({"param_gib": gib}))
"""

AFTER_CELL = """
loss = train_step()
print(json.dumps({"loss": loss, "digest": state_digest(),
                  "rand": torch.randn(4, device="cuda").tolist()}))
"""


@needs_torch_cuda
def test_fp16_model_with_tied_weights_and_optimizer_continues_bit_identically(
    start_kernel, kernel_env
):
    kernel_env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # deterministic cuBLAS, set before CUDA init
    first = start_kernel()
    sizes = first.run_json(MODEL_CELL)
    assert 1.0 < sizes["param_gib"] < 3.0  # ~1.6 GiB of fp16 weights, ~5 GiB with AdamW state
    first.run("import kernel_hooks; kernel_hooks.checkpoint('gpu-model')")
    expected = first.run_json(AFTER_CELL)
    first.kill()

    second = start_kernel()
    second.run("import resource, torch; torch.cuda.init(); torch.empty(1, device='cuda')\n"
               "rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10")
    report = second.run_json(
        "import json, kernel_hooks; r = kernel_hooks.resume('gpu-model'); "
        "print(json.dumps(r.to_dict()))"
    )
    assert report["not_restored"] == [], report
    # The ~5 GiB of VRAM state streamed through the pinned ring: host memory grew far less.
    rss_growth = second.run_json(
        "print(json.dumps((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10)"
        " - rss_before))"
    )
    assert rss_growth < 2 << 30, rss_growth
    facts = second.run_json(
        "print(json.dumps({'tied': model.head.weight is model.emb.weight,"
        " 'opt_sees_model': opt.param_groups[0]['params'][0] is model.emb.weight,"
        " 'devices': sorted({str(p.device) for p in model.parameters()})}))"
    )
    assert facts == {"tied": True, "opt_sees_model": True, "devices": ["cuda:0"]}
    assert second.run_json(AFTER_CELL) == expected


@needs_torch_cuda
def test_cuda_tensors_come_back_on_the_cpu_where_there_is_no_gpu(start_kernel, kernel_env):
    first = start_kernel()
    first.run(
        "import torch, kernel_hooks\n"
        "t = torch.arange(1 << 20, dtype=torch.float16, device='cuda').reshape(1024, 1024)\n"
        "view = t[::2]\n"
        "kernel_hooks.checkpoint('on-gpu')"
    )
    expected = first.run_json("import json; print(json.dumps(t.float().sum().item()))")
    kernel_env["CUDA_VISIBLE_DEVICES"] = ""  # the next pod has no GPU
    second = start_kernel()
    report = second.run_json(
        "import json, kernel_hooks; r = kernel_hooks.resume('on-gpu'); "
        "print(json.dumps(r.to_dict()))"
    )
    assert any("no GPU" in w for w in report["warnings"]), report
    got = second.run_json(
        "print(json.dumps([str(t.device), t.float().sum().item(),"
        " view.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()]))"
    )
    assert got == ["cpu", expected, True]


def test_cupy_array_survives_pause_and_resume(start_kernel):
    pytest.importorskip("cupy")
    first = start_kernel()
    first.run(
        "import cupy, kernel_hooks\n"
        "a = cupy.arange(1 << 20, dtype=cupy.float32).reshape(1024, 1024)[:, ::2]\n"
        "kernel_hooks.checkpoint('cupy')"
    )
    expected = first.run_json("import json; print(json.dumps(float(a.sum())))")
    second = start_kernel()
    second.run("import kernel_hooks; kernel_hooks.resume('cupy')")
    got = second.run_json(
        "import json, cupy; print(json.dumps([type(a).__module__.split('.')[0], float(a.sum()),"
        " list(a.shape)]))"
    )
    assert got == ["cupy", expected, [1024, 512]]


STREAMS_CELL = """
import hashlib, json, torch, kernel_hooks
torch.manual_seed(1)
side = torch.cuda.Stream()
eye = torch.eye(4096, device="cuda")
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):  # still queued on a stream of its own when the checkpoint starts
    late = torch.full((4096, 4096), 3.0, device="cuda")
    for _ in range(20):
        late = late @ eye
lin = torch.nn.Linear(1024, 1024).to("cuda", torch.bfloat16)
opt = torch.optim.AdamW(lin.parameters(), lr=1e-3)
x = torch.randn(16, 1024, device="cuda", dtype=torch.bfloat16)
lin(x).float().square().mean().backward()
opt.step()
kernel_hooks.checkpoint("streams")
"""

STREAMS_AFTER = """
def _digest():
    h = hashlib.sha256(late.cpu().numpy().tobytes())
    for t in [*lin.parameters(), *(v for s in opt.state.values() for v in s.values())]:
        h.update(t.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()
opt.zero_grad(set_to_none=True)
lin(x).float().square().mean().backward()
opt.step()
print(json.dumps({"digest": _digest(), "dtype": str(lin.weight.dtype), "late": late[0, 0].item()}))
"""


@needs_torch_cuda
def test_a_tensor_on_another_stream_and_bf16_adamw_continue_bit_identically(start_kernel):
    """The checkpoint synchronizes every stream (a matmul chain still queued on a side stream is
    captured finished), and a bf16 model with its AdamW state takes the same next step."""
    first = start_kernel()
    first.run(STREAMS_CELL)
    expected = first.run_json(STREAMS_AFTER)
    first.kill()
    second = start_kernel()
    second.run("import kernel_hooks, hashlib, json, torch; kernel_hooks.resume('streams')")
    assert second.run_json(STREAMS_AFTER) == expected
    assert expected["dtype"] == "torch.bfloat16" and expected["late"] == 3.0


MIXED_CELL = """
import json, torch, numpy as np, kernel_hooks
torch.manual_seed(2)
lin = torch.nn.Linear(2048, 2048).cuda()
opt = torch.optim.AdamW(lin.parameters(), lr=1e-3)
table = torch.randn(1 << 22)                  # 16 MiB on the CPU: a mapped blob at resume
rows = np.random.default_rng(0).random(1 << 21)
x = torch.randn(8, 2048, device="cuda")
lin(x).square().mean().backward()
opt.step()
kernel_hooks.checkpoint("mixed")
"""

MIXED_AFTER = """
opt.zero_grad(set_to_none=True)
lin(x).square().mean().backward()
opt.step()
table[0] += 1.0
rows[0] += 1.0
print(json.dumps([lin.weight.double().sum().item(), table.double().sum().item(),
                  float(rows.sum()), str(lin.weight.device)]))
"""


@needs_torch_cuda
def test_a_gpu_model_beside_mapped_cpu_tensors_continues_bit_identically(start_kernel, kernel_env):
    """The CPU storages of a GPU session come back over mapped blobs (copy on write), the GPU
    ones through the engine's ring; the next training step matches and the store stays intact."""
    first = start_kernel()
    first.run(MIXED_CELL)
    expected = first.run_json(MIXED_AFTER)
    first.kill()
    second = start_kernel()
    second.run("import kernel_hooks, json, torch; kernel_hooks.resume('mixed')\n" + MAPPED_FILE)
    where = second.run_json("print(json.dumps([mapped_file(table.data_ptr()),"
                            " mapped_file(rows.ctypes.data)]))")
    assert all(w and w.endswith(".safetensors") for w in where), where
    assert second.run_json(MIXED_AFTER) == expected
    third = start_kernel()  # the writes above copied their pages: the blobs are as written
    third.run("import kernel_hooks, json, torch; kernel_hooks.resume('mixed')")
    assert third.run_json(MIXED_AFTER) == expected
