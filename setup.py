"""What pyproject.toml cannot say: the top-level prompts/ folder ships inside baton's own package.

The role prompts live in prompts/<role>/{system,compact}.md in a checkout (the project's layout);
the wheel installs them as baton/prompts/ so that no generic top-level `prompts` lands in
site-packages. A `package-dir` mapping is ignored for packages that `packages.find` did not find,
so the package list is computed here. Everything else stays in pyproject.toml."""

from setuptools import find_namespace_packages, setup

PACKAGES = find_namespace_packages(include=["context*", "agents*", "proving*", "scenarios*", "workers*", "baton*",
                                             "importers*"])

setup(packages=[*PACKAGES, "baton.prompts"], package_dir={"baton.prompts": "prompts"})
