"""Packages are found, not listed: each folder of the design card's top level installs under the
one import name `rentwatch` (app/ as `rentwatch`, widgets/ as `rentwatch.widgets`, probes/ as
`rentwatch.probes`), and every package below them comes along. Metadata is in pyproject.toml."""

from setuptools import find_packages, setup

ROOTS = {"rentwatch": "app", "rentwatch.widgets": "widgets", "rentwatch.probes": "probes"}

packages = []
for name, folder in ROOTS.items():
    packages += [name, *(f"{name}.{sub}" for sub in find_packages(folder))]

setup(packages=packages, package_dir=ROOTS)
