"""Serving: the torch-free classifier, the SemanticCompressor, cache-aware compression, the
HTTP service and the API proxy.

Names resolve lazily so that `import winnow.serving` stays cheap and never imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker sees; at run time __getattr__ imports on first use
    from winnow.serving.cache import CacheAwareCompressor, CacheAwareResult, CacheConfig
    from winnow.serving.categorizer import Categorizer, Prediction, load_categorizer
    from winnow.serving.classifier import ImportanceClassifier, ModelError, default_model_path
    from winnow.serving.compressor import (
        CompressionResult,
        CompressorConfig,
        MustKeepOverflow,
        SemanticCompressor,
    )
    from winnow.serving.render import to_anthropic, to_openai
    from winnow.serving.session import SessionClassifier
    from winnow.serving.summarizers import (
        AnthropicSummarizer,
        ExtractiveSummarizer,
        OpenAISummarizer,
    )
    from winnow.serving.tokens import TokenCounter, default_token_counter


_EXPORTS = {
    "ImportanceClassifier": "winnow.serving.classifier",
    "Prediction": "winnow.serving.categorizer",
    "Categorizer": "winnow.serving.categorizer",
    "load_categorizer": "winnow.serving.categorizer",
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

__all__ = [  # the names of _EXPORTS, spelled out for linters and type checkers
    "AnthropicSummarizer",
    "CacheAwareCompressor",
    "CacheAwareResult",
    "CacheConfig",
    "Categorizer",
    "CompressionResult",
    "CompressorConfig",
    "ExtractiveSummarizer",
    "ImportanceClassifier",
    "ModelError",
    "MustKeepOverflow",
    "OpenAISummarizer",
    "Prediction",
    "SemanticCompressor",
    "SessionClassifier",
    "TokenCounter",
    "default_model_path",
    "default_token_counter",
    "load_categorizer",
    "to_anthropic",
    "to_openai",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'winnow.serving' has no attribute {name!r}")
