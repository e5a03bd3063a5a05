"""Prefill and mixed steps (chunked prefill): what the engine sends and computes per step."""

import pytest
from helpers import TOY_MODEL as TOY

from microbench.decode_engine import DecodeEngine, no_mark



class RecordingDist:
    """Stands in for torch.distributed at TP=2: records every collective's element count."""

    def __init__(self):
        self.calls = []

    def all_reduce(self, x, group=None):
        self.calls.append(("all_reduce", x.numel()))

    def all_gather_into_tensor(self, out, inp, group=None):
        self.calls.append(("all_gather", out.numel()))


@pytest.mark.parametrize("batch,chunk", [(2, 0), (0, 16), (3, 8)])
def test_each_step_carries_decode_tokens_and_the_chunk(batch, chunk):
    import torch

    from commprof.model.models import get_model

    shape = get_model(TOY).to_dict()
    dist = RecordingDist()
    eng = DecodeEngine(torch, dist, shape, 2, 0, batch, 64, torch.float32, torch.device("cpu"), 2, group=object(),
                       chunk=chunk)
    eng.step(no_mark)
    h, vocab_r = shape["hidden"], eng.vocab_r
    tokens = batch + chunk
    # embedding + 2 per layer all-reduces of (tokens x hidden); one logits all-gather of the rows
    # whose logits are taken (the decode tokens, and the chunk's last token)
    assert dist.calls[:-1] == [("all_reduce", tokens * h)] * (1 + 2 * 2)
    assert dist.calls[-1] == ("all_gather", 2 * (batch + (1 if chunk else 0)) * vocab_r)
    eng.step(no_mark)
    assert eng.pos == 2 and eng.pos_p == 2 * chunk
