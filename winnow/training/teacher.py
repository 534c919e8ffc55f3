"""The distillation teacher: a pretrained sentence encoder from a local folder, frozen, with a
small head over its embeddings, the hand features and the neighbours' embeddings.

    encoder = SentenceEncoder("path/to/all-MiniLM-L6-v2")      # never touches the network
    emb = encoder.embed(texts)                                  # cached on disk by text hash
    teacher = Teacher.fit(units_by_row, emb_rows, labels)       # head trained on gold
    soft = teacher.predict_proba(...)                           # soft labels for the student

The encoder costs ~8 ms a unit on one core, too slow to serve but cheap once: embeddings are
kept in `<cache>/<encoder digest>.npz` keyed by the sha1 of the text the encoder sees, so a
rerun embeds only new texts.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

# Characters of a unit the encoder sees (its head): 128 word pieces cover ~500.
TEACHER_CHARS = 600
TEACHER_MAX_TOKENS = 128


def dir_digest(model_dir: Path) -> dict[str, str]:
    """sha256 of every file under `model_dir` (relative path -> hex), for the model card."""
    out = {}
    for p in sorted(model_dir.rglob("*")):
        if p.is_file() and not p.name.startswith("."):
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            out[str(p.relative_to(model_dir))] = h.hexdigest()
    return out


def teacher_text(text: str) -> str:
    return text[:TEACHER_CHARS]


class SentenceEncoder:
    """A sentence-transformers model loaded from a local folder only (HF_HUB_OFFLINE=1)."""

    def __init__(self, model_dir: str | Path, cache_dir: str | Path | None = None):
        self.model_dir = Path(model_dir).expanduser()
        if not (self.model_dir / "config.json").is_file():
            raise ValueError(f"{self.model_dir}: no config.json; not a sentence encoder folder")
        self.files = dir_digest(self.model_dir)
        self.digest = hashlib.sha256(
            "".join(f"{k}:{v}\n" for k, v in self.files.items()).encode()
        ).hexdigest()[:16]
        self.cache_path = Path(cache_dir) / f"{self.digest}.npz" if cache_dir is not None else None
        self._model = None
        self._cache: dict[str, np.ndarray] = {}
        if self.cache_path is not None and self.cache_path.is_file():
            with np.load(self.cache_path) as z:
                self._cache = dict(zip(z["keys"].tolist(), z["vectors"]))

    def _load(self):
        if self._model is None:
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as e:
                raise ValueError(
                    "the teacher needs sentence-transformers: pip install 'winnow[teacher]'"
                ) from e
            self._model = SentenceTransformer(
                str(self.model_dir), device="cpu", local_files_only=True
            )
            self._model.max_seq_length = TEACHER_MAX_TOKENS
        return self._model

    def embed(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """[len(texts), dim] unit-norm float32 embeddings of each text's head."""
        heads = [teacher_text(t) for t in texts]
        keys = [hashlib.sha1(h.encode("utf-8", "surrogatepass")).hexdigest() for h in heads]
        todo = sorted({k: h for k, h in zip(keys, heads) if k not in self._cache}.items())
        if todo:
            model = self._load()
            # Shortest first: batches pad little.
            todo.sort(key=lambda kv: len(kv[1]))
            vecs = model.encode(
                [h for _, h in todo],
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            for (k, _), v in zip(todo, vecs):
                self._cache[k] = v.astype(np.float32)
            self.save()
        return np.stack([self._cache[k] for k in keys]) if keys else np.zeros((0, 384), np.float32)

    def save(self) -> None:
        if self.cache_path is None or not self._cache:
            return
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        keys = list(self._cache)
        tmp = self.cache_path.with_suffix(".tmp.npz")
        np.savez(
            tmp, keys=np.array(keys, dtype="U40"), vectors=np.stack([self._cache[k] for k in keys])
        )
        tmp.replace(self.cache_path)


class TeacherHead:
    """Multinomial logistic regression over [embedding, previous and next unit's embedding,
    dense features], class-balanced, L2-regularised, fitted full-batch in torch (~1 s where
    scikit-learn's lbfgs took ~40 s a fold on this machine)."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray, mean: np.ndarray, scale: np.ndarray):
        self.weight, self.bias, self.mean, self.scale = weight, bias, mean, scale

    @staticmethod
    def matrix(embeddings: np.ndarray, dense: np.ndarray, units) -> np.ndarray:
        from winnow.classifier.bag import session_order

        prev, nxt = session_order(units)
        zero = np.zeros((1, embeddings.shape[1]), np.float32)
        e = np.concatenate([embeddings, zero])
        return np.concatenate([embeddings, e[prev], e[nxt], dense], axis=1).astype(np.float32)

    @classmethod
    def fit(
        cls, x: np.ndarray, y: np.ndarray, seed: int = 0, l2: float = 1e-2, steps: int = 100
    ) -> TeacherHead:
        import torch
        import torch.nn.functional as F

        from winnow.data.schema import CATEGORIES

        torch.manual_seed(seed)
        mean, scale = x.mean(0), x.std(0) + 1e-3
        xt = torch.from_numpy((x - mean) / scale)
        yt = torch.from_numpy(y.astype(np.int64))
        counts = np.bincount(y, minlength=len(CATEGORIES)).astype(np.float64)
        cw = np.where(counts > 0, counts.sum() / np.maximum(counts, 1) / (counts > 0).sum(), 0.0)
        cwt = torch.tensor(cw, dtype=torch.float32)
        w = torch.zeros(x.shape[1], len(CATEGORIES), requires_grad=True)
        b = torch.zeros(len(CATEGORIES), requires_grad=True)
        opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=steps, history_size=20,
                                line_search_fn="strong_wolfe")  # fmt: skip

        def closure():
            opt.zero_grad()
            loss = F.cross_entropy(xt @ w + b, yt, weight=cwt) + l2 * (w * w).sum()
            loss.backward()
            return loss

        opt.step(closure)
        return cls(w.detach().numpy(), b.detach().numpy(), mean, scale)

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        z = ((x - self.mean) / self.scale) @ self.weight + self.bias
        z -= z.max(1, keepdims=True)
        e = np.exp(z)
        return (e / e.sum(1, keepdims=True)).astype(np.float32)


__all__ = ["SentenceEncoder", "TEACHER_CHARS", "TeacherHead", "dir_digest", "teacher_text"]
