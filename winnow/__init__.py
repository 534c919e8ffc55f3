"""winnow: keep the context of LLM coding agents small and sharp.

Importing winnow never imports torch; training code lives in `winnow.training` and
`winnow.classifier.model` and is imported only when used.
"""

__version__ = "0.1.0"
