"""The causal SDPA attention of ``training.attention`` (CPU, ``tiny`` preset, random weights).

Under ``torch.compile`` Transformers' own ``sdpa`` implementation passes a materialised
``(B, 1, S, S)`` mask to ``scaled_dot_product_attention``; the registered implementation must
pass none (``is_causal=True``) and give the same loss as the eager reference attention.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from training.attention import CAUSAL_SDPA, causal_sdpa_mask  # noqa: E402
from training.loss import CausalLMLoss, loss_sum  # noqa: E402
from training.presets import build_model, get_preset  # noqa: E402

pytestmark = pytest.mark.train
VOCAB = 512


def _model(attn: str | None = None):
    torch.manual_seed(0)
    model = build_model(get_preset("tiny"), VOCAB, eos_id=0, pad_id=1)
    if attn is not None:
        model.set_attn_implementation(attn)
    return model.eval()


def _ids(rows: int = 2, seq: int = 64):
    return torch.randint(2, VOCAB, (rows, seq), generator=torch.Generator().manual_seed(1))


def _spy_sdpa(monkeypatch) -> list:
    """Record (mask shape or None, is_causal) of every SDPA call."""
    calls: list = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
        calls.append((None if attn_mask is None else tuple(attn_mask.shape), is_causal))
        return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return calls


def test_the_model_uses_the_registered_causal_attention():
    assert _model().config._attn_implementation == CAUSAL_SDPA


def test_compiled_model_calls_sdpa_without_a_mask_and_matches_the_eager_reference(monkeypatch):
    ids = _ids()
    with torch.no_grad():
        ref_nll, ref_count = loss_sum(CausalLMLoss(_model("eager"), 0), ids, ids)
    torch._dynamo.reset()
    calls = _spy_sdpa(monkeypatch)
    compiled = torch.compile(CausalLMLoss(_model(), 0), backend="eager")
    with torch.no_grad():
        nll, count = loss_sum(compiled, ids, ids)
    torch._dynamo.reset()
    n_layers = get_preset("tiny").num_layers
    assert calls and len(calls) == n_layers, calls
    assert all(call == (None, True) for call in calls), calls
    assert int(count) == int(ref_count)
    assert float(nll) == pytest.approx(float(ref_nll), rel=1e-5)


def test_builtin_sdpa_still_materialises_a_mask_when_compiled(monkeypatch):
    """The premise: without the registered implementation the compiled model gets a mask (if
    a Transformers release stops doing so, this fails and the module can go)."""
    ids = _ids()
    torch._dynamo.reset()
    calls = _spy_sdpa(monkeypatch)
    compiled = torch.compile(CausalLMLoss(_model("sdpa"), 0), backend="eager")
    with torch.no_grad():
        loss_sum(compiled, ids, ids)
    torch._dynamo.reset()
    assert calls and all(shape is not None for shape, _ in calls), calls


def test_mask_function_defers_to_transformers_for_padding_offsets_and_windows():
    from transformers.masking_utils import sdpa_mask

    base = dict(batch_size=2, q_length=6, kv_length=6, q_offset=0, kv_offset=0,
                attention_mask=None, allow_is_causal_skip=True)  # fmt: skip
    assert causal_sdpa_mask(**base) is None
    padding = torch.ones(2, 6, dtype=torch.bool)
    padding[0, :2] = False
    for changed in (
        {"attention_mask": padding},
        {"q_length": 1},
        {"kv_offset": 2, "kv_length": 8, "q_offset": 2},
        {"local_size": 3},
        {"allow_is_causal_skip": False},
    ):
        kwargs = {**base, **changed}
        got, want = causal_sdpa_mask(**kwargs), sdpa_mask(**kwargs)
        if want is None:
            assert got is None, changed
        else:
            assert got is not None and torch.equal(got, want), changed
