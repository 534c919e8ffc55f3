"""Package discovery (the rest of the metadata is in pyproject.toml).

Every `winnow.*` package is found automatically; the shipped models live in `models/` at the
top of the repository and install as `winnow.models`, which pyproject.toml alone cannot add
to a package search.
"""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["winnow", "winnow.*"]), "winnow.models"])
