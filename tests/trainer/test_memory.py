"""release_freed_memory hands freed heap pages back: the process's RSS falls after it."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from agentrl_trainer.memory import release_freed_memory


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and calls glibc's malloc_trim")
def test_freed_heap_pages_go_back_to_the_os() -> None:
    # many medium blocks below glibc's mmap threshold, freed on another thread: they stay in that
    # thread's arena (the case of a training step's activations) until trimmed
    held: list[bytearray] = []
    pins: list[bytes] = []  # small live objects between the big blocks: the heap cannot just shrink

    def allocate_and_free() -> None:
        for i in range(3000):
            block = bytearray(100_000)  # ~300 MB in blocks under glibc's mmap threshold
            block[::4096] = b"\x01" * len(block[::4096])  # touch every page
            held.append(block)
            pins.append(bytes(str(i) * 40, "ascii"))
        held.clear()

    t = threading.Thread(target=allocate_and_free)
    t.start()
    t.join()
    before = _rss_mb()
    assert release_freed_memory() is True
    after = _rss_mb()
    assert after < before - 100, (before, after)
    assert len(pins) == 3000


_FRAGMENT = r"""
import sys
from pathlib import Path
from agentrl_trainer.memory import bound_heap_fragmentation

def rss_mb():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

if sys.argv[1] == "bounded":
    assert bound_heap_fragmentation() is True
big = bytearray(8 << 20)  # freed: glibc raises its own threshold past 2 MB blocks
del big
start = rss_mb()
held, pins = [], []
for i in range(200):  # 400 MB in 2 MB blocks, each followed by a small live object
    block = bytearray(2 << 20)
    block[::4096] = b"\x01" * len(block[::4096])
    held.append(block)
    pins.append(bytearray(64 << 10))
held.clear()
print(rss_mb() - start)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and sets glibc's mmap threshold")
def test_bounded_heap_gives_freed_blocks_back_without_a_trim() -> None:
    """A training step's 1-12 MB tensors, freed while smaller ones live between them, stay
    resident under glibc's own (self-raising) mmap threshold; with bound_heap_fragmentation they
    are mapped apart and go back to the OS as they are freed. In a child process: the setting
    is process-wide."""
    import subprocess

    def kept_mb(mode: str) -> float:
        out = subprocess.run([sys.executable, "-c", _FRAGMENT, mode], capture_output=True, text=True, check=True)
        return float(out.stdout.strip())

    default, bounded = kept_mb("default"), kept_mb("bounded")
    assert default > 300, default  # the freed blocks stayed resident
    assert bounded < 50, bounded  # they went back (the 12.5 MB of small live objects remain)


def test_an_engine_copy_reads_the_frozen_weights_of_the_trained_model() -> None:
    """share_frozen_weights: a copy of a LoRA model points its frozen (base) parameters at the
    model's own tensors and keeps its own adapter, so an engine costs no second set of base
    weights and a new adapter loaded into it leaves the trained model alone."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    from agentrl_trainer.distributed import build_copy, share_frozen_weights

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    )
    model = peft.get_peft_model(transformers.LlamaForCausalLM(config), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    copy_ = build_copy(model)
    frozen = {n: p for n, p in model.named_parameters() if not p.requires_grad}
    expected = sum(p.numel() * p.element_size() for p in frozen.values())
    assert share_frozen_weights(copy_, model) == expected
    theirs = dict(copy_.named_parameters())
    assert all(theirs[n].data_ptr() == p.data_ptr() for n, p in frozen.items())
    adapters = [n for n, p in model.named_parameters() if p.requires_grad]
    assert adapters and all(theirs[n].data_ptr() != dict(model.named_parameters())[n].data_ptr() for n in adapters)
    ids = torch.tensor([[1, 5, 9, 3]])
    with torch.no_grad():
        assert torch.allclose(copy_(input_ids=ids).logits, model(input_ids=ids).logits)
        before = {n: p.clone() for n, p in model.named_parameters()}
        for n in adapters:
            theirs[n].add_(1.0)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    assert share_frozen_weights(copy_, model) == 0  # already shared


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads RSS through /proc (psutil)")
def test_the_tree_sample_counts_the_process_and_its_children_apart() -> None:
    """tree_rss (what TreeMemory samples and benchmarks/demo_memory.py records) sums the
    descendants' RSS apart from the process's own: a child holding 200 MB shows in the second."""
    import subprocess

    from agentrl_trainer.memory import TreeMemory, tree_rss

    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; b = bytearray(200_000_000); print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        own, kids, processes = tree_rss()
        assert processes >= 2 and kids >= 190_000_000 and own > 0
        memory = TreeMemory()
        assert memory.sample() >= own + 190_000_000 and memory.peak_processes >= 2
    finally:
        child.kill()
        child.wait()
