"""Installs the wsync package: `pip install ./python` (offline, with Debian's
setuptools), or `make install`, which copies it where the system's python3
looks. It needs the wsync programs on PATH and libwsync.so.0 beside them."""
from setuptools import setup

setup(
    name="wsync",
    version="0.1.0",
    description="Neural-network weights from a trainer to its workers (wsync's Python side)",
    packages=["wsync"],
    package_data={"wsync": ["py.typed"]},
    python_requires=">=3.9",
    install_requires=["numpy"],
)
