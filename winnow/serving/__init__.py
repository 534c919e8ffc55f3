"""Serving: the torch-free classifier, the SemanticCompressor, cache-aware compression, HTTP.

Names resolve lazily so that `import winnow.serving` stays cheap and never imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ImportanceClassifier": "winnow.serving.classifier",
    "Prediction": "winnow.serving.classifier",
    "default_model_path": "winnow.serving.classifier",
    "ModelError": "winnow.serving.classifier",
    "SessionClassifier": "winnow.serving.session",
    "SemanticCompressor": "winnow.serving.compressor",
    "CompressionResult": "winnow.serving.compressor",
    "CompressorConfig": "winnow.serving.compressor",
    "MustKeepOverflow": "winnow.serving.compressor",
    "CacheConfig": "winnow.serving.cache",
    "CacheAwareResult": "winnow.serving.cache",
    "to_anthropic": "winnow.serving.render",
    "to_openai": "winnow.serving.render",
    "ExtractiveSummarizer": "winnow.serving.summarizers",
    "AnthropicSummarizer": "winnow.serving.summarizers",
    "OpenAISummarizer": "winnow.serving.summarizers",
    "TokenCounter": "winnow.serving.tokens",
    "default_token_counter": "winnow.serving.tokens",
    "CacheAwareCompressor": "winnow.serving.cache",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'winnow.serving' has no attribute {name!r}")
