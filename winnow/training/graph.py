"""The serving graph: the trained network written out node by node with ONNX Runtime's fused ops.

At a few microseconds per node, a generic export (torch.onnx: ~55 nodes of reshapes, shape
arithmetic and unfused layer norms) spends most of a single unit's latency between kernels.
This writes the same math as `UnitClassifier.forward` in 9 + 12 per layer nodes, with the
fused ops of the com.microsoft domain that ONNX Runtime's CPU provider implements where they
pay (EmbedLayerNormalization, Attention, BiasGelu). tests/test_export.py checks it against
torch.

Inputs (`winnow.serving.classifier.graph_inputs` builds them):
    input_ids  int32 [batch, seq]     right-padded with PAD_ID
    lengths    int32 [batch]          tokens before the padding (the attention's key mask)
    pool       float32 [batch, 1, seq] 1/length on real tokens, 0 on padding (mean pooling)
    features   float32 [batch, 1, n_features]
Output:
    probs      float32 [batch, 1, labels] softmax
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

    from winnow.classifier.model import UnitClassifier

INPUTS = ("input_ids", "lengths", "pool", "features")
OUTPUT = "probs"
MS = "com.microsoft"
OPSET = 17
EPS = 1e-5  # torch.nn.LayerNorm's default


def build_graph(model: UnitClassifier) -> onnx.ModelProto:
    """The eval-mode network of `model` as an ONNX model (weights inline)."""
    from onnx import TensorProto, helper, numpy_helper

    c = model.config
    sd = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    weights: list = []
    nodes: list = []

    def w(name: str, array: np.ndarray) -> str:
        weights.append(numpy_helper.from_array(np.ascontiguousarray(array, np.float32), name))
        return name

    def node(op: str, inputs: list[str], outputs: list[str], domain: str = "", **attrs) -> None:
        nodes.append(helper.make_node(op, inputs, outputs, domain=domain or None, **attrs))

    def add_norm(x: str, bias: str, residual: str, norm: str, total: str, normed: str) -> None:
        """total = x + bias + residual; normed = LayerNorm(total). Three plain nodes: ORT's
        fused SkipLayerNormalization is half as fast here on batches (1.9 vs 0.9 ms per
        128 x 43 tokens) and no faster on one unit."""
        node("Add", [x, w(f"{x}_bias", sd[bias])], [f"{x}_b"])
        node("Add", [f"{x}_b", residual], [total])
        node(
            "LayerNormalization",
            [total, w(f"{normed}_g", sd[norm + "weight"]), w(f"{normed}_b", sd[norm + "bias"])],
            [normed], axis=-1, epsilon=EPS,
        )  # fmt: skip

    # Pre-norm layers: x is the normed input of the next block, h the residual stream.
    node(
        "EmbedLayerNormalization",
        ["input_ids", "", w("tok", sd["tok.weight"]), w("pos", sd["pos.weight"]), "",
         w("norm1_g0", sd["layers.0.norm1.weight"]), w("norm1_b0", sd["layers.0.norm1.bias"])],
        ["x0", "", "h0"], MS, epsilon=EPS,
    )  # fmt: skip
    for i in range(c.n_layers):
        p = f"layers.{i}."
        attn = p + "self_attn."
        node(
            "Attention",
            [f"x{i}", w(f"qkv_w{i}", sd[attn + "in_proj_weight"].T),
             w(f"qkv_b{i}", sd[attn + "in_proj_bias"]), "lengths"],
            [f"attn{i}"], MS, num_heads=c.n_heads,
        )  # fmt: skip
        node("MatMul", [f"attn{i}", w(f"out_w{i}", sd[attn + "out_proj.weight"].T)], [f"ao{i}"])
        # residual + attention, and norm2 of it for the feed-forward block
        add_norm(f"ao{i}", attn + "out_proj.bias", f"h{i}", p + "norm2.", f"r{i}", f"y{i}")
        node("MatMul", [f"y{i}", w(f"ff1_w{i}", sd[p + "linear1.weight"].T)], [f"ff1_{i}"])
        node("BiasGelu", [f"ff1_{i}", w(f"ff1_b{i}", sd[p + "linear1.bias"])], [f"g{i}"], MS)
        node("MatMul", [f"g{i}", w(f"ff2_w{i}", sd[p + "linear2.weight"].T)], [f"ff2_{i}"])
        # the next layer's norm1, or after the last layer the final norm
        nxt = f"layers.{i + 1}.norm1." if i + 1 < c.n_layers else "norm."
        add_norm(f"ff2_{i}", p + "linear2.bias", f"r{i}", nxt, f"h{i + 1}", f"x{i + 1}")
    node("MatMul", ["pool", f"x{c.n_layers}"], ["pooled"])  # masked mean: [B,1,T] @ [B,T,D]
    node("MatMul", ["features", w("feat_w", sd["feat.0.weight"].T)], ["feat_m"])
    node("BiasGelu", ["feat_m", w("feat_b", sd["feat.0.bias"])], ["feat"], MS)
    node("Concat", ["pooled", "feat"], ["joined"], axis=-1)
    node("MatMul", ["joined", w("head1_w", sd["head.1.weight"].T)], ["head1_m"])
    node("BiasGelu", ["head1_m", w("head1_b", sd["head.1.bias"])], ["head1"], MS)
    node("MatMul", ["head1", w("head2_w", sd["head.4.weight"].T)], ["head2_m"])
    node("Add", ["head2_m", w("head2_b", sd["head.4.bias"])], ["logits"])
    node("Softmax", ["logits"], [OUTPUT], axis=-1)

    f32, i32 = TensorProto.FLOAT, TensorProto.INT32
    graph = helper.make_graph(
        nodes,
        "winnow_unit_classifier",
        [
            helper.make_tensor_value_info("input_ids", i32, ["batch", "seq"]),
            helper.make_tensor_value_info("lengths", i32, ["batch"]),
            helper.make_tensor_value_info("pool", f32, ["batch", 1, "seq"]),
            helper.make_tensor_value_info("features", f32, ["batch", 1, c.n_features]),
        ],
        [helper.make_tensor_value_info(OUTPUT, f32, ["batch", 1, c.n_labels])],
        weights,
    )
    proto = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(MS, 1)],
        producer_name="winnow",
    )
    proto.ir_version = 8  # what onnxruntime >= 1.18 (the oldest we support) reads
    return proto


__all__ = ["INPUTS", "OUTPUT", "build_graph"]
