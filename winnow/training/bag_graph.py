"""The n-gram classifier's serving graph, written node by node (8 nodes, weights inline).

Inputs (`winnow.serving.classifier` builds them from `BagInputs`), flat, no padding:
    ids       int64 [n_ids]            hashed n-gram ids of all units of the batch
    weights   float32 [n_ids, 1]       each id's weight
    segments  int64 [n_ids, 1]         the row (unit) each id belongs to
    dense     float32 [batch, n_dense] hand features of the unit and its neighbours
Output:
    probs     float32 [batch, labels]  softmax(logits / temperature): calibrated

The bag is summed by ScatterND(reduction="add") onto the dense projection: a padded
[batch, seq, hidden] gather spent 3x the time on padding. The embedding table is stored as
float16 (half the file; the gathered rows are cast back to float32, so the sums run in
float32). tests/test_bag_model.py checks the graph against torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

    from winnow.classifier.bag_model import BagClassifier

INPUTS = ("ids", "weights", "segments", "dense")
OUTPUT = "probs"
OPSET = 17


def build_bag_graph(model: BagClassifier, temperature: float = 1.0) -> onnx.ModelProto:
    """The eval-mode `model` as an ONNX model whose softmax runs at `temperature`."""
    from onnx import TensorProto, helper, numpy_helper

    c = model.config
    sd = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    inits = [
        numpy_helper.from_array(sd["bag.weight"].astype(np.float16), "table"),
        numpy_helper.from_array(np.ascontiguousarray(sd["dense.weight"].T), "dense_w"),
        numpy_helper.from_array(sd["dense.bias"], "dense_b"),
        numpy_helper.from_array(np.ascontiguousarray(sd["head.2.weight"].T / temperature), "out_w"),
        numpy_helper.from_array(sd["head.2.bias"] / temperature, "out_b"),
    ]
    n = helper.make_node
    nodes = [
        n("Gather", ["table", "ids"], ["rows16"]),
        n("Cast", ["rows16"], ["rows"], to=TensorProto.FLOAT),
        n("Mul", ["rows", "weights"], ["weighted"]),
        n("Gemm", ["dense", "dense_w", "dense_b"], ["proj"]),
        n("ScatterND", ["proj", "segments", "weighted"], ["pre"], reduction="add"),
        n("Relu", ["pre"], ["hidden"]),
        n("Gemm", ["hidden", "out_w", "out_b"], ["logits"]),
        n("Softmax", ["logits"], [OUTPUT], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "winnow_ngram",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["n_ids"]),
            helper.make_tensor_value_info("weights", TensorProto.FLOAT, ["n_ids", 1]),
            helper.make_tensor_value_info("segments", TensorProto.INT64, ["n_ids", 1]),
            helper.make_tensor_value_info("dense", TensorProto.FLOAT, ["batch", c.n_dense]),
        ],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", c.n_labels])],
        inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    proto.ir_version = 8
    return proto


__all__ = ["INPUTS", "OUTPUT", "build_bag_graph"]
